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

    def add_children(self, parent: int, ranked: list[tuple[int, float]], row: int) -> None:
        """The children of `parent` (−1: the root): `ranked` (token, draft probability) pairs in descending
        probability, the first `width` taken; the first continues the chain where `parent` ends it."""
        base = 1.0 if parent < 0 else self.scores[parent]
        depth = 0 if parent < 0 else self.depths[parent] + 1
        first = len(self.ids)
        for token, prob in ranked[: self.width]:
            self.ids.append(token)
            self.parents.append(parent)
            self.depths.append(depth)
            self.scores.append(base * prob)
            self.rows.append(row)
        if len(self.ids) > first and (parent == -1 and not self.chain or self.chain and parent == self.chain[-1]):
            self.chain.append(first)

    def frontier(self, depth: int) -> list[int]:
        """The nodes of `depth` to expand next: the chain's, then the others by score (EAGLE-2's top-k by
        cumulative probability), `width` in all."""
        chain_node = [self.chain[depth]] if depth < len(self.chain) else []
        others = sorted((i for i, d in enumerate(self.depths) if d == depth and i not in chain_node),
                        key=lambda i: (-self.scores[i], i))
        return (chain_node + others)[: self.width]

    def reranked(self, budget: int) -> ShapedTree:
        """The best `budget` nodes (the chain kept), EAGLE-2's rerank."""
        return shaped(self.ids, self.parents, select_nodes(self.parents, self.scores, budget, keep=self.chain))


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
