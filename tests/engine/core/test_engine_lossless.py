"""Greedy speculative decoding is lossless: every method's output equals plain greedy output, token for token,
on a tiny model built here and on the built-in default model (float32)."""

from __future__ import annotations

import pytest
import torch

from engine.core.config import SpecConfig
from engine.core.events import TokenStatus
from engine.runtime import local_engine
from engine_testkit import PROMPTS, check_round_invariants, run

N_NEW = 48

TINY_PROMPTS = {
    "chat": "hello world, how are you?",
    "code": "def add(a, b):\n    return",
    "multilingual": "Café crème 😀 日本語のテキスト",
    "translate": "Translate: Bonjour, ça va?",
}

# (id, spec builder taking the tiny target and draft folders)
TINY_SPECS = [
    ("draft-model-noisy-k4", lambda target, draft: SpecConfig("draft-model", k=4, draft=str(draft))),
    ("draft-model-same-k3", lambda target, draft: SpecConfig("draft-model", k=3, draft=str(target))),
    ("prompt-lookup-k4", lambda target, draft: SpecConfig("prompt-lookup", k=4)),
    ("prompt-lookup-k1-ngram2", lambda target, draft: SpecConfig("prompt-lookup", k=1, params={"ngram_max": 2})),
    ("early-exit-default-layers", lambda target, draft: SpecConfig("early-exit", k=3)),
    ("early-exit-layers1-k5", lambda target, draft: SpecConfig("early-exit", k=5, params={"layers": 1})),
    ("early-exit-layers3-k2", lambda target, draft: SpecConfig("early-exit", k=2, params={"layers": 3})),
]


def hf_greedy(loaded, prompt_ids: list[int], n_new: int) -> list[int]:
    """Plain greedy decoding by transformers' own generate(): an implementation independent of ours."""
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([prompt_ids]), max_new_tokens=n_new, do_sample=False,
                                    pad_token_id=loaded.tokenizer.eos_token_id)
    return out[0, len(prompt_ids):].tolist()


# ------------------------------------------------------------------ tiny model

@pytest.fixture(scope="module")
def tiny_baselines(tiny_model):
    """Plain greedy output (method none) per prompt, computed once for the module."""
    engine = local_engine(tiny_model)
    out = {}
    for name, prompt in TINY_PROMPTS.items():
        started, rounds, finished = run(engine, prompt, max_new_tokens=N_NEW)
        out[name] = (engine.prompt_ids(prompt), finished)
    return out


@pytest.mark.parametrize("name", TINY_PROMPTS)
def test_tiny_plain_decoding_matches_transformers_generate(tiny_model, tiny_baselines, name):
    prompt_ids, finished = tiny_baselines[name]
    assert finished.stop_reason == "max-new-tokens"
    assert list(finished.output_ids) == hf_greedy(tiny_model, prompt_ids, N_NEW)[:len(finished.output_ids)]
    assert finished.text == tiny_model.tokenizer.decode(list(finished.output_ids), skip_special_tokens=True)


@pytest.mark.parametrize("spec_id, make_spec", TINY_SPECS, ids=[s[0] for s in TINY_SPECS])
def test_tiny_speculative_greedy_equals_plain(tiny_model, tiny_dir, tiny_draft_dir, tiny_baselines,
                                              spec_id, make_spec):
    spec = make_spec(tiny_dir, tiny_draft_dir)
    engine = local_engine(tiny_model)
    drafted = accepted = 0
    for name, prompt in TINY_PROMPTS.items():
        _, baseline = tiny_baselines[name]
        started, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert started.method == spec.method and started.k == spec.k
        assert finished.output_ids == baseline.output_ids, f"{spec_id} on {name!r} differs from plain greedy"
        assert finished.text == baseline.text
        assert finished.stop_reason == baseline.stop_reason
        check_round_invariants(rounds, finished)
        for r in rounds:
            if r.draft_ids:
                assert r.target_status is (TokenStatus.BONUS if r.n_accepted == len(r.draft_ids)
                                           else TokenStatus.SUBSTITUTED)
                assert max(len(r.draft_ids) for r in rounds) <= spec.k
        drafted += finished.stats.drafted_tokens
        accepted += finished.stats.accepted_tokens
    # The comparison only means something if the method really drafted, and had drafts both kept and not.
    assert drafted > 0
    assert accepted > 0
    if spec_id != "draft-model-same-k3":  # the same model as draft agrees with itself everywhere
        assert accepted < drafted


