"""Speculative sampling is lossless: the tokens it emits are distributed exactly as the target's own.

Checked on `rejection_sample` with hand-made distributions (V = 6) over many seeded draws, with a chi-square
statistic; the same statistic is shown to catch a wrong residual, so the test has power."""

from __future__ import annotations

import math

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.sampling import make_generator, probabilities, sample
from engine.runtime import local_engine
from engine.core.verify import rejection_sample, verify_greedy
from engine_testkit import check_round_invariants, run

N_DRAWS = 12000
# Chi-square critical value for 5 degrees of freedom at p = 1e-6 (scipy.stats.chi2.isf(1e-6, 5)): a correct
# sampler fails this about once in a million runs; the draws are seeded, so in practice never.
CHI2_CRITICAL_DF5 = 35.89

P_TARGET = torch.tensor([
    [0.40, 0.30, 0.10, 0.10, 0.05, 0.05],
    [0.05, 0.05, 0.20, 0.20, 0.30, 0.20],
    [0.10, 0.10, 0.10, 0.10, 0.10, 0.50],
])
P_DRAFT = torch.tensor([
    [0.10, 0.10, 0.40, 0.30, 0.05, 0.05],
    [0.30, 0.30, 0.10, 0.10, 0.10, 0.10],
])


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    n = float(counts.sum())
    expected = probs * n
    assert torch.all(counts[probs == 0] == 0), "a token the target gives probability 0 was emitted"
    mask = probs > 0
    return float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum())


def speculative_draws(sampler, p_target, p_draft, n_draws=N_DRAWS, seed=0, fixed_draft=None):
    """Run one round per draw; drafts are drawn from p_draft (or fixed). Returns the counts of the first and
    second emitted tokens and of the bonus token (when every draft was kept)."""
    generator = torch.Generator().manual_seed(seed)
    V = p_target.shape[-1]
    first, second, bonus = torch.zeros(V), torch.zeros(V), torch.zeros(V)
    m = p_target.shape[0] - 1
    for _ in range(n_draws):
        if fixed_draft is not None:
            draft_ids = list(fixed_draft)
        else:
            draft_ids = [int(torch.multinomial(p_draft[i], 1, generator=generator)) for i in range(m)]
        n_accepted, target_id, *_ = sampler(p_target, p_draft, draft_ids, generator)
        emitted = draft_ids[:n_accepted] + [target_id]
        first[emitted[0]] += 1
        if len(emitted) > 1:
            second[emitted[1]] += 1
        if n_accepted == m:
            bonus[target_id] += 1
    return first, second, bonus


def wrong_residual_sampler(p_target, p_draft, draft_ids, generator):
    """A deliberately wrong speculative sampler: at a rejection it draws the correction from p_target
    instead of norm(max(0, p_target − p_draft))."""
    for i, x in enumerate(draft_ids):
        ratio = float(p_target[i, x] / p_draft[i, x])
        if float(torch.rand(1, generator=generator)) >= ratio:
            return i, int(sample(p_target[i], generator)), [], [], 0.0
    return len(draft_ids), int(sample(p_target[len(draft_ids)], generator)), [], [], 0.0


def test_speculative_sampling_matches_the_target_distribution():
    first, second, bonus = speculative_draws(rejection_sample, P_TARGET, P_DRAFT)
    assert chi_square(first, P_TARGET[0]) < CHI2_CRITICAL_DF5
    # Rows are independent here, so the second emitted token (after a kept first draft) follows row 1 and
    # the bonus after two kept drafts follows row 2.
    assert second.sum() > 1000 and chi_square(second, P_TARGET[1]) < CHI2_CRITICAL_DF5
    assert bonus.sum() > 300 and chi_square(bonus, P_TARGET[2]) < CHI2_CRITICAL_DF5


def test_the_statistic_catches_a_wrong_residual():
    first, _, _ = speculative_draws(wrong_residual_sampler, P_TARGET, P_DRAFT)
    assert chi_square(first, P_TARGET[0]) > CHI2_CRITICAL_DF5 * 5


