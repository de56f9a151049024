"""The adaptive draft length picks the length that maximises expected tokens per second."""

import pytest

from engine.core.draft_length import DraftLengthPolicy


def train(policy, bucket, n_drafted, n_accepted, verify_costs, rounds=200):
    for _ in range(rounds):
        for n_tokens, seconds in verify_costs.items():
            policy._verify_cost[n_tokens] = seconds
        policy.record(bucket, n_drafted, n_accepted, 0.0, verify_costs[n_drafted + 1])


def test_measures_a_plain_step_before_anything_else():
    assert DraftLengthPolicy(k=5).best_length() == 0


def test_flat_verify_cost_and_good_guesses_draft_everything():
    policy = DraftLengthPolicy(k=6)
    flat = {n: 0.040 for n in range(1, 8)}
    train(policy, 0, 6, 6, flat)
    assert policy.acceptance(0, 0) > 0.95
    assert policy.best_length() == 6


def test_expensive_verification_and_poor_guesses_draft_nothing():
    policy = DraftLengthPolicy(k=6)
    costly = {1: 0.060, **{n: 0.110 for n in range(2, 8)}}  # CPU float32: a second token doubles the cost
    train(policy, 1, 6, 0, costly)
    assert policy.acceptance(1, 0) < 0.05
    assert policy.best_length(1) == 0


def test_buckets_are_judged_apart():
    policy = DraftLengthPolicy(k=4)
    costs = {1: 0.050, 2: 0.070, 3: 0.072, 4: 0.074, 5: 0.076}
    train(policy, 3, 4, 4, costs)  # long n-gram matches are always right
    train(policy, 1, 4, 0, costs)  # one-token matches never are
    assert policy.best_length(3) == 4
    assert policy.best_length(1) == 0


def test_limit_caps_the_length():
    policy = DraftLengthPolicy(k=8)
    train(policy, 0, 8, 8, {n: 0.04 for n in range(1, 10)})
    assert policy.best_length(limit=3) == 3


def test_old_evidence_fades():
    policy = DraftLengthPolicy(k=2)
    costs = {1: 0.05, 2: 0.05, 3: 0.05}
    train(policy, 0, 2, 0, costs, rounds=50)
    low = policy.acceptance(0, 0)
    train(policy, 0, 2, 2, costs, rounds=150)
    assert low < 0.05
    assert policy.acceptance(0, 0) > 0.9


def train_acceptance(policy, rounds=200):
    """The first drafted token is kept 7 times in 10; once it is, the next ones always are. Drafting is free."""
    for i in range(rounds):
        policy.record(0, 4, 4 if i % 10 < 7 else 0, 0.0, 0.005)


def test_a_measured_curve_that_grows_steeply_drafts_fewer_tokens():
    from engine.core.stats import VerifyCost
    flat = DraftLengthPolicy(k=4, curve=VerifyCost((0.005,) * 5))
    steep = DraftLengthPolicy(k=4, curve=VerifyCost((0.005, 0.0055, 0.006, 0.012, 0.020)))
    train_acceptance(flat)
    train_acceptance(steep)
    assert flat.best_length() == 4
    # E(L) ≈ 1.7, 2.39, 3.06, 3.73 for L = 1…4: per second 309, 397, 255, 187 against 200 for plain steps
    assert steep.best_length() == 2
    assert steep.best_length(limit=1) == 1


def test_with_a_curve_no_plain_step_is_needed_first():
    from engine.core.stats import VerifyCost
    assert DraftLengthPolicy(k=3, curve=VerifyCost((0.005,) * 4)).best_length() == 3
    # a second token costing 3× the first never pays at the prior's acceptance (0.5): 1.5 / 0.015 < 1 / 0.005
    assert DraftLengthPolicy(k=3, curve=VerifyCost((0.005, 0.015, 0.025, 0.035))).best_length() == 0


def test_the_curve_is_scaled_to_this_runs_own_passes():
    """A run twice as slow as the measurement: drafting (measured in this run's seconds) weighs half as much."""
    from engine.core.stats import VerifyCost
    curve = VerifyCost((0.005, 0.006, 0.007))
    policy = DraftLengthPolicy(k=2, curve=curve)
    policy.record(0, 0, 0, 0.0, 0.010)  # a plain step: 10 ms here against 5 ms measured
    assert policy._verify_seconds(3) == pytest.approx(0.014)
