"""Drafters that branch (Drafter.propose_tree) on runners with no model (tree_testkit's TableRunner): the shared
shapes (engine.drafters.tree_shapes), EAGLE-2's dynamic tree of a model drafter and its chain-and-siblings
fallback, the lookup drafters' tries; every tree well formed and holding the chain; Engine round trips whose
greedy output equals plain decoding, a sampled one that keeps the target's distribution, and lookups that keep
more tokens a target pass with trees than with chains."""

from __future__ import annotations

import operator
import threading

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.engine import Engine
from engine.core.events import GenerationFinished, RoundVerified
from engine.core.methods import method_spec
from engine.core.tree_shape import children_of, node_depths
from engine.drafters.draft_model import RunnerDrafter
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.drafters.suffix import SuffixDrafter
from engine.drafters.suffix_tree import SpeculationLimits
from engine.drafters.tree_shapes import Calibration, DynamicTree, TokenTrie, default_width, select_nodes
from tree_testkit import FixedSource, TableRunner, TableTarget, joint_fits


def check_well_formed(proposal, k: int, budget: int) -> None:
    """node_depths valid, at most `budget` nodes, depth < k, no two siblings with the same id."""
    assert proposal.is_tree and 0 < len(proposal.ids) <= budget
    assert max(node_depths(proposal.parents)) < k
    for siblings in children_of(proposal.parents).values():
        tokens = [proposal.ids[i] for i in siblings]
        assert len(tokens) == len(set(tokens)), tokens
    if proposal.p_draft is not None:
        assert proposal.p_draft.shape[0] == len(proposal.ids)


def holds_chain(proposal, chain_ids: list[int]) -> bool:
    """The chain's ids are a root-to-node path of the tree."""
    parent = -1
    for token in chain_ids:
        parent = next((c for c in children_of(proposal.parents).get(parent, ()) if proposal.ids[c] == token), None)
        if parent is None:
            return False
    return True


def top_path(proposal) -> list[int]:
    """The ids of the path that always takes a node's first child (its best)."""
    children, path, node = children_of(proposal.parents), [], -1
    while node in children:
        node = children[node][0]
        path.append(proposal.ids[node])
    return path


# ---- the shapes


def test_select_nodes_is_closed_under_ancestors_and_orders_siblings_by_score():
    parents = (-1, -1, 0, 0, 1, 2, 4)
    scores = [0.5, 0.4, 0.3, 0.1, 0.39, 0.2, 0.38]
    order = select_nodes(parents, scores, budget=5)
    assert sorted(order) == [0, 1, 2, 4, 6]  # 6 (0.38) is taken after its parents 1 and 4
    assert order.index(0) < order.index(1) and order.index(1) < order.index(4) < order.index(6)
    assert select_nodes(parents, scores, budget=3, keep=[1, 4, 6]) == [1, 4, 6]
    assert select_nodes(parents, scores, budget=0) == []


def test_dynamic_tree_expands_the_chain_and_the_best_frontier():
    tree = DynamicTree(width=2)
    tree.add_children(-1, [(7, 0.5), (3, 0.4), (9, 0.1)], row=0)
    assert tree.ids == [7, 3] and tree.chain == [0]  # width 2: the third child is not offered
    tree.add_children(1, [(5, 0.9), (6, 0.1)], row=1)  # 3 → 5 scores 0.36, above the chain's next
    tree.add_children(0, [(8, 0.6), (2, 0.4)], row=2)
    assert tree.chain == [0, 4] and tree.scores[2] == pytest.approx(0.36)
    assert tree.frontier(1) == [4, 2]  # the chain's node first, then by score
    shape = tree.reranked(4)
    assert shape.ids == [7, 3, 8, 5] and shape.parents == (-1, -1, 0, 1)
    assert tree.reranked(1).ids == [7]


