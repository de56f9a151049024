"""Token trees in the core: their shape, greedy verification, recursive rejection sampling (lossless, with a
chi-square check that a wrong rule fails), and an Engine round trip on a runner with no model (tree_testkit):
greedy trees give plain decoding's text, events list the kept path first."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.drafting import Drafter, Proposal
from engine.core.engine import Engine
from engine.core.events import GenerationFinished, GenerationStarted, RoundVerified, TokenStatus
from engine.core.tree import ancestor_mask, rejection_sample_tree, verify_tree_greedy
from engine.core.tree_shape import children_of, leaves, node_depths, path_first, renumbered
from tree_testkit import FixedSource, TableRunner, TableTarget, joint_fits

CHI2_CRITICAL_DF5 = 35.89  # p = 1e-6, 5 degrees of freedom (scipy.stats.chi2.isf(1e-6, 5))


def test_shape_helpers():
    parents = (-1, 0, 0, 1, -1)
    assert node_depths(parents) == [0, 1, 1, 2, 0]
    assert children_of(parents) == {-1: [0, 4], 0: [1, 2], 1: [3]}
    assert leaves(parents) == [2, 3, 4]
    assert renumbered(parents, [0, 2, 4]) == (-1, 0, -1)
    assert path_first(parents, [0, 1, 3]) == [0, 1, 3, 2, 4]
    assert ancestor_mask(parents)[3].tolist() == [True, True, False, True, False]
    with pytest.raises(ValueError):
        node_depths((0,))  # a node can't be its own parent


def test_proposal_trimmed_and_ended_keep_a_tree():
    tree = Proposal([5, 6, 7, 8, 9], torch.eye(10)[[5, 6, 7, 8, 9]], parents=(-1, 0, 0, 1, -1))
    short = tree.trimmed(2)
    assert short.ids == [5, 6, 7, 9] and short.parents == (-1, 0, 0, -1)
    assert short.p_draft.argmax(-1).tolist() == [5, 6, 7, 9]
    ended = tree.ended({6})
    assert ended.ids == [5, 6, 7, 9] and ended.parents == (-1, 0, 0, -1)  # 8 was below the end
    assert tree.ended({1}) is tree


def test_greedy_keeps_the_longest_agreeing_path():
    vocab = 6
    rows = torch.full((5, vocab), 0.01)
    argmax = [2, 4, 3, 1, 5]  # row 0 (root), then after nodes 0…3
    for row, top in enumerate(argmax):
        rows[row, top] = 1.0
    # root's children: 1 (wrong), 2 (right); 2's children: 3 (right) → 3's row says 1; node 3 is id 0 (wrong)
    ids, parents = [1, 2, 3, 0], (-1, -1, 1, 2)
    path, target_id, p_target, p_own = verify_tree_greedy(rows, ids, parents)
    assert path == [1, 2] and target_id == argmax[3] and len(p_target) == 4
    assert p_target[1] == pytest.approx(float(rows[0, 2])) and p_own == pytest.approx(float(rows[3, 1]))


def tree_draws(sampler, p_target, p_draft, ids, parents, n_draws=12000, seed=0, drawn_first=False):
    """Counts of the first committed token, and of the second where the first was kept through node 0.
    `drawn_first`: node 0's id is drawn anew each time from p_draft's row 0."""
    generator = torch.Generator().manual_seed(seed)
    vocab = p_target.shape[-1]
    first, second = torch.zeros(vocab), torch.zeros(vocab)
    for _ in range(n_draws):
        if drawn_first:
            ids = [int(torch.multinomial(p_draft[0], 1, generator=generator))] + list(ids[1:])
        path, target_id, *_ = sampler(p_target, p_draft, ids, parents, generator)
        committed = [ids[i] for i in path] + [target_id]
        first[committed[0]] += 1
        if path and path[0] == 0:
            second[committed[1]] += 1
    return first, second


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    n = float(counts.sum())
    assert torch.all(counts[probs == 0] == 0), "a token the target gives probability 0 was emitted"
    mask = probs > 0
    return float(((counts[mask] - probs[mask] * n) ** 2 / (probs[mask] * n)).sum())


P_TARGET = torch.tensor([[0.40, 0.30, 0.10, 0.10, 0.05, 0.05],   # root
                         [0.05, 0.05, 0.20, 0.20, 0.30, 0.20],   # after node 0
                         [0.10, 0.10, 0.10, 0.10, 0.10, 0.50],   # after node 1
                         [0.30, 0.10, 0.10, 0.10, 0.10, 0.30]])  # after node 2
Q_ROOT = torch.tensor([0.10, 0.10, 0.40, 0.30, 0.05, 0.05])


@pytest.mark.parametrize("drawn", [False, True], ids=["top-k one-hot", "first child drawn from q"])
def test_recursive_rejection_sampling_is_lossless(drawn):
    """Root children: node 0 (id 2; from q, or picked as the draft's top), node 1 (id 3, picked: one-hot), and
    node 2 under node 0 (id 4, one-hot). Every committed first token follows the root's row, and the token after
    a kept node 0 follows node 0's row."""
    ids, parents = [2, 3, 4], (-1, -1, 0)
    p_draft = torch.stack([Q_ROOT, torch.eye(6)[3], torch.eye(6)[4]]) if drawn else None
    first, second = tree_draws(rejection_sample_tree, P_TARGET, p_draft, ids, parents, drawn_first=drawn)
    assert chi_square(first, P_TARGET[0]) < CHI2_CRITICAL_DF5
    assert second.sum() > 500 and chi_square(second, P_TARGET[1]) < CHI2_CRITICAL_DF5


def test_a_rule_that_forgets_the_residual_between_siblings_is_caught():
    """The same check has power: trying the second sibling against the untouched row is not lossless."""
    def forgetful(p_target, p_draft, ids, parents, generator):
        for child in children_of(parents)[-1]:
            if float(torch.rand((), generator=generator)) < float(p_target[0, ids[child]]):
                return [child], int(torch.multinomial(p_target[child + 1], 1, generator=generator)), [], [], 0.0
        return [], int(torch.multinomial(p_target[0], 1, generator=generator)), [], [], 0.0
    first, _ = tree_draws(forgetful, P_TARGET, None, [2, 3], (-1, -1))
    assert chi_square(first, P_TARGET[0]) > CHI2_CRITICAL_DF5


class TopTwoTree(Drafter):
    """Drafts from the runner's own table (a perfect first choice) but puts a wrong sibling FIRST at every
    level, so that greedy verification must take the second child each time."""

    name = "top-two"
    free_to_propose = True

    def __init__(self, runner: TableRunner) -> None:
        self.runner = runner

    def propose(self, context_ids, k):
        return Proposal.empty()

    def propose_tree(self, context_ids, k, budget):
        ids, parents, context, parent = [], [], list(context_ids), -1
        for _ in range(min(k, budget // 2)):
            ranked = self.runner.row(context).argsort(descending=True).tolist()
            ids += [ranked[1], ranked[0]]
            parents += [parent, parent]
            parent = len(ids) - 1
            context.append(ranked[0])
        return Proposal(ids, None, parents=tuple(parents))


def run(engine, prompt, spec, sampling=SamplingConfig(), n=20):
    events = list(engine.generate_ids(prompt, spec=spec, sampling=sampling, max_new_tokens=n,
                                      cancel=threading.Event()))
    assert isinstance(events[0], GenerationStarted) and isinstance(events[-1], GenerationFinished)
    return events


def engine_with_tree_drafter():
    runner = TableRunner(vocab=12, seed=3)
    drafter = TopTwoTree(runner)

    return Engine(TableTarget(runner), FixedSource(drafter)), runner


def test_greedy_tree_rounds_equal_plain_decoding_and_list_the_kept_path_first():
    engine, runner = engine_with_tree_drafter()
    plain = run(engine, [1, 2, 3], SpecConfig())[-1].output_ids
    events = run(engine, [1, 2, 3], _tree_spec(SpecConfig(method="prompt-lookup", k=3), 6))
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    assert events[-1].output_ids == plain
    drafting = [r for r in rounds if r.draft_ids]
    assert drafting and all(r.is_tree and r.n_accepted >= 1 for r in drafting)
    for r in drafting:
        depths = r.depths
        assert list(depths[: r.n_accepted]) == list(range(r.n_accepted))  # the kept path first, root to tip
        assert r.committed_statuses[0] is TokenStatus.ACCEPTED
    assert runner.nodes_verified > 0


def _tree_spec(spec: SpecConfig, tree: int) -> SpecConfig:
    """`spec` with a tree budget, whatever its method declares (the drafter here is the test's own)."""
    done = SpecConfig(method=spec.method, k=spec.k)
    object.__setattr__(done, "tree", tree)
    return done


def test_sampled_tree_rounds_keep_the_targets_distribution():
    """An Engine drafting top-two trees (picked, so one-hot) under sampling: the first two tokens of a reply
    follow the target's exact joint distribution (chi-square over the cells with enough mass)."""
    engine, runner = engine_with_tree_drafter()
    sampling = SamplingConfig(temperature=1.0)
    prompt = [1, 2, 3]
    p1 = torch.softmax(runner.row(prompt), -1)
    joint = {(a, b): float(p1[a] * torch.softmax(runner.row(prompt + [a]), -1)[b])
             for a in range(runner.vocab) for b in range(runner.vocab)}
    counts: dict = {}
    n = 3000
    spec = _tree_spec(SpecConfig(method="prompt-lookup", k=2), 4)
    for seed in range(n):
        events = run(engine, prompt, spec, SamplingConfig(temperature=1.0, seed=seed), n=4)
        cell = tuple(events[-1].output_ids[:2])
        counts[cell] = counts.get(cell, 0) + 1
    fits, statistic, df = joint_fits(counts, joint, n)
    assert fits, (statistic, df)
    assert runner.nodes_verified > 0 and sampling.temperature == 1.0


class ChainsOnly(TableRunner):
    def tree_refusal(self):
        return "this runner keeps a recurrent state"


def test_a_target_that_verifies_chains_only_says_so_and_drafts_chains():
    runner = ChainsOnly(vocab=12, seed=3)
    drafter = TopTwoTree(runner)

    engine = Engine(TableTarget(runner), FixedSource(drafter))
    events = run(engine, [1, 2, 3], _tree_spec(SpecConfig(method="prompt-lookup", k=3), 6), n=6)
    assert any("recurrent state" in w and "one chain" in w for w in events[0].warnings)
    assert runner.nodes_verified == 0 and not any(isinstance(e, RoundVerified) and e.is_tree for e in events)


def test_a_recorded_tree_round_details_its_kept_path():
    engine, _ = engine_with_tree_drafter()
    events = list(engine.generate_ids([1, 2, 3], spec=_tree_spec(SpecConfig(method="prompt-lookup", k=3), 6),
                                      max_new_tokens=8, record=True))
    tree_rounds = [e for e in events if isinstance(e, RoundVerified) and e.is_tree]
    assert tree_rounds
    for event in tree_rounds:
        assert len(event.detail.positions) == event.n_accepted + 1
        assert event.detail.positions[0].target.ids[0] == event.committed_ids[0]


def tree_round(n_accepted: int, parents: tuple[int, ...], status: TokenStatus) -> RoundVerified:
    """A tree round as commit_round lists it: the kept path first (nodes 0 … n_accepted − 1)."""
    n = len(parents)
    ids = tuple(range(10, 10 + n))
    return RoundVerified(
        index=1, drafter="d", draft_ids=ids, draft_pieces=tuple(f"<{i}>" for i in ids), n_accepted=n_accepted,
        target_id=99, target_status=status, target_piece="T", p_target=tuple(0.1 * i for i in range(n)),
        p_draft=(None,) * n, p_target_of_target_id=1.0, committed_ids=ids[:n_accepted] + (99,),
        committed_pieces=tuple(f"<{i}>" for i in ids[:n_accepted]) + ("T",), draft_seconds=0.0,
        verify_seconds=0.0, elapsed_seconds=0.0, n_committed_total=n_accepted + 1, tree_parents=parents)


def test_a_tree_rounds_target_token_ghosts_and_positions():
    """Kept path 0 → 1; node 1 has children 3 (listed first) and 4, node 3 has child 5; node 2 is another root
    branch. The target's token corrects node 3, the ghosts are the line 3, 5 (not every other node), and the
    correction sits at node 3's index. A path ending on a leaf earns a bonus, not a correction."""
    from engine.core.events import tree_target_status
    from engine.core.tokens import fold_round
    parents = (-1, 0, -1, 1, 1, 3)
    assert tree_target_status(parents, 2) is TokenStatus.SUBSTITUTED
    assert tree_target_status(parents, 0) is TokenStatus.SUBSTITUTED  # the root's children all turned down
    assert tree_target_status((-1, 0, -1), 2) is TokenStatus.BONUS  # the kept tip is a leaf
    event = tree_round(2, parents, TokenStatus.SUBSTITUTED)
    assert event.ghost_nodes == (3, 5)
    tokens = fold_round(event)
    assert [(t.status, t.position, t.text) for t in tokens] == [
        (TokenStatus.ACCEPTED, 0, "<10>"), (TokenStatus.ACCEPTED, 1, "<11>"), (TokenStatus.REJECTED, 3, "<13>"),
        (TokenStatus.REJECTED, 5, "<15>"), (TokenStatus.SUBSTITUTED, 3, "T")]
    assert tokens[-1].replaced == "<13>"
    bonus = fold_round(tree_round(2, (-1, 0, -1), TokenStatus.BONUS))
    assert [(t.status, t.position) for t in bonus] == [
        (TokenStatus.ACCEPTED, 0), (TokenStatus.ACCEPTED, 1), (TokenStatus.BONUS, 3)]
    assert tree_round(0, (-1, -1, 0), TokenStatus.SUBSTITUTED).ghost_nodes == (0, 2)


def test_a_tree_generations_theoretical_speed_up_counts_its_measured_tokens_per_pass():
    """12 nodes a round keeping 4 (5 tokens a pass): a per-token acceptance of 4/12 would say ~1.5 tokens a
    pass and a theoretical speed-up far below what the rounds did; a tree's is from its measured yield."""
    from engine.core.stats import StatsAccumulator
    stats = StatsAccumulator(k=4)
    parents = (-1, 0, 1, 2) + (-1,) * 4 + (0,) * 4
    for index in range(11):
        event = tree_round(4, parents, TokenStatus.BONUS) if index else tree_round(0, (), TokenStatus.PLAIN)
        stats.add_round(event)
    s = stats.snapshot()
    assert s.tree_rounds == 10 and s.mean_draft_length == 12
    assert s.theoretical_speedup == pytest.approx(s.mean_accepted_length)  # drafting and verifying free here
    assert s.theoretical_speedup > 4.5
