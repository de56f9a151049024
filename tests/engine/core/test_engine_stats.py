"""The figures, defined once in engine/core/stats.py: the theoretical speed-up and the accumulator."""

from __future__ import annotations

import pytest

from engine.core.events import RoundVerified, target_status
from engine.core.stats import (StatsAccumulator, efficiency, expected_tokens_per_pass, speedup,
                          speedup_from_acceptance)


@pytest.mark.parametrize("k, c", [(1, 0.0), (4, 0.0), (4, 0.05), (8, 0.5), (64, 1.0)])
def test_speedup_with_every_draft_rejected(k, c):
    assert speedup_from_acceptance(0.0, k, c) == pytest.approx(1 / (1 + k * c))


@pytest.mark.parametrize("k, c", [(1, 0.0), (4, 0.0), (4, 0.05), (8, 0.5)])
def test_speedup_with_every_draft_accepted(k, c):
    assert speedup_from_acceptance(1.0, k, c) == pytest.approx((k + 1) / (1 + k * c))
    assert speedup_from_acceptance(1 - 1e-9, k, c) == pytest.approx((k + 1) / (1 + k * c), rel=1e-6)  # α → 1


def test_speedup_formula_in_between():
    alpha, k, c = 0.6, 4, 0.1
    expected = (1 - alpha ** (k + 1)) / ((1 - alpha) * (1 + k * c))
    assert speedup_from_acceptance(alpha, k, c) == pytest.approx(expected)
    assert expected_tokens_per_pass(alpha, k) == pytest.approx((1 - alpha ** 5) / 0.4)
    assert expected_tokens_per_pass(1.0, k) == k + 1
    # speed-up grows with α
    assert speedup_from_acceptance(0.3, k, c) < speedup_from_acceptance(0.6, k, c) < speedup_from_acceptance(0.9, k, c)


def test_speedup_with_rounds_that_drafted_nothing():
    alpha, k, c, f = 0.5, 4, 0.1, 0.25
    tokens = f * (1 - alpha ** 5) / (1 - alpha) + (1 - f)
    assert speedup_from_acceptance(alpha, k, c, drafting_share=f) == pytest.approx(tokens / (1 + f * k * c))
    assert speedup_from_acceptance(alpha, k, c, drafting_share=0.0) == 1.0
    assert speedup_from_acceptance(alpha, 0, c) == 1.0


def test_measured_speedup_and_efficiency():
    assert speedup(30.0, 20.0) == pytest.approx(1.5)
    assert speedup(30.0, 0.0) is None
    assert efficiency(1.5, 2.0) == pytest.approx(0.75)
    assert efficiency(None, 2.0) is None and efficiency(1.5, 0.0) is None


def make_round(index, draft_ids, n_accepted, committed, elapsed, draft_s=0.0, verify_s=0.1):
    status = target_status(len(draft_ids), n_accepted)
    return RoundVerified(
        index=index, drafter="test", draft_ids=tuple(draft_ids), draft_pieces=("",) * len(draft_ids),
        n_accepted=n_accepted, target_id=committed[-1], target_status=status, target_piece="",
        p_target=(0.5,) * len(draft_ids), p_draft=(None,) * len(draft_ids), p_target_of_target_id=1.0,
        committed_ids=tuple(committed), committed_pieces=("",) * len(committed), draft_seconds=draft_s,
        verify_seconds=verify_s, elapsed_seconds=elapsed, n_committed_total=0)


def canned_stats():
    acc = StatsAccumulator(k=4)
    rounds = [
        make_round(0, [], 0, [1], elapsed=0.5, verify_s=0.5),  # prefill
        make_round(1, [2, 3, 4, 5], 2, [2, 3, 9], elapsed=1.0, draft_s=0.04),  # partial
        make_round(2, [5, 6, 7, 8], 4, [5, 6, 7, 8, 9], elapsed=1.5, draft_s=0.04),  # full + bonus
        make_round(3, [], 0, [10], elapsed=2.0),  # nothing drafted (a lookup miss)
        make_round(4, [1, 2, 3], 0, [4], elapsed=2.5, draft_s=0.03),  # rejected at position 0
    ]
    for r in rounds:
        acc.add_round(r)
    acc.set_elapsed(2.5)
    return acc.snapshot()


def test_accumulator_on_canned_rounds():
    stats = canned_stats()
    assert stats.committed_tokens == 11 and stats.target_passes == 5 and stats.rounds == 5
    assert stats.drafting_rounds == 3 and stats.drafted_tokens == 11 and stats.accepted_tokens == 6
    assert stats.acceptance_rate == pytest.approx(6 / 11)
    assert stats.mean_accepted_length == pytest.approx(11 / 5)
    assert stats.mean_draft_length == pytest.approx(11 / 3)
    assert stats.drafting_share == pytest.approx(3 / 4)
    # positions 1…4: drafted in 3, 3, 3, 2 rounds; accepted in 2, 2, 1, 1
    assert stats.per_position_acceptance == pytest.approx((2 / 3, 2 / 3, 1 / 3, 1 / 2))
    # rounds that drafted, by n_accepted 0…4
    assert stats.accept_length_histogram == (1, 0, 1, 0, 1)
    assert stats.ttft_seconds == 0.5 and stats.elapsed_seconds == 2.5
    assert stats.tok_per_s == pytest.approx(10 / 2.0)  # tokens after the first / time after the first
    assert stats.e2e_tok_per_s == pytest.approx(11 / 2.5)
    assert stats.draft_seconds == pytest.approx(0.11) and stats.verify_seconds == pytest.approx(0.9)
    c = (0.11 / 11) / (0.9 / 5)
    assert stats.cost_ratio == pytest.approx(c)
    assert stats.theoretical_speedup == pytest.approx(speedup_from_acceptance(6 / 11, 11 / 3, c, 3 / 4))


