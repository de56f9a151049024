"""ngram-mod and ngram-map in the engine: greedy output equal to plain decoding token for token on the built-in
model (llama.cpp backend, ten prompts of different kinds × 48 tokens, llama.cpp's defaults and settings that
draft often and are often wrong), and ngram-mod's sampling lossless: a chi-square of the first two emitted
tokens against the tiny target's exact joint distribution, with a pool that drafts every round and is mostly
rejected (so the residual distribution does the work)."""

from __future__ import annotations

import random

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.sampling import probabilities
from engine.measure.compare import first_difference
from engine.runtime import local_engine
from engine_testkit import PROMPTS, check_round_invariants, run

N_NEW = 48
# the engine suite's five kinds of prompt and five more (as tests/engine/backends/test_llama_cpp_engine.py)
BUILTIN_PROMPTS = {**PROMPTS,
                   "explain": "Explain how a bicycle works to a child, in detail.",
                   "email": "Write an email to a landlord about a broken heater, with three paragraphs.",
                   "steps": "Describe the water cycle step by step.",
                   "pycode": "Write a Python function for binary search, with comments on every line.",
                   "story": "Continue the story: The lighthouse keeper had not seen a ship in forty days, until "
                            "one stormy night"}
SPECS = [SpecConfig("ngram-mod", k=64), SpecConfig("ngram-map", k=64),
         SpecConfig("ngram-mod", k=8, params={"n_match": 2, "n_min": 1, "n_max": 8}),
         SpecConfig("ngram-map", k=8, params={"size_n": 2, "size_m": 8}),
         SpecConfig("ngram-map", k=6, params={"size_n": 1, "size_m": 4, "four_values": True})]


@pytest.mark.model
@pytest.mark.slow
def test_builtin_greedy_equals_plain_for_both_pools():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from engine.core.errors import DefaultModelMissingError
    from engine.models.load import load_model
    try:
        engine = local_engine(load_model("default", device="cpu", backend="llama.cpp"))
    except DefaultModelMissingError as exc:
        pytest.skip(str(exc))
    baselines = {name: run(engine, prompt, max_new_tokens=N_NEW)[2] for name, prompt in BUILTIN_PROMPTS.items()}
    assert all(len(b.output_ids) == N_NEW for b in baselines.values())
    figures = {}
    for spec in SPECS:
        drafted = accepted = 0
        for name, prompt in BUILTIN_PROMPTS.items():
            _, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
            at = first_difference(finished.output_ids, baselines[name].output_ids)
            assert at is None, f"{spec.label()} on {name!r}: first difference at new token {at}"
            assert finished.text == baselines[name].text
            check_round_invariants(rounds, finished)
            drafted += finished.stats.drafted_tokens
            accepted += finished.stats.accepted_tokens
        figures[spec.label()] = (drafted, accepted)
    print("\n" + "\n".join(f"{label}: {a}/{d} drafted tokens accepted" for label, (d, a) in figures.items()))
    for spec in SPECS[2:]:  # the short n-grams draft on every kind of text, and guess wrong too
        drafted, accepted = figures[spec.label()]
        assert 0 < accepted < drafted


# ------------------------------------------------------------------ sampling is lossless

N_DRAWS = 3000
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)
CHI2_CRITICAL_DF8 = 44.81  # 8 degrees of freedom (3 × 3 cells − 1) at p = 1e-6
K = 3
SPEC = SpecConfig("ngram-mod", k=K, params={"n_match": 1, "n_min": 1, "n_max": K})


def first_probabilities(runner, ids: list[int]) -> torch.Tensor:
    runner.rollback(0)
    return probabilities(runner.forward(ids, 1).clone(), SAMPLING)[0]


def covering_prompt(model) -> list[int]:
    """200 distinct ids of the tiny vocabulary whose every likely first token (top 3) occurs before the last
    position, so that ngram-mod (n_match = 1) drafts what followed it in the prompt: a guess, mostly wrong."""
    runner = model.new_runner()
    try:
        for seed in range(200):
            ids = random.Random(seed).sample(range(3, 390), 200)
            likely = torch.nonzero(first_probabilities(runner, ids)).flatten().tolist()
            if set(likely) <= set(ids[:-1]):
                return ids
    finally:
        runner.release()
    raise AssertionError("no prompt covers the likely first tokens")


def exact_joint(model, prompt_ids: list[int]) -> dict[tuple[int, int], float]:
    runner = model.new_runner()
    p1 = first_probabilities(runner, prompt_ids)
    joint = {}
    for x1 in torch.nonzero(p1).flatten().tolist():
        p2 = first_probabilities(runner, prompt_ids + [x1])
        joint.update({(x1, x2): float(p1[x1] * p2[x2]) for x2 in torch.nonzero(p2).flatten().tolist()})
    runner.release()
    return joint


@pytest.mark.slow
@pytest.mark.usefixtures("engine_threads_for_torch")
def test_ngram_mod_sampling_is_lossless(tiny_model):
    engine = local_engine(tiny_model)
    prompt_ids = covering_prompt(tiny_model)
    counts: dict[tuple[int, int], int] = {}
    drafted = rejected = 0
    for seed in range(N_DRAWS):
        sampling = SamplingConfig(temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=seed)
        # three new tokens: the prefill round's, then round 1 drafts one (the room left less the target's own)
        _, rounds, finished = run(engine, prompt_ids, spec=SPEC, sampling=sampling, max_new_tokens=3)
        pair = tuple(finished.output_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
        drafted += bool(rounds[1].draft_ids)
        rejected += rounds[1].n_accepted == 0 and bool(rounds[1].draft_ids)
    joint = exact_joint(tiny_model, prompt_ids)
    assert len(joint) == 9 and sum(joint.values()) == pytest.approx(1.0, abs=1e-5)
    assert drafted == N_DRAWS  # the pool had a guess for every first token
    assert rejected > N_DRAWS // 10  # and the residual was drawn from often
    assert set(counts) <= set(joint), "a pair the target gives probability 0 was emitted"
    statistic = sum((counts.get(cell, 0) - p * N_DRAWS) ** 2 / (p * N_DRAWS) for cell, p in joint.items())
    assert statistic < CHI2_CRITICAL_DF8