def test_a_calibrated_tree_spends_its_budget_where_the_target_kept_drafts():
    """An overconfident draft (its first choice at 0.9, kept 1 time in 20; its runners-up kept as often): by
    probability the budget goes down the chain's children, calibrated by what was kept it goes to the root's
    runners-up."""
    def grow(factor=None):
        tree = DynamicTree(width=4, expand=1, **({"factor": factor} if factor else {}))
        tree.add_children(-1, [(10, 0.9), (11, 0.04), (12, 0.03), (13, 0.03)], row=0)
        tree.add_children(0, [(20, 0.9), (21, 0.04), (22, 0.03), (23, 0.03)], row=1)
        return tree.reranked(4)
    assert sorted(grow().parents) == [-1, -1, 0, 0]  # by probability: two of the chain's children
    calibration = Calibration()
    for round_index in range(20):  # the target's token: the root's first choice once, a runner-up thrice
        kept = [10, 11, 12, 11, 14][round_index % 5]
        calibration.learn([10, 11, 12, 13], (-1, -1, -1, -1), [0, 1, 2, 3], [0.9, 0.04, 0.03, 0.03], [kept, 5])
    assert calibration.factor(0, 0.9) < calibration.factor(1, 0.04)
    shape = grow(calibration.factor)  # the root's runner-up first, then its first choice, its third, and the
    assert shape.ids == [11, 10, 12, 20] and shape.parents == (-1, -1, -1, 1)  # chain's child (never a fourth)


def test_trie_merges_shared_prefixes_and_votes():
    trie = TokenTrie()
    first = trie.add([1, 2, 3], [1, 1, 1], operator.add)
    trie.add([1, 2, 4], [2, 2, 2], operator.add)
    trie.add([5], [1], operator.add)
    assert len(trie.ids) == 5 and trie.scores[:2] == [3, 3]
    shape = trie.selected(4, keep=first)
    assert shape.ids == [1, 2, 4, 3] and shape.parents == (-1, 0, 1, 1)  # the chain kept; 4 outvotes 5
    assert trie.selected(3).ids == [1, 2, 4] and trie.selected(3, keep=[4]).ids == [1, 5, 2]


@pytest.mark.parametrize("budget,k", [(1, 4), (12, 4), (60, 7), (128, 16)])
def test_default_width(budget, k):
    assert 1 <= default_width(budget, k) <= min(10, max(2, budget))


# ---- EAGLE-2's dynamic tree of a model drafter


def greedy_chain(runner: TableRunner, context: list[int], k: int) -> list[int]:
    ids = list(context)
    for _ in range(k):
        ids.append(int(runner.row(ids).argmax()))
    return ids[len(context):]


@pytest.mark.parametrize("budget", [1, 5, 12, 30])
def test_dynamic_tree_is_well_formed_and_its_top_path_is_the_greedy_chain(budget):
    draft = TableRunner(vocab=12, seed=5, sharpness=1.5)
    drafter = RunnerDrafter(draft)
    drafter.begin(SamplingConfig(), torch.Generator())
    context, k = [1, 2, 3, 4], 4
    chain = drafter.propose(context, k)
    assert chain.ids == greedy_chain(draft, context, k)
    passes = draft.passes
    tree = drafter.propose_tree(context, k, budget)
    check_well_formed(tree, k, budget)
    assert top_path(tree) == chain.ids[:budget] and holds_chain(tree, chain.ids[:budget])
    assert draft.passes - passes == k  # one draft pass a level
    assert draft.ids == context[:-1] + [context[-1]]  # the cache holds the context only (keep_path([]))
    # under greedy each node's row is the draft's softmax after its parent
    first = tree.parents.index(-1)
    assert torch.allclose(tree.p_draft[first], torch.softmax(draft.row(context), -1))
    if budget >= 12:
        assert len(tree.ids) == budget and max(tree.depths()) == k - 1


def test_sampled_dynamic_tree_is_picked_so_verified_one_hot():
    drafter = RunnerDrafter(TableRunner(vocab=12, seed=5, sharpness=1.5))
    drafter.begin(SamplingConfig(temperature=0.8, top_k=5), torch.Generator().manual_seed(0))
    tree = drafter.propose_tree([1, 2, 3], 3, 10)
    check_well_formed(tree, 3, 10)
    assert tree.p_draft is None


class ChainsOnly(TableRunner):
    def tree_refusal(self):
        return "a recurrent state"


