"""Cost-aware draft length: draft only as many tokens as pay for their verification.

On a GPU, verifying 8 tokens costs about what verifying 1 does; on a CPU in float32 it can cost twice as
much (a matrix-vector product becomes a matrix-matrix one), so a weak guess there makes decoding *slower*.
The policy learns both sides as it runs:
- per-position acceptance: P(draft token i is kept | tokens before it were kept), per drafter-supplied
  bucket (prompt lookup: the matched n-gram size), Beta(1, 1)-smoothed and slowly forgetting;
- the cost of a round that verifies n tokens (target pass + drafting), as moving averages per n.
When the target's verify-cost curve has been measured (engine.measure.verify_cost: cost(n), one pass over n tokens
against one), the pass cost comes from that curve instead, scaled to this run's own one-token passes where
some have been seen: a length whose verification grows steeply is never tried on the optimistic guess. The
fallback where no curve is known: unmeasured lengths cost what the longest measured shorter one does.
It then picks the length L ≤ k that maximises expected committed tokens per second,
E(L) / cost(L), with E(L) = 1 + Σ_{i ≤ L} Π_{j ≤ i} q_j (arXiv 2211.17192 §3.5 picks k the same way,
from α and c, once; this does it every round from measured figures). Output is unaffected: only how many
guesses are checked changes.

With a token tree (SpecConfig.tree) it also picks the round's node budget N ≤ tree, or a chain: the largest N
whose expected tokens per second beats every smaller budget's and the best chain's. E(N) is the best-first tree
of N nodes k deep (Sequoia, arXiv 2402.12374, builds its trees from the same positional acceptance): a node is
kept with the product along its path of its rank's chance among its siblings (the first child's: the chain's
acceptance at its depth; a later child's: learnt by rank from tree rounds, given the ones before it were
refused); a pass yields 1 + Σ of those chances. Its cost: the target's measured tree-pass curve at N nodes (a
tree pass can cost more than a chain of as many tokens: the mask), scaled like the chain's, and the tree's
drafting, learnt per round (a drafter grows a tree level by level: its cost follows the depth, not N).
Pure arithmetic on the figures the loop records; touches nothing else.
"""

from __future__ import annotations

import heapq

from engine.core.tree_shape import children_of

FORGET = 0.98  # per round: old evidence fades, so a drafter that got better is tried again
COST_SMOOTHING = 0.3