def test_the_statistic_catches_misaligned_draft_rows():
    """p_draft rows that don't belong to the drafted positions (an off-by-one in the engine) bias the output."""
    def misaligned_sampler(p_target, p_draft, draft_ids, generator):
        return rejection_sample(p_target, p_draft.flip(0), draft_ids, generator)
    first, _, _ = speculative_draws(misaligned_sampler, P_TARGET, P_DRAFT)
    assert chi_square(first, P_TARGET[0]) > CHI2_CRITICAL_DF5 * 5


@pytest.mark.parametrize("fixed_draft", [[2, 0], [0, 4], [5, 5]], ids=["unlikely", "likely", "rare"])
def test_one_hot_drafts_are_lossless(fixed_draft):
    """A drafter with no distribution (n-gram) may propose anything: the output still follows the target
    (verifying a draft as one-hot is lossless whatever the draft, which is why n-gram drafting is safe)."""
    first, second, _ = speculative_draws(rejection_sample, P_TARGET, None, fixed_draft=fixed_draft)
    assert chi_square(first, P_TARGET[0]) < CHI2_CRITICAL_DF5
    assert chi_square(second, P_TARGET[1]) < CHI2_CRITICAL_DF5


def test_rejection_sample_reports_probabilities_of_each_drafted_token():
    generator = torch.Generator().manual_seed(3)
    n_accepted, target_id, p_target, p_draft, p_own = rejection_sample(P_TARGET, P_DRAFT, [2, 4], generator)
    assert p_target == pytest.approx([0.10, 0.30])
    assert p_draft == pytest.approx([0.40, 0.10])
    assert p_own == pytest.approx(float(P_TARGET[n_accepted, target_id]))
    _, _, p_target, p_draft, _ = rejection_sample(P_TARGET, None, [1, 3], generator)
    assert p_target == pytest.approx([0.30, 0.20]) and p_draft == pytest.approx([1.0, 1.0])


def test_rejection_sample_accepts_when_draft_and_target_agree():
    generator = torch.Generator().manual_seed(0)
    same = P_TARGET[:2]
    for _ in range(200):
        draft_ids = [int(torch.multinomial(same[i], 1, generator=generator)) for i in range(2)]
        n_accepted, *_ = rejection_sample(P_TARGET, same, draft_ids, generator)
        assert n_accepted == 2


def test_rejection_never_emits_the_rejected_token_from_a_one_hot_draft():
    """With a one-hot draft the residual is p_target without the drafted token."""
    generator = torch.Generator().manual_seed(1)
    for _ in range(300):
        n_accepted, target_id, *_ = rejection_sample(P_TARGET, None, [0, 0], generator)
        if n_accepted == 0:
            assert target_id != 0


def test_verify_greedy_keeps_the_argmax_prefix():
    logits = torch.log(P_TARGET)  # argmax per row: 0, 4, 5
    assert verify_greedy(logits, [0, 4])[:2] == (2, 5)  # both kept, bonus 5
    n_accepted, target_id, p_target, p_own = verify_greedy(logits, [0, 3])
    assert (n_accepted, target_id) == (1, 4)
    assert p_target == pytest.approx([0.40, 0.20]) and p_own == pytest.approx(0.30)
    assert verify_greedy(logits, [1, 4])[:2] == (0, 0)


# ------------------------------------------------------------------ logits → probabilities

LOGITS = torch.log(torch.tensor([[0.50, 0.30, 0.15, 0.05], [0.05, 0.15, 0.30, 0.50]]))


def test_greedy_probabilities_are_the_plain_softmax():
    probs = probabilities(LOGITS, SamplingConfig())
    assert torch.allclose(probs, torch.softmax(LOGITS, dim=-1))


def test_temperature_scales_logits():
    probs = probabilities(LOGITS, SamplingConfig(temperature=2.0))
    assert torch.allclose(probs, torch.softmax(LOGITS / 2.0, dim=-1))
    assert torch.allclose(probs.sum(-1), torch.ones(2))