def test_a_draft_that_holds_no_tree_offers_the_chain_and_its_siblings_at_no_extra_pass():
    draft = ChainsOnly(vocab=12, seed=5, sharpness=1.5)
    drafter = RunnerDrafter(draft)
    drafter.begin(SamplingConfig(), torch.Generator())
    context, k = [1, 2, 3, 4], 4
    chain = drafter.propose(context, k).ids
    passes = draft.passes
    tree = drafter.propose_tree(context, k, 10)
    check_well_formed(tree, k, 10)
    assert draft.passes - passes == k and top_path(tree) == chain and len(tree.ids) == 10
    assert all(node_depths(tree.parents)[i] == 0 or tree.parents[i] in
               [j for j, d in enumerate(node_depths(tree.parents)) if tree.ids[j] == chain[d]]
               for i, d in enumerate(node_depths(tree.parents)) if d > 0)  # every branch hangs off the chain


# ---- the lookups


REPETITIVE = [1, 2, 5, 6, 1, 2, 7, 8, 1, 2, 5, 6, 3, 1, 2, 7, 9, 1, 2, 5, 4, 1, 2]


@pytest.mark.parametrize("budget", [1, 4, 9, 20])
def test_prompt_lookup_tree_holds_every_earlier_continuation(budget):
    chain = PromptLookupDrafter(ngram_max=2).propose(REPETITIVE, 3).ids
    tree = PromptLookupDrafter(ngram_max=2).propose_tree(REPETITIVE, 3, budget)
    check_well_formed(tree, 3, budget)
    assert holds_chain(tree, chain[:budget]) and tree.bucket == 2
    if budget >= 2:
        assert {tree.ids[i] for i in children_of(tree.parents)[-1]} == {5, 7}
    if budget >= 11:  # every continuation: 5 6 1, 7 8 1, 5 6 3, 7 9 1, 5 4 1
        assert len(tree.ids) == 11 and all(holds_chain(tree, path) for path in
                                           ([5, 6, 1], [7, 8, 1], [5, 6, 3], [7, 9, 1], [5, 4, 1]))


@pytest.mark.parametrize("budget", [1, 4, 9, 20])
def test_suffix_tree_holds_the_chain_and_the_other_continuations(budget):
    limits = SpeculationLimits(max_depth=2, spec_factor=2.0, min_token_prob=0.1)
    chain = SuffixDrafter(limits).propose(REPETITIVE, 4).ids
    tree = SuffixDrafter(limits).propose_tree(REPETITIVE, 4, budget)
    check_well_formed(tree, 4, budget)
    assert holds_chain(tree, chain[:budget])
    if budget >= 9:
        assert {tree.ids[i] for i in children_of(tree.parents)[-1]} == {5, 7}


def test_suffix_tree_merges_the_learned_replies(tmp_path):
    from engine.drafters.suffix import LearnedReplies
    learned = LearnedReplies("m", 10, tmp_path / "store.sqlite")
    for reply in ([4, 1, 2, 9, 9], [4, 1, 2, 9, 9]):
        learned.add(reply)
    drafter = SuffixDrafter(SpeculationLimits(max_depth=2, spec_factor=2.0), learned)
    tree = drafter.propose_tree([5, 1, 2, 3, 3, 1, 2], 3, 8)
    check_well_formed(tree, 3, 8)
    assert holds_chain(tree, [9, 9]) and holds_chain(tree, [3, 3])


def test_branching_methods_say_so():
    for name in ("draft-model", "early-exit", "eagle", "prompt-lookup", "suffix"):
        assert method_spec(name).branches, name


# ---- Engine round trips on a TableRunner target


def engine_for(target: TableRunner, drafter) -> Engine:
    return Engine(TableTarget(target), FixedSource(drafter))


def generate(engine, prompt, spec, sampling=SamplingConfig(), n=24):
    events = list(engine.generate_ids(prompt, spec=spec, sampling=sampling, max_new_tokens=n,
                                      cancel=threading.Event()))
    assert isinstance(events[-1], GenerationFinished)
    return events