class DraftLengthPolicy:
    def __init__(self, k: int, curve=None, tree_curve=None, budget: int = 0) -> None:
        """curve: the target's measured VerifyCost (engine.measure.verify_cost), or None (fallback: learnt per n);
        budget: the setting's tree (0: chains only), tree_curve: the measured cost of its tree passes
        (tree_verify_cost), or None (fallback: learnt per size, a size not seen yet costing a chain's)."""
        self.k = k
        self.budget = budget
        self.curve = curve
        self.tree_curve = tree_curve
        self._kept: dict[tuple[int, int], float] = {}
        self._tried: dict[tuple[int, int], float] = {}
        self._sibling_kept: dict[int, float] = {}  # rank ≥ 1 among a node's children → kept, after the ones before
        self._sibling_tried: dict[int, float] = {}
        self._verify_cost: dict[int, float] = {}  # tokens verified → seconds per pass
        self._tree_verify_cost: dict[int, float] = {}  # nodes + 1 → seconds per tree pass
        self._draft_cost = 0.0  # seconds per drafted token
        self._tree_draft_cost: float | None = None  # seconds per tree round's drafting

    def acceptance(self, bucket: int, position: int) -> float:
        key = (bucket, position)
        return (self._kept.get(key, 0.0) + 1.0) / (self._tried.get(key, 0.0) + 2.0)

    def sibling_acceptance(self, rank: int) -> float:
        """P(a node's child of this rank (≥ 1) is kept | the ones before it were refused), Beta(1, 1)-smoothed."""
        return (self._sibling_kept.get(rank, 0.0) + 1.0) / (self._sibling_tried.get(rank, 0.0) + 2.0)

    def _verify_seconds(self, n_tokens: int) -> float | None:
        if self.curve is not None:
            return self.curve.cost(n_tokens) * self._scale(self.curve)
        known = [n for n in self._verify_cost if n <= n_tokens]
        # Unmeasured lengths are assumed as cheap as the longest measured shorter one: optimism explores.
        return self._verify_cost[max(known)] if known else None

    def _scale(self, curve) -> float:
        """This run's one-token passes against the curve's."""
        seen = self._verify_cost.get(1)
        return 1.0 if seen is None else seen / curve.cost(1)

    def _tree_verify_seconds(self, n_tokens: int) -> float | None:
        if self.tree_curve is not None:
            return self.tree_curve.cost(n_tokens) * self._scale(self.tree_curve)
        known = [n for n in self._tree_verify_cost if n <= n_tokens]
        # no tree pass of this size or shorter seen: assumed to cost a chain's of as many tokens (optimism)
        return self._tree_verify_cost[max(known)] if known else self._verify_seconds(n_tokens)

    def best_length(self, bucket: int = 0, limit: int | None = None) -> int:
        return self._best_chain(bucket, limit)[0]

    def _best_chain(self, bucket: int = 0, limit: int | None = None) -> tuple[int, float]:
        """The chain length that pays best and its expected tokens per second (0 and None: nothing measured)."""
        limit = self.k if limit is None else min(limit, self.k)
        base = self._verify_seconds(1)
        if base is None:
            return 0, 0.0  # measure one plain step first: everything is compared with it
        best, best_rate = 0, 1.0 / base
        expected, survive = 1.0, 1.0
        for length in range(1, limit + 1):
            survive *= self.acceptance(bucket, length - 1)
            expected += survive
            cost = self._verify_seconds(length + 1) + length * self._draft_cost
            if expected / cost > best_rate:
                best, best_rate = length, expected / cost
        return best, best_rate

    def best_budget(self, bucket: int = 0, limit: int | None = None) -> int:
        """The tree's node budget (2…limit, at most the setting's) whose expected tokens per second beat every
        smaller budget's and the best chain's; 0 where a chain (best_length) pays best."""
        limit = self.budget if limit is None else min(limit, self.budget)
        best, best_rate = self._best_chain(bucket)
        if not best_rate or limit < 2:
            return 0
        best = 0
        draft = self.k * self._draft_cost if self._tree_draft_cost is None else self._tree_draft_cost
        first = [self.acceptance(bucket, depth) for depth in range(self.k)]
        for nodes, expected in enumerate(expected_tree_tokens(first, self.sibling_acceptance, limit), 1):
            cost = self._tree_verify_seconds(nodes + 1) + draft
            if nodes > 1 and expected / cost > best_rate:
                best, best_rate = nodes, expected / cost
        return best

    def learn(self, drafted, kept_ids: list[int], draft_seconds: float, verify_seconds: float) -> None:
        """One round: the Proposal drafted (engine.core.drafting; a chain or a tree) and the drafted ids the target
        kept, in order."""
        if drafted.parents is None:
            self.record(drafted.bucket, len(drafted.ids), len(kept_ids), draft_seconds, verify_seconds)
        else:
            self.record_tree(drafted.bucket, tree_levels(drafted.parents, drafted.ids, kept_ids), len(drafted.ids),
                             draft_seconds, verify_seconds)

    def record(self, bucket: int, n_drafted: int, n_accepted: int, draft_seconds: float,
               verify_seconds: float) -> None:
        self._fade()
        for position in range(min(n_accepted + 1, n_drafted)):
            self._count(self._kept, self._tried, (bucket, position), position < n_accepted)
        n_tokens = n_drafted + 1
        self._verify_cost[n_tokens] = _smoothed(self._verify_cost.get(n_tokens), verify_seconds)
        if n_drafted:
            self._draft_cost = _smoothed(self._draft_cost or None, draft_seconds / n_drafted)

    def record_tree(self, bucket: int, levels: list[tuple[int, int]], n_nodes: int, draft_seconds: float,
                    verify_seconds: float) -> None:
        """A tree round: per level walked (tree_levels), the rank of the child kept (−1: none) among how many; the
        first child counts at its depth as a chain's token there, the later ones by rank."""
        self._fade()
        for depth, (kept, n_children) in enumerate(levels):
            self._count(self._kept, self._tried, (bucket, depth), kept == 0)
            for rank in range(1, n_children if kept < 0 else kept + 1):
                self._count(self._sibling_kept, self._sibling_tried, rank, rank == kept)
        self._tree_verify_cost[n_nodes + 1] = _smoothed(self._tree_verify_cost.get(n_nodes + 1), verify_seconds)
        self._tree_draft_cost = _smoothed(self._tree_draft_cost, draft_seconds)

    def _fade(self) -> None:
        for kept, tried in ((self._kept, self._tried), (self._sibling_kept, self._sibling_tried)):
            for key in tried:
                tried[key] *= FORGET
                kept[key] *= FORGET

    @staticmethod
    def _count(kept: dict, tried: dict, key, was_kept: bool) -> None:
        tried[key] = tried.get(key, 0.0) + 1.0
        kept[key] = kept.get(key, 0.0) + (1.0 if was_kept else 0.0)


