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
guesses are checked changes. Pure arithmetic on the figures the loop records; touches nothing else.
"""

from __future__ import annotations

FORGET = 0.98  # per round: old evidence fades, so a drafter that got better is tried again
COST_SMOOTHING = 0.3


class DraftLengthPolicy:
    def __init__(self, k: int, curve=None) -> None:
        """curve: the target's measured VerifyCost (engine.measure.verify_cost), or None (fallback: learnt per n)."""
        self.k = k
        self.curve = curve
        self._kept: dict[tuple[int, int], float] = {}
        self._tried: dict[tuple[int, int], float] = {}
        self._verify_cost: dict[int, float] = {}  # tokens verified → seconds per pass
        self._draft_cost = 0.0  # seconds per drafted token

    def acceptance(self, bucket: int, position: int) -> float:
        key = (bucket, position)
        return (self._kept.get(key, 0.0) + 1.0) / (self._tried.get(key, 0.0) + 2.0)

    def _verify_seconds(self, n_tokens: int) -> float | None:
        if self.curve is not None:
            seen = self._verify_cost.get(1)
            scale = 1.0 if seen is None else seen / self.curve.cost(1)  # this run's passes against the curve's
            return self.curve.cost(n_tokens) * scale
        known = [n for n in self._verify_cost if n <= n_tokens]
        # Unmeasured lengths are assumed as cheap as the longest measured shorter one: optimism explores.
        return self._verify_cost[max(known)] if known else None

    def best_length(self, bucket: int = 0, limit: int | None = None) -> int:
        limit = self.k if limit is None else min(limit, self.k)
        base = self._verify_seconds(1)
        if base is None:
            return 0  # measure one plain step first: everything is compared with it
        best, best_rate = 0, 1.0 / base
        expected, survive = 1.0, 1.0
        for length in range(1, limit + 1):
            survive *= self.acceptance(bucket, length - 1)
            expected += survive
            cost = self._verify_seconds(length + 1) + length * self._draft_cost
            if expected / cost > best_rate:
                best, best_rate = length, expected / cost
        return best

    def record(self, bucket: int, n_drafted: int, n_accepted: int, draft_seconds: float,
               verify_seconds: float) -> None:
        for key in self._tried:
            self._tried[key] *= FORGET
            self._kept[key] *= FORGET
        for position in range(min(n_accepted + 1, n_drafted)):
            key = (bucket, position)
            self._tried[key] = self._tried.get(key, 0.0) + 1.0
            self._kept.setdefault(key, 0.0)
            if position < n_accepted:
                self._kept[key] += 1.0
        n_tokens = n_drafted + 1
        old = self._verify_cost.get(n_tokens)
        self._verify_cost[n_tokens] = verify_seconds if old is None else \
            old + COST_SMOOTHING * (verify_seconds - old)
        if n_drafted:
            per_token = draft_seconds / n_drafted
            self._draft_cost = per_token if not self._draft_cost else \
                self._draft_cost + COST_SMOOTHING * (per_token - self._draft_cost)