def model_spec(k: int, tree: int) -> SpecConfig:
    """A spec with this k and tree (the drafter is the test's own, whatever the method)."""
    return SpecConfig(method="prompt-lookup", k=k, tree=tree)


def test_greedy_dynamic_trees_equal_plain_decoding():
    target = TableRunner(vocab=12, seed=3, sharpness=2.0)
    draft = TableRunner(vocab=12, seed=3, sharpness=2.0)
    draft.table = target.table + torch.randn(target.table.shape, generator=torch.Generator().manual_seed(1))
    engine = engine_for(target, RunnerDrafter(draft))
    plain = generate(engine, [1, 2, 3], SpecConfig())[-1].output_ids
    chain_events = generate(engine, [1, 2, 3], model_spec(4, 0))
    tree_events = generate(engine, [1, 2, 3], model_spec(4, 12))
    assert chain_events[-1].output_ids == plain and tree_events[-1].output_ids == plain
    rounds = [e for e in tree_events if isinstance(e, RoundVerified) and e.draft_ids]
    assert rounds and all(r.is_tree for r in rounds)
    chain_rounds = sum(isinstance(e, RoundVerified) for e in chain_events)
    assert sum(isinstance(e, RoundVerified) for e in tree_events) <= chain_rounds


def test_sampled_dynamic_trees_keep_the_targets_distribution():
    """Picked trees (one-hot) under sampling: the first two tokens follow the target's exact joint (chi-square)."""
    target = TableRunner(vocab=6, seed=4, sharpness=1.0)
    draft = TableRunner(vocab=6, seed=4, sharpness=1.0)
    draft.table = target.table + torch.randn(target.table.shape, generator=torch.Generator().manual_seed(2))
    engine = engine_for(target, RunnerDrafter(draft))
    prompt = [1, 2, 3]
    p1 = torch.softmax(target.row(prompt), -1)
    joint = {(a, b): float(p1[a] * torch.softmax(target.row(prompt + [a]), -1)[b])
             for a in range(6) for b in range(6)}
    counts: dict = {}
    n = 1200
    for seed in range(n):
        events = generate(engine, prompt, model_spec(2, 4), SamplingConfig(temperature=1.0, seed=seed), n=3)
        cell = tuple(events[-1].output_ids[:2])
        counts[cell] = counts.get(cell, 0) + 1
    fits, statistic, df = joint_fits(counts, joint, n)
    assert fits, (statistic, df)
    assert target.nodes_verified > 0


def tokens_per_pass(target: TableRunner, drafter, prompt, spec, n=40) -> tuple[float, list[int]]:
    engine = engine_for(target, drafter)
    before = target.passes
    output = generate(engine, prompt, spec, n=n)[-1].output_ids
    return len(output) / (target.passes - before), output


def repetitive_text(target: TableRunner) -> list[int]:
    """The target's own greedy texts from six starts, ten tokens each, one after the other: its tokens recur with
    different followers (the token before decides), so the latest match is often not the one that comes true."""
    ids: list[int] = []
    for start in ([1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 0]):
        for _ in range(10):
            start.append(int(target.row(start).argmax()))
        ids += start
    return ids + [2, 3]


@pytest.mark.parametrize("make", [lambda: PromptLookupDrafter(ngram_max=1),
                                  lambda: SuffixDrafter(SpeculationLimits(max_depth=1, spec_factor=4.0,
                                                                          min_token_prob=0.05))],
                         ids=["prompt-lookup", "suffix"])
def test_lookup_trees_keep_more_tokens_a_target_pass_than_chains(make):
    target = TableRunner(vocab=12, seed=0, sharpness=4.0)
    prompt = repetitive_text(target)
    plain = generate(engine_for(target, make()), prompt, SpecConfig(), n=40)[-1].output_ids
    chain, chain_ids = tokens_per_pass(target, make(), prompt, SpecConfig(method="prompt-lookup", k=4))
    tree, tree_ids = tokens_per_pass(target, make(), prompt, SpecConfig(method="prompt-lookup", k=4, tree=16))
    assert chain_ids == plain and tree_ids == plain
    assert tree > chain, (tree, chain)