def _smoothed(old: float | None, new: float) -> float:
    return new if old is None else old + COST_SMOOTHING * (new - old)


def expected_tree_tokens(first: list[float], later, n_max: int) -> list[float]:
    """E[tokens per pass] of the best-first trees of 1…n_max nodes, len(first) deep: first[d] is the chance that a
    node's first child at depth d is kept (its parent kept), later(r) that its r-th (r ≥ 1) is, the ones before
    refused. A node is kept with the product along its path of its rank's share (first: p₀; r-th:
    p_r · Π_{j<r} (1 − p_j)); the tree takes the likeliest nodes first, each after its parent and its elder
    siblings (a drafter's order of preference), and a pass yields 1 + Σ of their chances."""
    def share(depth: int, rank: int) -> float:
        chances = [first[depth]] + [later(r) for r in range(1, rank + 1)]
        value = chances[rank]
        for chance in chances[:rank]:
            value *= 1.0 - chance
        return value

    heap = [(-share(0, 0), 0, 0, 1.0)] if first else []  # (−chance, depth, rank, the parent's chance)
    totals: list[float] = []
    total = 1.0
    while heap and len(totals) < n_max:
        negative, depth, rank, parent = heapq.heappop(heap)
        total -= negative
        totals.append(total)
        heapq.heappush(heap, (-parent * share(depth, rank + 1), depth, rank + 1, parent))
        if depth + 1 < len(first):
            heapq.heappush(heap, (negative * share(depth + 1, 0), depth + 1, 0, -negative))
    return totals


def tree_levels(parents, ids: list[int], kept_ids: list[int]) -> list[tuple[int, int]]:
    """What a tree round tells of each level it walked, root first: (rank of the child kept among its siblings,
    −1 where none was, how many children there were), down to the first level where none was kept (left out
    where the kept path ends at a leaf). The kept child is the first sibling with the kept id (a refused one
    never comes back: its residual chance is 0)."""
    children = children_of(parents)
    levels: list[tuple[int, int]] = []
    node = -1
    for token in list(kept_ids) + [None]:
        siblings = children.get(node, [])
        if not siblings:
            break
        rank = next((r for r, child in enumerate(siblings) if ids[child] == token), -1)
        levels.append((rank, len(siblings)))
        if rank < 0:
            break
        node = siblings[rank]
    return levels
