"""llama-server as the oracle for the 2026 models (tests/fixtures/tiny_gguf.py): on the tiny Qwen 3.5-style
hybrid, our plain output equals llama-server's own greedy output for the same prompt ids (`/completion`,
temperature 0), and our `mtp` (k = 3) equals llama-server's `--spec-type draft-mtp` output, with the MTP head
inside the GGUF and in an mtp-*.gguf beside it; llama-server drafts and accepts the same numbers of tokens as
we do. Prints both sides' tokens/s and time per verification (a figure, not a test: machines are noisy).
Skipped where llama-server is not built (packaging/install.sh builds it)."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from engine.core.config import SpecConfig  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from llama_server_kit import (SKIP_REASON, LlamaServer, complete_ids, find_llama_server,  # noqa: E402
                               oracle_prompts, torch_on_engine_threads)
from tests.fixtures.tiny_gguf import build  # noqa: E402

pytestmark = pytest.mark.skipif(find_llama_server() is None, reason=SKIP_REASON)
N_NEW = 48
K = 3


@pytest.fixture(autouse=True)
def engine_threads_for_torch():
    with torch_on_engine_threads():
        yield


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mtp-oracle")
    (inside,) = build("qwen35-mtp", folder / "inside" / "tiny-qwen35-mtp.gguf")
    target, sidecar = build("qwen35-mtp-sidecar", folder / "split" / "tiny-qwen35.gguf")
    (hybrid,) = build("hybrid", folder / "hybrid" / "tiny-hybrid.gguf")  # another model of the same vocabulary
    return {"inside": inside, "split": target, "sidecar": sidecar, "hybrid": hybrid, "folder": folder}


prompts = oracle_prompts


def complete(server: LlamaServer, ids: list[int]) -> dict:
    return complete_ids(server, ids, N_NEW)


def ours(engine, ids: list[int], spec: SpecConfig):
    events = list(engine.generate_ids(ids, spec=spec, max_new_tokens=N_NEW))
    return events[-1]


@pytest.mark.parametrize("where", ["inside", "split"])
def test_mtp_output_and_drafts_equal_llama_servers_draft_mtp(files, tmp_path, where):
    extra = ("--spec-type", "draft-mtp", "--spec-draft-n-max", str(K), "--spec-draft-n-min", "0")
    if where == "split":
        extra += ("-md", str(files["sidecar"]))
    engine = local_engine(load_model(str(files[where]), device="cpu"))
    server_seconds = our_seconds = 0.0
    server_rounds = our_rounds = produced = 0
    with LlamaServer(files[where], extra, log_dir=tmp_path, threads=1) as server:
        for ids in prompts():
            reply = complete(server, ids)
            plain = ours(engine, ids, SpecConfig())
            started = time.perf_counter()
            spec = ours(engine, ids, SpecConfig("mtp", k=K))
            our_seconds += time.perf_counter() - started
            assert list(plain.output_ids) == reply["tokens"] == list(spec.output_ids)
            timings = reply["timings"]
            assert (spec.stats.drafted_tokens, spec.stats.accepted_tokens) == \
                (timings["draft_n"], timings["draft_n_accepted"])
            server_seconds += (timings["prompt_ms"] + timings["predicted_ms"]) / 1000
            server_rounds += N_NEW - timings["draft_n_accepted"]
            our_rounds += spec.stats.target_passes
            produced += N_NEW
    print(f"\nmtp k={K} ({where}), {produced} tokens, 1 thread: SpecScope {produced / our_seconds:.0f} tok/s, "
          f"{1000 * our_seconds / our_rounds:.2f} ms a verification; llama-server {produced / server_seconds:.0f} "
          f"tok/s, {1000 * server_seconds / server_rounds:.2f} ms; ours ÷ theirs "
          f"{(produced / our_seconds) / (produced / server_seconds):.2f}")


def test_plain_output_equals_llama_servers_greedy_output(files, tmp_path):
    engine = local_engine(load_model(str(files["split"]), device="cpu"))
    with LlamaServer(files["split"], (), log_dir=tmp_path, threads=1) as server:
        for ids in prompts():
            assert list(ours(engine, ids, SpecConfig()).output_ids) == complete(server, ids)["tokens"]


def test_bench_compares_mtp_and_a_draft_model_with_llama_servers(files, tmp_path, capsys):
    """`specscope bench --compare-llama-server` on the split fixture: llama-server's draft-mtp with the mtp-*.gguf
    found beside the target, and its draft-simple with the target drafting for itself (and with the GGUF that
    carries the same layers and its MTP layers inside), give our outputs and our drafted and accepted counts.
    With the hybrid fixture as the draft (mostly rejected) the outputs are equal too, but llama-server drafts
    fewer tokens: under draft-simple its recurrent target keeps no per-token states, so after a partly rejected
    draft it restores a checkpoint and runs the kept tokens again, in a round without a draft."""
    from engine.cli.main import main
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": text, "category": category}) + "\n" for text, category in (
        ("Repeat this list exactly, twice: apple, banana, cherry.", "list"), ("Write a Python function.", "code"))))
    out = tmp_path / "out.json"
    same = ["mtp:k=3", f"draft-model:k=3,draft={files['split']}", f"draft-model:k=3,draft={files['inside']}"]
    other = f"draft-model:k=3,draft={files['hybrid']}"
    options = [option for label in (*same, other) for option in ("--config", label)]
    assert main(["bench", "--model", str(files["split"]), "--prompts", str(prompts), "--max-new-tokens",
                 str(N_NEW), *options, "--compare-llama-server", "--json", str(out)]) == 0
    assert "beside llama-server" in capsys.readouterr().out
    configs = json.loads(out.read_text())["configs"]
    for label in ("none", *same, other):
        row = configs[label]["all"]
        assert row["llama_server_identical"] == row["prompts"] == 2, label
    for label in same:
        row = configs[label]["all"]
        assert row["drafted_tokens"] > 0, label
        assert (row["drafted_tokens"], row["accepted_tokens"]) == \
            (row["llama_server_drafted"], row["llama_server_accepted"]), label
    row = configs[other]["all"]
    assert row["accepted_tokens"] < row["drafted_tokens"]  # partly rejected drafts, so llama-server replays
    assert 0 < row["llama_server_drafted"] < row["drafted_tokens"]
    print(f"\nbench --compare-llama-server, {other.split(',')[0]} with the hybrid draft: ours "
          f"{row['accepted_tokens']}/{row['drafted_tokens']}, llama-server "
          f"{row['llama_server_accepted']}/{row['llama_server_drafted']}")
