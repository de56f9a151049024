"""The shapes of the token trees drafters propose (engine.core.tree_shape's conventions: `parents[i]` the index of
node i's parent, −1 for a child of the last committed token, parents before children):

- `select_nodes`: the best nodes of a scored tree within a node budget, closed under ancestors, listed parents
  first and siblings in descending score;
- `DynamicTree`: EAGLE-2's dynamic draft tree (Li et al., arXiv 2406.16858): grown level by level from a draft
  model's rows, expanding the frontier nodes of highest cumulative probability (the product of the draft's
  probabilities along the path), then reranked to the budget by that score. The greedy chain is always expanded
  and kept, so a tree never holds less than the chain it grew from;
- `TokenTrie`: several token continuations (a lookup's earlier matches, a suffix tree's paths) merged so that
  shared prefixes become shared nodes (SpecInfer's token tree, arXiv 2305.09781; Arctic Inference's suffix
  decoding).

Plain Python: the drafters turn their rows into (token, probability) pairs. No torch, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.core.draft_length import tree_levels
from engine.core.tree_shape import children_of


@dataclass(frozen=True, slots=True)
class ShapedTree:
    """A tree cut to its budget: `nodes` are indices into the builder's nodes (parents first, siblings by
    descending score), `ids` their tokens and `parents` in the new numbering."""

    nodes: list[int]
    ids: list[int]
    parents: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.nodes)


def default_width(budget: int, k: int) -> int:
    """How many children a node offers and how many frontier nodes a level expands: about the budget spread
    over the levels, at least 2 (a tree) and at most 10 (EAGLE-2's top-k)."""
    return max(2, min(10, budget, -(-budget // max(1, k)) + 1))


def select_nodes(parents, scores, budget: int, keep=()) -> list[int]:
    """At most `budget` nodes of the tree (`parents`, each node's `scores`), closed under ancestors: those of
    `keep` (itself closed, e.g. the greedy chain) first, then the highest scores, ties to the shallower and then
    the earlier node (a child's score never exceeds its parent's, so its parent is always taken first). Listed
    parents first, a node's children in descending score.

    >>> select_nodes((-1, 0, -1, 2), [0.6, 0.5, 0.3, 0.25], budget=3)
    [0, 2, 1]
    >>> select_nodes((-1, 0, -1, 2), [0.6, 0.5, 0.3, 0.25], budget=3, keep=[2, 3])
    [0, 2, 3]
    """
    depths = _depths(parents)
    kept = set(list(keep)[:budget])
    for node in sorted(range(len(parents)), key=lambda i: (-scores[i], depths[i], i)):
        if len(kept) >= budget:
            break
        if node not in kept and (parents[node] < 0 or parents[node] in kept):
            kept.add(node)
    children: dict[int, list[int]] = {}
    for node in sorted(kept, key=lambda i: (-scores[i], i)):
        children.setdefault(parents[node], []).append(node)
    order: list[int] = []
    level = children.get(-1, [])
    while level:  # breadth first: every parent before its children
        order.extend(level)
        level = [child for node in level for child in children.get(node, ())]
    return order


def shaped(ids, parents, nodes: list[int]) -> ShapedTree:
    """The tree of `nodes` (each one's parent among them, before it) renumbered."""
    index = {old: new for new, old in enumerate(nodes)}
    index[-1] = -1
    return ShapedTree(nodes, [ids[i] for i in nodes], tuple(index[parents[i]] for i in nodes))


def _depths(parents) -> list[int]:
    depths: list[int] = []
    for parent in parents:
        depths.append(0 if parent < 0 else depths[parent] + 1)
    return depths


@dataclass(slots=True)
class DynamicTree:
    """EAGLE-2's tree as it grows. Every candidate node has a token, a parent, a depth, its score (cumulative
    draft probability) and `row`: which of the drafter's rows it was picked from (its p_draft row). A node is
    expanded when the draft model has run on it (its own row is then known); `chain` is the greedy path."""

    width: int
    ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    chain: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # each node's own draft probability
    ranks: list[int] = field(default_factory=list)  # each node's place among its siblings (0: the draft's first)
    # what a node's draft probability at a sibling rank is worth (Calibration.factor); the probability itself
    # by default, as EAGLE-2 scores
    factor: Callable[[int, float], float] = field(default=lambda rank, prob: prob)
    expand: int = 0  # frontier nodes a level expands (0: `width`); EAGLE-2 offers top-10 children of each

    def add_children(self, parent: int, ranked: list[tuple[int, float]], row: int) -> None:
        """The children of `parent` (−1: the root): `ranked` (token, draft probability) pairs in descending
        probability, the first `width` taken; the first continues the chain where `parent` ends it."""
        base = 1.0 if parent < 0 else self.scores[parent]
        depth = 0 if parent < 0 else self.depths[parent] + 1
        first = len(self.ids)
        for rank, (token, prob) in enumerate(ranked[: self.width]):
            self.ids.append(token)
            self.parents.append(parent)
            self.depths.append(depth)
            self.scores.append(base * self.factor(rank, prob))
            self.rows.append(row)
            self.probs.append(prob)
            self.ranks.append(rank)
        if len(self.ids) > first and (parent == -1 and not self.chain or self.chain and parent == self.chain[-1]):
            self.chain.append(first)

    def frontier(self, depth: int) -> list[int]:
        """The nodes of `depth` to expand next: the chain's, then the others by score (EAGLE-2's top-k by
        cumulative probability), `expand` (else `width`) in all."""
        chain_node = [self.chain[depth]] if depth < len(self.chain) else []
        others = sorted((i for i, d in enumerate(self.depths) if d == depth and i not in chain_node),
                        key=lambda i: (-self.scores[i], i))
        return (chain_node + others)[: self.expand or self.width]

    def reranked(self, budget: int) -> ShapedTree:
        """The best `budget` nodes (the chain kept), EAGLE-2's rerank."""
        return shaped(self.ids, self.parents, select_nodes(self.parents, self.scores, budget, keep=self.chain))


CALIBRATION_PRIOR = 4  # pseudo-observations of a rank kept as often as its mean confidence says


@dataclass(slots=True)
class Calibration:
    """What a drafter's confidence is worth, learnt from what the target kept of its own trees, per sibling rank.
    EAGLE-2 scores a node by the product of the draft probabilities along its path, which assumes that a draft's
    confidence is about its acceptance rate (true of a trained head). An untrained early exit is not: SmolLM2's
    first 10 of 30 layers give their first choice 0.58 on average and are right 6 % of the time (16 % within
    their top 4), so probability spends a tree's budget deep along a chain that is rarely reached, where the
    root's runners-up would have been kept. Of the nodes of a rank the target was asked about (their parent
    kept), `kept` were kept and `confidence` is their summed probability; a node's factor is its probability ×
    (kept + m·c̄) / (confidence + m·c̄), c̄ the rank's mean confidence and m = CALIBRATION_PRIOR: its own
    probability until evidence comes, then what its rank's drafts turned out to be worth.

    >>> c = Calibration()
    >>> c.factor(0, 0.5)
    0.5
    >>> c.learn([7, 8, 9], (-1, -1, 0), [0, 1, 0], [0.6, 0.3, 0.9], committed=[8, 4])  # the root's second kept
    >>> round(c.factor(0, 0.5), 3), round(c.factor(1, 0.5), 3)
    (0.4, 0.733)
    """

    kept: list[float] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)

    def factor(self, rank: int, prob: float) -> float:
        if rank >= len(self.kept) or not self.confidence[rank]:
            return prob
        prior = CALIBRATION_PRIOR * self.confidence[rank] / self.asked[rank]
        return min(1.0, prob * (self.kept[rank] + prior) / (self.confidence[rank] + prior))

    def learn(self, ids, parents, ranks, probs, committed) -> None:
        """A verified tree (nodes' ids, parents, sibling ranks and draft probabilities) and the ids the round
        committed after its context: every node whose parent was kept was asked about, and kept where the
        committed id there is its own (the walk of engine.core.draft_length.tree_levels)."""
        children, parent = children_of(parents), -1
        for kept_rank, _ in tree_levels(parents, ids, committed)[:len(committed)]:  # levels its ids reached
            for rank, node in enumerate(children[parent]):
                self._count(ranks[node], probs[node], rank == kept_rank)
            parent = children[parent][kept_rank] if kept_rank >= 0 else parent

    def _count(self, rank: int, prob: float, kept: bool) -> None:
        while rank >= len(self.kept):
            self.kept.append(0.0)
            self.confidence.append(0.0)
            self.asked.append(0)
        self.kept[rank] += kept
        self.confidence[rank] += prob
        self.asked[rank] += 1


@dataclass(slots=True)
class TokenTrie:
    """Token continuations merged into one tree: a continuation that shares a prefix with an earlier one shares
    its nodes. A node's score combines those of the continuations through it (`add`'s `combine`)."""

    ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    _children: dict[tuple[int, int], int] = field(default_factory=dict)  # (parent, token) → node

    def add(self, tokens, scores, combine=max) -> list[int]:
        """One continuation (tokens, each one's score); its nodes, root to tip. `combine` merges the scores of a
        shared node: `max` for probabilities of the same event, `operator.add` for votes (how many matches agree)."""
        parent, path = -1, []
        for token, score in zip(tokens, scores):
            parent = self._node(parent, token, score, combine)
            path.append(parent)
        return path

    def add_tree(self, ids, parents, scores, combine=max) -> None:
        """A tree (engine.core.tree_shape's parents) node by node, each under its parent's merged node."""
        merged: list[int] = []
        for token, parent, score in zip(ids, parents, scores):
            merged.append(self._node(-1 if parent < 0 else merged[parent], token, score, combine))

    def _node(self, parent: int, token: int, score: float, combine) -> int:
        """The node of `token` under `parent`, added or with its score merged."""
        node = self._children.get((parent, token))
        if node is None:
            node = len(self.ids)
            self._children[(parent, token)] = node
            self.ids.append(token)
            self.parents.append(parent)
            self.scores.append(score)
        else:
            self.scores[node] = combine(self.scores[node], score)
        return node

    def selected(self, budget: int, keep=()) -> ShapedTree:
        """The best `budget` nodes (select_nodes), `keep` (a path, e.g. the chain's) first."""
        return shaped(self.ids, self.parents, select_nodes(self.parents, self.scores, budget, keep=keep))
