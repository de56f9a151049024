"""llama-server as the oracle for ngram-mod and ngram-map: the built-in GGUF served with `--spec-type ngram-mod`
(llama.cpp's defaults, and short n-grams that draft often), `ngram-map-k` and `ngram-map-k4v`, and the same
settings on our llama.cpp backend, fed the same prompt ids one after the other (both keep their pools between
requests): equal greedy outputs, and on every reply that runs to the token budget the same numbers of drafted
and accepted tokens (drafted: where no draft of ours held an end-of-sequence id, which we cut after; llama-server
drafts on past it). Prints both sides' acceptance and our tokens/s against plain decoding (figures, not
assertions). Skipped where llama-server is not built (packaging/install.sh builds it)."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from engine.core.config import parse_spec  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.models.sources import default_model_gguf  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from llama_server_kit import SKIP_REASON, LlamaServer, find_llama_server  # noqa: E402

pytestmark = [pytest.mark.skipif(find_llama_server() is None, reason=SKIP_REASON), pytest.mark.model,
              pytest.mark.slow]
N_NEW = 64
TEXTS = ["Repeat this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape.",
         "Write the numbers from 1 to 40, separated by commas.",
         "Write a Python function that adds two numbers, then the same function again with a docstring.",
         "List the days of the week, then list them again in reverse order.",
         "Copy this sentence three times: The quick brown fox jumps over the lazy dog.",
         "Explain how a bicycle works to a child, in detail."]
SETTINGS = ["ngram-mod:k=64", "ngram-mod:k=64,n_match=4,n_min=2,n_max=16", "ngram-map:k=64,size_n=3,size_m=8",
            "ngram-map:k=64,size_n=2,size_m=6,four_values=1"]


def server_args(spec) -> tuple[str, ...]:
    return spec.info.llama_server_args(spec, None)  # a pool's options name no file: no engine needed


def complete(server: LlamaServer, ids: list[int]) -> dict:
    """llama-server's greedy `/completion` of prompt ids, stopping at end-of-sequence as ours does."""
    body = json.dumps({"prompt": ids, "n_predict": N_NEW, "temperature": 0, "return_tokens": True,
                       "cache_prompt": False}).encode()
    request = urllib.request.Request(server.url + "/completion", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


@pytest.fixture(scope="module")
def engine():
    return local_engine(load_model("default", device="cpu", backend="llama.cpp"))


@pytest.fixture(scope="module")
def plain_seconds(engine):
    prompts = [engine.prompt_ids(text) for text in TEXTS]
    started = time.perf_counter()
    produced = sum(len(list(engine.generate_ids(ids, max_new_tokens=N_NEW))[-1].output_ids) for ids in prompts)
    return produced / (time.perf_counter() - started)


@pytest.mark.parametrize("label", SETTINGS)
def test_our_pool_equals_llama_servers(engine, plain_seconds, tmp_path, label):
    spec = parse_spec(label)
    ours, theirs, produced, seconds = [0, 0], [0, 0], 0, 0.0
    with LlamaServer(default_model_gguf(), server_args(spec), log_dir=tmp_path) as server:
        for text in TEXTS:
            ids = engine.prompt_ids(text)
            reply = complete(server, ids)
            started = time.perf_counter()
            events = list(engine.generate_ids(ids, spec=spec, max_new_tokens=N_NEW))
            seconds += time.perf_counter() - started
            finished = events[-1]
            produced += len(finished.output_ids)
            assert list(finished.output_ids) == reply["tokens"], text
            drafted = (finished.stats.drafted_tokens, finished.stats.accepted_tokens)
            timings = reply["timings"]
            served = (timings.get("draft_n", 0), timings.get("draft_n_accepted", 0))
            if finished.stop_reason == "max-new-tokens":  # at an end-of-sequence the counts may differ
                # we cut a draft after an end-of-sequence id (nothing past it can be committed); llama-server
                # drafts on past it: its drafted count is larger by what we cut, and equal where we cut nothing
                cut = any(set(getattr(e, "draft_ids", ())) & set(engine.eos_ids) for e in events)
                assert drafted[1] == served[1], text
                assert drafted[0] == served[0] if not cut else drafted[0] <= served[0], text
            ours = [a + b for a, b in zip(ours, drafted)]
            theirs = [a + b for a, b in zip(theirs, served)]
    assert ours[0] > 0 and theirs[0] > 0
    print(f"\n{label}: SpecScope {ours[1]}/{ours[0]} drafted tokens accepted "
          f"({ours[1] / ours[0]:.0%}), llama-server {theirs[1]}/{theirs[0]} ({theirs[1] / theirs[0]:.0%}); "
          f"{produced / seconds:.0f} tok/s against plain {plain_seconds:.0f} tok/s "
          f"(×{produced / seconds / plain_seconds:.2f})")


def test_bench_compares_with_llama_server_side_by_side(tmp_path, capsys):
    """`specscope bench --compare-llama-server`: llama-server runs plain decoding and each n-gram config it has an
    equal of on the same prompt ids; its acceptance beside ours, equal outputs counted; a config it has no equal
    of (prompt lookup; ngram-mod with k < n_max) is named with the reason, not run."""
    from engine.cli.main import main
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": text, "category": category}) + "\n"
                               for text, category in zip(TEXTS[:3], ("list", "list", "code"))))
    out = tmp_path / "out.json"
    code = main(["bench", "--model", "default", "--backend", "llama.cpp", "--prompts", str(prompts),
                 "--max-new-tokens", "32", "--config", "ngram-mod:k=16,n_match=4,n_min=2,n_max=16",
                 "--config", "ngram-mod:k=4", "--config", "prompt-lookup:k=3", "--compare-llama-server",
                 "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "beside llama-server" in printed
    assert "not compared with llama-server: ngram-mod:k=4" in printed and "k ≥ n_max" in printed
    configs = json.loads(out.read_text())["configs"]
    for label in ("none", "ngram-mod:k=16,n_match=4,n_min=2,n_max=16"):
        row = configs[label]["all"]
        assert row["llama_server_identical"] == row["prompts"] == 3, label
    pool = configs["ngram-mod:k=16,n_match=4,n_min=2,n_max=16"]["all"]
    assert pool["drafted_tokens"] > 0 and pool["llama_server_drafted"] > 0
    print(f"\nbench --compare-llama-server, ngram-mod n_match=4: ours {pool['accepted_tokens']}/"
          f"{pool['drafted_tokens']}, llama-server {pool['llama_server_accepted']}/{pool['llama_server_drafted']}")
    assert "llama_server_identical" not in configs["prompt-lookup:k=3"]["all"]
    assert "llama_server_identical" not in configs["ngram-mod:k=4"]["all"]
