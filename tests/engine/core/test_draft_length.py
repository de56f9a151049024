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


# ---- token trees: the budget (SpecConfig.tree) chosen from the learnt acceptance and the tree-pass curve

def test_expected_tokens_of_the_best_first_tree():
    from engine.core.draft_length import expected_tree_tokens
    # every child kept half the time: the first child 0.5, the second 0.5 × 0.5, the first's first 0.25, …
    assert expected_tree_tokens([0.5, 0.5], lambda rank: 0.5, 4) == pytest.approx([1.5, 1.75, 2.0, 2.125])
    # siblings never kept: the tree is the chain, E = 1 + Σ Π q
    chain = expected_tree_tokens([0.8, 0.5, 0.5], lambda rank: 0.0, 5)
    assert chain == pytest.approx([1.8, 2.2, 2.4, 2.4, 2.4])  # three deep at most: more nodes add nothing
    assert expected_tree_tokens([], lambda rank: 0.5, 3) == []


def test_tree_levels_tell_the_rank_kept_at_each_level():
    from engine.core.draft_length import tree_levels
    # root children 0 (id 5) and 1 (id 6); node 1's children 2 (id 7) and 3 (id 8); node 3 a leaf
    parents, ids = (-1, -1, 1, 1), [5, 6, 7, 8]
    assert tree_levels(parents, ids, [6, 8]) == [(1, 2), (1, 2)]  # ends at a leaf: nothing more to say
    assert tree_levels(parents, ids, [6]) == [(1, 2), (-1, 2)]  # neither of node 1's children kept
    assert tree_levels(parents, ids, []) == [(-1, 2)]


def train_tree(policy, rounds=300):
    """The first child is kept 6 times in 10, else its sibling 3 times in 4, at every level of a 3-deep tree."""
    for i in range(rounds):
        kept = 0 if i % 10 < 6 else (1 if i % 10 < 9 else -1)
        levels = [(kept, 2)] * 3 if kept >= 0 else [(-1, 2)]
        policy.record_tree(0, levels, 8, 0.0, 0.005)
        policy.record(0, 0, 0, 0.0, 0.005)  # and a plain step now and then: this run's one-token pass


def test_a_steep_tree_curve_keeps_a_chain_and_a_flat_one_takes_the_tree():
    from engine.core.stats import VerifyCost
    steep_chain = VerifyCost((0.005, 0.0075, 0.010, 0.0125))  # 4 tokens cost 2.5× one
    steep = DraftLengthPolicy(k=3, curve=steep_chain, tree_curve=steep_chain, budget=16)
    flat = DraftLengthPolicy(k=3, curve=VerifyCost((0.005,) * 4), tree_curve=VerifyCost((0.005,) * 17), budget=16)
    for policy in (steep, flat):
        train_tree(policy)
        assert 0.5 < policy.acceptance(0, 0) < 0.7 and 0.6 < policy.sibling_acceptance(1) < 0.95
    assert steep.best_budget() == 0  # a tree of N nodes costs (N + 1)/2 passes here: none pays what a chain does
    assert flat.best_budget() == 16  # each node adds a little and costs nothing: the whole budget
    assert flat.best_budget(limit=6) == 6


def test_an_adaptive_engine_drafts_trees_on_a_flat_curve_and_chains_on_a_steep_one():
    """The Engine asks the policy for each round's budget (engine.core.engine._draft_and_verify) and teaches it
    from each round's tree; greedy output stays plain decoding's."""
    import threading

    from tree_testkit import FixedSource, TableRunner, TableTarget

    from engine.core.config import SpecConfig
    from engine.core.drafting import Drafter, Proposal
    from engine.core.engine import Engine
    from engine.core.events import GenerationFinished, RoundVerified
    from engine.core.stats import VerifyCost

    class SecondBest(Drafter):
        """Its first guess is the target's second choice, its second guess the target's own."""
        name, free_to_propose = "second-best", False

        def __init__(self, runner):
            self.runner = runner

        def ranked(self, context_ids):
            return self.runner.row(list(context_ids)).argsort(descending=True).tolist()

        def propose(self, context_ids, k):
            return Proposal(self.ranked(context_ids)[1:2][:k])

        def propose_tree(self, context_ids, k, budget):
            first, second = self.ranked(context_ids)[1::-1][:2]
            return Proposal([first, second][:budget], None, parents=(-1, -1)[:budget])

    def run(curve):
        runner = TableRunner(vocab=12, seed=3)

        drafter = SecondBest(runner)
        spec = SpecConfig(method="prompt-lookup", k=1, adaptive=True)
        object.__setattr__(spec, "tree", 2)  # the test's drafter branches, whatever the method declares
        events = list(Engine(TableTarget(runner), FixedSource(drafter, curve)).generate_ids(
            [1, 2, 3], spec=spec, max_new_tokens=30, cancel=threading.Event()))
        plain = list(Engine(TableTarget(TableRunner(vocab=12, seed=3)), FixedSource(drafter, curve)).generate_ids(
            [1, 2, 3], spec=SpecConfig(), max_new_tokens=30, cancel=threading.Event()))
        assert events[-1].output_ids == plain[-1].output_ids
        assert isinstance(events[-1], GenerationFinished)
        return [e for e in events if isinstance(e, RoundVerified) and e.draft_ids]

    # passes of half a second: the drafter's own measured time (microseconds, more on a loaded machine) weighs
    # nothing beside them, whatever the machine
    flat = run(VerifyCost((0.5,) * 4))
    assert len(flat) > 5 and all(r.is_tree and r.n_accepted == 1 for r in flat)  # the second child kept each time
    # a pass over 2 nodes costs 3× one: 2 tokens for 3 passes' time never pays, whatever is learnt
    steep = run(VerifyCost((0.5, 1.0, 1.5, 2.0)))
    assert not any(r.is_tree for r in steep)