def test_top_k_keeps_the_k_most_likely_per_row():
    probs = probabilities(LOGITS, SamplingConfig(temperature=1.0, top_k=2))
    assert torch.allclose(probs[0], torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(probs[1], torch.tensor([0.0, 0.0, 0.375, 0.625]), atol=1e-6)
    # top-k ≥ V (or 0) changes nothing
    assert torch.allclose(probabilities(LOGITS, SamplingConfig(temperature=1.0, top_k=4)),
                          torch.softmax(LOGITS, dim=-1))
    assert torch.allclose(probabilities(LOGITS, SamplingConfig(temperature=1.0, top_k=0)),
                          torch.softmax(LOGITS, dim=-1))


@pytest.mark.parametrize("top_p, kept", [(0.5, 1), (0.79, 2), (0.81, 3), (0.96, 4), (1.0, 4), (1e-6, 1)])
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    probs = probabilities(LOGITS, SamplingConfig(temperature=1.0, top_p=top_p))
    base = torch.tensor([0.50, 0.30, 0.15, 0.05])
    expected = torch.where(torch.arange(4) < kept, base, torch.zeros(4))
    expected = expected / expected.sum()
    assert torch.allclose(probs[0], expected, atol=1e-6)
    assert torch.allclose(probs[1], expected.flip(0), atol=1e-6)


def test_top_k_and_top_p_together():
    probs = probabilities(LOGITS, SamplingConfig(temperature=1.0, top_k=3, top_p=0.9))
    # top-3 renormalised: 0.5/0.95, 0.3/0.95, 0.15/0.95; the first two sum to 0.842 < 0.9: all three stay
    assert torch.allclose(probs[0], torch.tensor([0.50, 0.30, 0.15, 0.0]) / 0.95, atol=1e-6)


def test_seeded_generator_is_reproducible():
    probs = torch.full((8,), 1 / 8)
    draws_a = [int(sample(probs, make_generator(torch.device("cpu"), 7))) for _ in range(3)]
    draws_b = [int(sample(probs, make_generator(torch.device("cpu"), 7))) for _ in range(3)]
    assert draws_a == draws_b
    gen = make_generator(torch.device("cpu"), 7)
    sequence = [int(sample(probs, gen)) for _ in range(20)]
    assert len(set(sequence)) > 1


# ------------------------------------------------------------------ through the engine

def test_engine_sampling_with_the_target_as_its_own_draft_accepts_almost_everything(tiny_model, tiny_dir):
    """p_draft == p_target makes min(1, p_target/p_draft) = 1: a misaligned p_draft (wrong row, wrong
    settings) would show up as rejections."""
    engine = local_engine(tiny_model)
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, seed=5)
    spec = SpecConfig("draft-model", k=4, draft=str(tiny_dir))
    _, rounds, finished = run(engine, "hello world", spec=spec, sampling=sampling, max_new_tokens=32)
    check_round_invariants(rounds, finished)
    assert finished.stats.drafted_tokens >= 16
    assert finished.stats.acceptance_rate > 0.9
    for r in rounds[1:]:
        assert r.p_draft == pytest.approx(r.p_target, abs=1e-4)


@pytest.mark.parametrize("spec", [SpecConfig(), SpecConfig("prompt-lookup", k=3), SpecConfig("early-exit", k=3)],
                         ids=lambda s: s.method)
def test_engine_sampling_is_reproducible_with_a_seed(tiny_model, spec):
    sampling = SamplingConfig(temperature=0.9, top_k=40, seed=11)
    outputs = []
    for _ in range(2):
        _, rounds, finished = run(local_engine(tiny_model), "Café crème", spec=spec, sampling=sampling,
                                  max_new_tokens=20)
        check_round_invariants(rounds, finished)
        assert all(0 < r.p_target_of_target_id <= 1 for r in rounds)
        outputs.append(finished.output_ids)
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 20