def test_as_dict_has_every_figure():
    out = canned_stats().as_dict()
    assert out["acceptance_rate"] == pytest.approx(6 / 11)
    assert out["accept_length_histogram"] == [1, 0, 1, 0, 1]
    assert set(out) >= {"tok_per_s", "mean_accepted_length", "theoretical_speedup", "per_position_acceptance"}


def test_accumulator_without_drafts():
    acc = StatsAccumulator(k=4)
    acc.add_round(make_round(0, [], 0, [1], elapsed=0.2))
    acc.add_round(make_round(1, [], 0, [2], elapsed=0.4))
    stats = acc.snapshot()
    assert stats.acceptance_rate == 0.0 and stats.per_position_acceptance == ()
    assert stats.accept_length_histogram == () and stats.mean_accepted_length == 1.0
    assert stats.theoretical_speedup == 1.0
    empty = StatsAccumulator(k=2).snapshot()
    assert empty.tok_per_s == 0.0 and empty.mean_accepted_length == 0.0


class CannedCurve:
    """A measured verify-cost curve with round numbers: seconds for one pass over 1…5 tokens."""

    seconds = (0.005, 0.010, 0.013, 0.016, 0.020)

    def cost(self, n):
        from engine.core.stats import VerifyCost
        return VerifyCost(self.seconds).cost(n)


def test_theoretical_speedup_on_a_measured_curve():
    curve = CannedCurve()
    # α = 0.5, k = 3: E = 1 + 0.5 + 0.25 + 0.125 = 1.875 tokens a pass; d = 1 ms a drafted token
    # 1.875 × 0.005 / (cost(4) + 3 × 0.001) = 0.009375 / 0.019
    assert speedup_from_acceptance(0.5, 3, 0.0, curve=curve, draft_seconds_per_token=0.001) == pytest.approx(
        0.009375 / 0.019)
    # half the rounds drafted: tokens 0.5 × 1.875 + 0.5 = 1.4375 at 0.5 × 0.019 + 0.5 × 0.005 = 0.012 a round
    assert speedup_from_acceptance(0.5, 3, 0.0, 0.5, curve=curve, draft_seconds_per_token=0.001) == pytest.approx(
        1.4375 * 0.005 / 0.012)
    # the draft cost as a ratio c of one pass (no seconds given): d = c × cost(1) = 0.2 × 0.005
    assert speedup_from_acceptance(0.5, 3, 0.2, curve=curve) == pytest.approx(0.009375 / (0.016 + 3 * 0.001))
    # α = 1, k = 4, draft free: 5 tokens for cost(5) / cost(1) = 4 passes' worth
    assert speedup_from_acceptance(1.0, 4, 0.0, curve=curve, draft_seconds_per_token=0.0) == pytest.approx(5 / 4)
    assert speedup_from_acceptance(0.5, 0, 0.0, curve=curve) == 1.0  # plain decoding


def test_the_fallback_is_free_verification():
    """Without a curve, every pass costs one, whatever it verifies: the same as a flat measured curve."""
    class Flat:
        def cost(self, n):
            return 0.005
    for alpha, k, c, f in [(0.6, 4, 0.05, 1.0), (0.3, 2, 0.1, 0.5), (0.9, 7, 0.0, 0.8)]:
        assert speedup_from_acceptance(alpha, k, c, f) == pytest.approx(
            speedup_from_acceptance(alpha, k, c, f, curve=Flat()))
    assert speedup_from_acceptance(0.6, 4, 0.05, curve=CannedCurve()) < speedup_from_acceptance(0.6, 4, 0.05)


def test_the_accumulator_uses_the_curve_it_was_given():
    acc = StatsAccumulator(k=4, verify_cost_seconds=CannedCurve.seconds)
    for r in [make_round(0, [], 0, [1], elapsed=0.5, verify_s=0.5),
              make_round(1, [2, 3], 2, [2, 3, 4], elapsed=1.0, draft_s=0.004),  # both kept + bonus
              make_round(2, [5, 6], 0, [7], elapsed=1.5, draft_s=0.004)]:  # rejected at position 0
        acc.add_round(r)
    stats = acc.snapshot()
    assert stats.verify_cost_seconds == CannedCurve.seconds
    assert stats.as_dict()["verify_cost_seconds"] == list(CannedCurve.seconds)
    # α = 2/4 = 0.5, k = 2, every decode round drafted, d = 0.008 / 4 = 2 ms:
    # E = 1 + 0.5 + 0.25 = 1.75 tokens at cost(3) + 2 × 0.002 = 0.017 s against 0.005 s a plain token
    assert stats.theoretical_speedup == pytest.approx(1.75 * 0.005 / 0.017)
    plain = StatsAccumulator(k=4)
    for r in [make_round(0, [], 0, [1], elapsed=0.5, verify_s=0.5),
              make_round(1, [2, 3], 2, [2, 3, 4], elapsed=1.0, draft_s=0.004),
              make_round(2, [5, 6], 0, [7], elapsed=1.5, draft_s=0.004)]:
        plain.add_round(r)
    assert plain.snapshot().verify_cost_seconds == ()
    assert plain.snapshot().theoretical_speedup > stats.theoretical_speedup  # free verification is optimistic
