"""llama-server as the oracle for method `assistant` on llama.cpp (tests/fixtures/tiny_gguf.py, kind
gemma4-assistant): on the tiny Gemma 4, our plain output equals llama-server's greedy output for the same prompt
ids, and our `assistant` (k = 3) equals llama-server's `--spec-type draft-mtp -md ASSISTANT.gguf` output (the
assistant in shared-memory mode, reading the target's cache), with the same numbers of drafted and accepted
tokens. Skipped where llama-server is not built (packaging/install.sh builds it)."""

from __future__ import annotations


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


prompts = oracle_prompts


def complete(server: LlamaServer, ids: list[int]) -> dict:
    return complete_ids(server, ids, N_NEW)


def ours(engine, ids: list[int], spec: SpecConfig):
    return list(engine.generate_ids(ids, spec=spec, max_new_tokens=N_NEW))[-1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    target, assistant = build("gemma4-assistant", tmp_path_factory.mktemp("assistant-oracle") / "tiny-gemma4.gguf")
    return target, assistant


def test_assistant_output_and_drafts_equal_llama_servers_draft_mtp(files, tmp_path):
    target, assistant = files
    extra = ("--spec-type", "draft-mtp", "--spec-draft-n-max", str(K), "--spec-draft-n-min", "0",
             "-md", str(assistant))
    engine = local_engine(load_model(str(target), device="cpu"))
    with LlamaServer(target, extra, log_dir=tmp_path, threads=1) as server:
        for ids in prompts():
            reply = complete(server, ids)
            plain = ours(engine, ids, SpecConfig())
            spec = ours(engine, ids, SpecConfig("assistant", k=K, draft=str(assistant)))
            assert list(plain.output_ids) == reply["tokens"] == list(spec.output_ids)
            timings = reply["timings"]
            assert spec.stats.drafted_tokens > 0
            assert (spec.stats.drafted_tokens, spec.stats.accepted_tokens) == \
                (timings["draft_n"], timings["draft_n_accepted"])
