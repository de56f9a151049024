"""Method `assistant` on llama.cpp, on tiny random GGUFs written here (tests/fixtures/tiny_gguf.py): a Gemma 4
text model and a Gemma 4 assistant for it (gemma4-assistant), which llama.cpp runs in an MTP context sharing
the target's KV cache. Greedy output equals plain decoding token for token, a forced full acceptance and a
rejection at position 0 leave the target (and the assistant's next draft) as fresh ones would be, the assistant
reads the target's cache, and every bad input is one clear line. Skipped where llama-cpp-python is not
installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")

from engine.backends.llama_cpp_assistant import AssistantContext, AssistantWeights  # noqa: E402
from engine.core.config import SpecConfig  # noqa: E402
from engine.core.errors import ConfigError  # noqa: E402
from engine.drafters import make_drafter  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from engine_testkit import SteeredDrafter, check_round_invariants, random_prompt, run  # noqa: E402
from tests.fixtures.tiny_gguf import GEMMA4_SHAPE, write_gemma4_assistant, write_qwen35_gguf  # noqa: E402

N_NEW = 40


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_tokenizer):
    folder = tmp_path_factory.mktemp("gemma4")
    for name in ("pair", "wide", "qwen"):
        (folder / name).mkdir()
    target, assistant = write_gemma4_assistant(folder / "pair" / "tiny-gemma4.gguf", tiny_tokenizer)
    _, wide = write_gemma4_assistant(folder / "wide" / "tiny-gemma4.gguf", tiny_tokenizer, backbone=96)
    qwen = write_qwen35_gguf(folder / "qwen" / "tiny-hybrid.gguf", tiny_tokenizer, mtp=False)
    return {"target": target, "assistant": assistant, "wide": wide, "qwen": qwen}


@pytest.fixture(scope="module")
def target(files):
    return load_model(str(files["target"]), device="cpu")


@pytest.fixture(scope="module")
def draft(files):
    return load_model(str(files["assistant"]), device="cpu")


prompt = random_prompt


@pytest.fixture(scope="module")
def baselines(target):
    engine = local_engine(target)
    return {seed: run(engine, prompt(seed), max_new_tokens=N_NEW)[2] for seed in (1, 2)}


def spec(files, k: int = 3, draft: str = "assistant") -> SpecConfig:
    return SpecConfig("assistant", k=k, draft=str(files[draft]))


def argmax(logits: torch.Tensor) -> int:
    return int(torch.argmax(logits))


# ------------------------------------------------------------------ loading

def test_the_fixtures_load_as_llama_cpp_describes_them(target, draft, files):
    assert target.native.header.architecture == "gemma4"
    assert target.n_layers == GEMMA4_SHAPE["n_layer"] and target.native.n_embd == GEMMA4_SHAPE["n_embd"]
    weights = draft.native
    assert isinstance(weights, AssistantWeights)
    assert (weights.n_embd, weights.backbone, weights.n_layers) == (32, 64, 2)
    assert files["target"].stat().st_size < 2**21 and files["assistant"].stat().st_size < 2**21
    # llama.cpp makes no default context for an assistant (it needs ctx_other): it gets no runner of its own
    lib = weights.lib
    params = lib.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 64
    assert not lib.llama_init_from_model(weights.handle, params)
    with pytest.raises(ConfigError, match="is a Gemma 4 assistant: it has no KV cache of its own") as info:
        draft.new_runner()
    assert "\n" not in str(info.value)


def test_an_assistant_loaded_as_the_target_says_what_to_do(files):
    with pytest.raises(ConfigError, match="runs only beside its Gemma 4 target; load the target"):
        local_engine(load_model(str(files["assistant"]), device="cpu"))


# ------------------------------------------------------------------ greedy equals plain

@pytest.mark.parametrize("k", [1, 2, 3])
def test_assistant_greedy_equals_plain(target, files, baselines, k):
    engine = local_engine(target)
    for seed in (1, 2):
        started, rounds, finished = run(engine, prompt(seed), spec=spec(files, k), max_new_tokens=N_NEW)
        assert list(finished.output_ids) == list(baselines[seed].output_ids), f"k={k} seed {seed}"
        check_round_invariants(rounds, finished)
        stats = finished.stats
        assert stats.drafted_tokens > 0 and 0 < stats.accepted_tokens < stats.drafted_tokens
        assert len(stats.per_position_acceptance) == k
    assert "Gemma 4 assistant on llama.cpp" in " ".join(started.notes)
    assert {r.drafter for r in rounds if r.draft_ids} == {"assistant"}


def test_a_target_context_made_again_is_filled_again(target, files, baselines):
    """Making the assistant's context resets the cells it shares with the target (llama.cpp): on a target
    holding tokens (its context freed and made again since the drafter was), they are fed again."""
    engine = local_engine(target)
    run(engine, prompt(1), spec=spec(files), max_new_tokens=4)
    engine.runner.release()  # the assistant's context goes with it
    _, _, finished = run(engine, prompt(2), spec=spec(files), max_new_tokens=N_NEW)
    assert list(finished.output_ids) == list(baselines[2].output_ids)
    assert engine.drafts._drafter.context.attached.refills == 1


def test_after_release_the_assistant_drafts_as_a_fresh_engines_does(target, files):
    """Engine.release() between runs (every compare and bench run starts so) frees the assistant's context; the
    next generation attaches it again and drafts exactly as a fresh engine's does."""
    fresh = run(local_engine(target), prompt(2), spec=spec(files), max_new_tokens=N_NEW)[1]
    engine = local_engine(target)
    run(engine, prompt(1), spec=spec(files), max_new_tokens=4)
    engine.release()
    again = run(engine, prompt(2), spec=spec(files), max_new_tokens=N_NEW)[1]
    assert [r.draft_ids for r in again] == [r.draft_ids for r in fresh]