def test_tiny_draft_model_rounds_mix_rejection_partial_and_full(tiny_model, tiny_draft_dir):
    """The noisy draft really exercises every branch of verification on the tiny model."""
    engine = local_engine(tiny_model)
    spec = SpecConfig("draft-model", k=4, draft=str(tiny_draft_dir))
    n_accepted = set()
    for prompt in TINY_PROMPTS.values():
        _, rounds, _ = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        n_accepted.update(r.n_accepted for r in rounds if len(r.draft_ids) == 4)
    assert 0 in n_accepted and 4 in n_accepted and n_accepted & {1, 2, 3}


def test_tiny_greedy_equal_on_raw_ids_with_repetition(tiny_model, tiny_tokenizer):
    """generate_ids (no chat template) on a repetitive prompt: prompt-lookup drafts long runs here."""
    prompt = tiny_tokenizer.encode("the lazy dog. the lazy dog. the lazy dog. the lazy", add_special_tokens=False)
    engine = local_engine(tiny_model)
    _, _, plain = run(engine, prompt, max_new_tokens=N_NEW)
    assert list(plain.output_ids) == hf_greedy(tiny_model, prompt, N_NEW)[:len(plain.output_ids)]
    for spec in (SpecConfig("prompt-lookup", k=8), SpecConfig("early-exit", k=4, params={"layers": 2})):
        _, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert finished.output_ids == plain.output_ids, spec.label()
        check_round_invariants(rounds, finished)


# ------------------------------------------------------------------ built-in default model

@pytest.fixture(scope="module")
def default_baselines(default_engine):
    out = {}
    for name, prompt in PROMPTS.items():
        started, rounds, finished = run(default_engine, prompt, max_new_tokens=N_NEW)
        # Every prompt must give the full 48 tokens, or the comparison would be shorter than asked.
        assert finished.stop_reason == "max-new-tokens" and len(finished.output_ids) == N_NEW, name
        out[name] = (default_engine.prompt_ids(prompt), finished)
    return out


@pytest.mark.model
@pytest.mark.parametrize("name", ["qa", "code"])
def test_default_plain_decoding_matches_transformers_generate(default_model, default_baselines, name):
    prompt_ids, finished = default_baselines[name]
    assert list(finished.output_ids) == hf_greedy(default_model, prompt_ids, N_NEW)
    assert finished.text == default_model.tokenizer.decode(list(finished.output_ids), skip_special_tokens=True)


@pytest.mark.model
@pytest.mark.parametrize("spec", [SpecConfig("prompt-lookup", k=4), SpecConfig("draft-model", k=4, draft="default")],
                         ids=lambda s: s.label())
def test_default_speculative_greedy_equals_plain(default_engine, default_baselines, spec):
    drafted = 0
    for name, prompt in PROMPTS.items():
        _, baseline = default_baselines[name]
        _, rounds, finished = run(default_engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert finished.output_ids == baseline.output_ids, f"{spec.label()} on {name!r} differs from plain"
        assert finished.text == baseline.text
        check_round_invariants(rounds, finished)
        drafted += finished.stats.drafted_tokens
    assert drafted > 0


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("name, spec", [
    ("qa", SpecConfig("early-exit", k=2)),  # default layers: half of the 30
    ("code", SpecConfig("early-exit", k=3, params={"layers": 24})),
    ("chat", SpecConfig("early-exit", k=3, params={"layers": 24})),
], ids=["qa-default-layers", "code-layers24", "chat-layers24"])
def test_default_early_exit_greedy_equals_plain(default_engine, default_baselines, name, spec):
    _, baseline = default_baselines[name]
    _, rounds, finished = run(default_engine, PROMPTS[name], spec=spec, max_new_tokens=N_NEW)
    assert finished.output_ids == baseline.output_ids
    assert finished.text == baseline.text
    check_round_invariants(rounds, finished)
    assert finished.stats.drafted_tokens > 0