# ------------------------------------------------------------------ the target stays exact


def test_full_acceptance_and_rejection_at_zero_leave_the_target_exact(target, draft, files, baselines):
    ids = prompt(1)
    continuation = list(baselines[1].output_ids)
    made = []

    def factory(spec, target, draft, target_runner=None):
        made.append(SteeredDrafter(make_drafter(spec, target, draft, target_runner=target_runner), continuation,
                                     len(ids), target.vocab_size))
        return made[-1]

    engine = local_engine(target, drafter_factory=factory)
    _, rounds, finished = run(engine, ids, spec=spec(files), max_new_tokens=N_NEW)
    assert list(finished.output_ids) == continuation
    outcomes = [(r.n_accepted, len(r.draft_ids)) for r in rounds if r.draft_ids]
    assert (3, 3) in outcomes and any(n == 0 for n, _ in outcomes)
    # the target: its next logits as a fresh context's for the same ids
    context = ids + list(finished.output_ids)
    runner = engine.runner
    kept = runner.forward(runner.sync(context), 1).clone()
    fresh = target.new_runner()
    assert torch.allclose(fresh.forward(context, 1), kept, atol=1e-4)
    # the assistant: the draft it makes next as a fresh one's on a fresh target context
    runner.rollback(len(context) - 1)
    ours = made[-1].inner.context.draft(context, 3, argmax)
    other = AssistantContext(draft.native, target.native, fresh)
    fresh.forward(context[:-1], 1)
    theirs = other.draft(context, 3, argmax)
    assert ours[0] == theirs[0]
    for a, b in zip(ours[1], theirs[1]):
        assert torch.allclose(a, b, atol=1e-4)
    other.release()


def test_the_assistant_reads_the_targets_cache(target, draft):
    """The same token and state after two different caches: different logits (its attention reads the
    target's keys and values); after the same cache: the same."""
    runner = target.new_runner()
    context = AssistantContext(draft.native, target.native, runner)
    state = np.random.default_rng(0).standard_normal(context.width).astype(np.float32)

    def logits_after(prefix: list[int]) -> np.ndarray:
        runner.reset()
        runner.forward(prefix, 1)
        context._decode(11, len(prefix), state)
        return np.ctypeslib.as_array(context.lib.llama_get_logits_ith(context._ctx, -1),
                                     shape=(draft.vocab_size,)).copy()

    first, other, again = logits_after(prompt(3)), logits_after(prompt(4)), logits_after(prompt(3))
    assert np.abs(first - other).max() > 1e-2
    assert np.array_equal(first, again)
    context.release()


# ------------------------------------------------------------------ bad input

def one_line(info) -> None:
    assert "\n" not in str(info.value)


def test_an_assistant_for_another_target_size_is_refused(target, files):
    with pytest.raises(ConfigError, match="was made for a Gemma 4 target of hidden size 96; .* has 64: use the "
                                          "assistant of this model size") as info:
        local_engine(target).validate(spec(files, draft="wide"))
    one_line(info)


@pytest.mark.parametrize("other", ["target", "qwen"])
def test_a_draft_that_is_no_assistant_is_refused(target, files, other):
    with pytest.raises(ConfigError, match="needs a Gemma 4 assistant GGUF as --draft .* got tiny-.* model") as info:
        local_engine(target).validate(spec(files, draft=other))
    one_line(info)


def test_a_target_that_is_not_gemma_4_is_refused(files):
    qwen = load_model(str(files["qwen"]), device="cpu")
    with pytest.raises(ConfigError, match="is a Gemma 4 assistant: it drafts only for a Gemma 4 target, and "
                                          "tiny-hybrid is a 'qwen35' model") as info:
        local_engine(qwen).validate(spec(files))
    one_line(info)
