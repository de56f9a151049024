"""The figures, defined once. The GUI, the CLI and the benchmark all read them from here.

- acceptance rate α = accepted draft tokens / drafted tokens
- mean accepted length = committed tokens / target forward passes (the prefill counts as one)
- tok/s = committed tokens after the first / time after the first token; time to first token apart
- theoretical speed-up, in ONE place (`speedup_on_curve`): E[tokens per pass] × cost(1) /
  (cost(k+1) + k · draft cost per token), with cost(n) the measured cost of one target pass over n tokens
  (engine.measure.verify_cost measures it; on a CPU it can be several times one). E[tokens per pass] = (1 − α^(k+1)) /
  (1 − α) (Leviathan et al., arXiv 2211.17192, eq. 1). Rounds where the drafter had nothing to offer (a
  prompt-lookup miss) are plain steps: with f the share of rounds that drafted, the tokens are
  f·E + (1 − f) at a cost of f·(cost(k+1) + k·d) + (1 − f)·cost(1). k is the mean draft length of the
  drafting rounds (a fractional k reads the curve between its neighbours).
  A token tree's round is the same formula: k its nodes per pass, cost(n) a tree pass's over n − 1 nodes,
  the tokens per pass measured (or the adaptive budget's estimate); `tree_ceiling` is its best case.
  Fallback where no curve has been measured: verification is assumed free (cost(n) = cost(1)), with
  c = draft cost per drafted token / target cost per pass, which gives arXiv 2211.17192 §3.4's
  (1 − α^(k+1)) / ((1 − α)(1 + k·c)).
- speed-up = tok/s of a setting / tok/s of plain decoding on the same prompt in the same run;
  efficiency = measured speed-up / theoretical speed-up.

Pure arithmetic on round events; touches nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VerifyCost:
    """seconds[n − 1]: the median time of one target pass over n new tokens."""

    seconds: tuple[float, ...]

    @property
    def n_max(self) -> int:
        return len(self.seconds)

    def cost(self, n: float) -> float:
        """Seconds for a pass over n tokens: a fractional n (a mean pass size) between its neighbours;
        past the measured range, extended along its last step."""
        if n < 1:
            raise ValueError(f"a pass verifies at least 1 token, got {n}")
        if n <= self.n_max:
            low = int(n)
            high = min(low + 1, self.n_max)
            return self.seconds[low - 1] + (self.seconds[high - 1] - self.seconds[low - 1]) * (n - low)
        step = self.seconds[-1] - self.seconds[-2] if self.n_max > 1 else self.seconds[-1]
        return self.seconds[-1] + max(0.0, step) * (n - self.n_max)

    def relative(self, n: int) -> float:
        """cost(n) / cost(1): "verifying 4 tokens costs 3.2× one on this machine"."""
        return self.cost(n) / self.seconds[0]

    def as_dict(self) -> dict:
        return {"seconds": list(self.seconds), "relative": [self.relative(n) for n in range(1, self.n_max + 1)]}



def expected_tokens_per_pass(alpha: float, k: float) -> float:
    """(1 − α^(k+1)) / (1 − α): tokens one verification yields for per-token acceptance α."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


class FlatCost:
    """The fallback cost curve where none has been measured: every pass costs one unit, whatever it verifies."""

    def cost(self, n: float) -> float:
        return 1.0


FLAT = FlatCost()


def speedup_on_curve(tokens_per_pass: float, k: float, curve, draft_cost_per_token: float,
                     drafting_share: float = 1.0) -> float:
    """The one formula: tokens_per_pass × cost(1) / (f·(cost(k+1) + k·d) + (1 − f)·cost(1)), where
    tokens_per_pass already counts the plain rounds. `curve` has cost(n) (engine.core.stats.VerifyCost, or
    FLAT); d is in the curve's units (seconds for a measured one, target passes for FLAT).
    A token tree is the same formula with k its nodes verified per pass, d the draft cost per node and `curve`
    the cost of a tree pass (engine.measure.verify_cost.tree_verify_cost: cost(n + 1) a pass over the fed id
    and n nodes): the tokens a pass commits against what the pass and its draft cost, relative to plain
    decoding's one token a pass. A tree of N nodes with a path of at most k kept pays at most
    (k + 1) · cost(1) / cost(N + 1) (tree_ceiling), however well it is drafted."""
    if k <= 0 or drafting_share <= 0:
        return tokens_per_pass
    base = curve.cost(1)
    pass_cost = drafting_share * (curve.cost(k + 1) + k * draft_cost_per_token) + (1.0 - drafting_share) * base
    return tokens_per_pass * base / pass_cost


def tree_ceiling(depth: int, nodes: int, curve) -> float:
    """The most a pass over `nodes` drafted nodes can gain when at most `depth` of them are kept (every round's
    path kept whole, drafting free): (depth + 1) · cost(1) / cost(nodes + 1). Below 1, that size never pays."""
    return speedup_on_curve(min(depth, nodes) + 1.0, nodes, curve, 0.0)


def speedup_from_acceptance(alpha: float, k: float, cost_ratio: float, drafting_share: float = 1.0,
                        curve=None, draft_seconds_per_token: float | None = None) -> float:
    """Expected speed-up over plain decoding for per-token acceptance α and draft length k. With a
    measured `curve` (engine.core.stats.VerifyCost) the draft cost is `draft_seconds_per_token` (seconds;
    when None, cost_ratio × cost(1)). Without one (fallback), verification is assumed free and the draft
    costs cost_ratio target passes per token."""
    if k <= 0 or drafting_share <= 0:
        return 1.0
    tokens = drafting_share * expected_tokens_per_pass(alpha, k) + (1.0 - drafting_share)
    if curve is None:
        return speedup_on_curve(tokens, k, FLAT, cost_ratio, drafting_share)
    draft = cost_ratio * curve.cost(1) if draft_seconds_per_token is None else draft_seconds_per_token
    return speedup_on_curve(tokens, k, curve, draft, drafting_share)


def speedup(tok_per_s: float, baseline_tok_per_s: float) -> float | None:
    return tok_per_s / baseline_tok_per_s if baseline_tok_per_s > 0 else None


def efficiency(measured_speedup: float | None, theoretical: float) -> float | None:
    if measured_speedup is None or theoretical <= 0:
        return None
    return measured_speedup / theoretical


class _Rates:
    """The figures derived from counts, shared by one generation's stats and pooled ones."""

    __slots__ = ()
    verify_cost_seconds: tuple[float, ...] = ()  # the target's measured cost curve; pooled figures carry none

    @property
    def tok_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_tokens and self.decode_seconds > 0 else 0.0

    @property
    def e2e_tok_per_s(self) -> float:
        """Committed tokens over the whole wall time, prefill included (what `generate()` timings show)."""
        return self.committed_tokens / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.committed_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def mean_draft_length(self) -> float:
        return self.drafted_tokens / self.drafting_rounds if self.drafting_rounds else 0.0

    @property
    def drafting_share(self) -> float:
        return self.drafting_rounds / self.decode_rounds if self.decode_rounds > 0 else 0.0

    @property
    def cost_ratio(self) -> float:
        """c: draft seconds per drafted token / verify seconds per target pass."""
        if not self.drafted_tokens or not self.verify_seconds or not self.target_passes:
            return 0.0
        return (self.draft_seconds / self.drafted_tokens) / (self.verify_seconds / self.target_passes)

    @property
    def theoretical_speedup(self) -> float:
        """On the measured verify-cost curve when these figures carry one (verify_cost_seconds), else on
        the free-verification fallback. Token trees (tree_rounds): no per-token acceptance describes a tree's
        yield, so its tokens per pass are the measured ones, at the cost of passing its nodes (the chain's
        curve: a pass over n nodes costs about what a chain of n does; bench --sweep-tree measures trees')."""
        seconds = self.verify_cost_seconds
        if getattr(self, "tree_rounds", 0):
            curve = VerifyCost(tuple(seconds)) if seconds else FLAT
            draft = (self.draft_seconds / self.drafted_tokens if self.drafted_tokens else 0.0) if seconds \
                else self.cost_ratio
            return speedup_on_curve(self.mean_accepted_length, self.mean_draft_length, curve, draft,
                                    self.drafting_share)
        if not seconds:
            return speedup_from_acceptance(self.acceptance_rate, self.mean_draft_length, self.cost_ratio,
                                       self.drafting_share)
        draft = self.draft_seconds / self.drafted_tokens if self.drafted_tokens else 0.0
        return speedup_from_acceptance(self.acceptance_rate, self.mean_draft_length, self.cost_ratio,
                                   self.drafting_share, VerifyCost(tuple(seconds)), draft)


@dataclass(frozen=True, slots=True)
class GenerationStats(_Rates):
    k: int
    committed_tokens: int
    target_passes: int
    rounds: int
    drafting_rounds: int
    drafted_tokens: int
    accepted_tokens: int
    ttft_seconds: float
    elapsed_seconds: float
    draft_seconds: float
    verify_seconds: float
    per_position_acceptance: tuple[float, ...]  # position 1…max drafted: accepted / drafted there
    accept_length_histogram: tuple[int, ...]  # rounds that drafted, by n_accepted 0…max
    verify_cost_seconds: tuple[float, ...] = ()  # the target's measured cost curve, where known (engine.measure.verify_cost)
    # a recurrent state's rollbacks that restored a checkpoint and recomputed (restores, their seconds) or
    # recomputed the context from its start (refills); 0 where rollbacks are cuts (a KV cache, snapshots)
    rollback_restores: int = 0
    rollback_seconds: float = 0.0
    rollback_refills: int = 0
    # per drafter that drafted (a combined method has two): (name, drafting rounds, drafted, accepted)
    by_drafter: tuple[tuple[str, int, int, int], ...] = ()
    tree_rounds: int = 0  # rounds that drafted a token tree (engine.core.tree)
    network_seconds: float = 0.0  # the network's share of verify_seconds (a target on a server: engine.remote.verify)

    def drafter_acceptance(self) -> tuple[tuple[str, int, int, float], ...]:
        """(name, drafted, accepted, acceptance rate) of each drafter that drafted, in the order they first did."""
        return tuple((name, drafted, accepted, accepted / drafted if drafted else 0.0)
                     for name, _rounds, drafted, accepted in self.by_drafter)

    @property
    def decode_tokens(self) -> int:
        """Committed tokens after the first (the first one's time is the time to first token)."""
        return max(0, self.committed_tokens - 1)

    @property
    def decode_seconds(self) -> float:
        return max(0.0, self.elapsed_seconds - self.ttft_seconds)

    @property
    def decode_rounds(self) -> int:
        return max(0, self.rounds - 1)  # the prefill round never drafts

    def as_dict(self) -> dict:
        out = {name: getattr(self, name) for name in self.__slots__}
        for name in ("tok_per_s", "e2e_tok_per_s", "acceptance_rate", "mean_accepted_length",
                     "mean_draft_length", "drafting_share", "cost_ratio", "theoretical_speedup"):
            out[name] = getattr(self, name)
        out["per_position_acceptance"] = list(self.per_position_acceptance)
        out["accept_length_histogram"] = list(self.accept_length_histogram)
        out["verify_cost_seconds"] = list(self.verify_cost_seconds)
        out["by_drafter"] = [list(row) for row in self.by_drafter]
        return out


class StatsAccumulator:
    """Folds round events into GenerationStats; cheap enough to call once per round."""

    def __init__(self, k: int, verify_cost_seconds: tuple[float, ...] = ()) -> None:
        """verify_cost_seconds: the target's measured cost curve (VerifyCost.seconds), () where none is known."""
        self.k = k
        self.verify_cost_seconds = tuple(verify_cost_seconds)
        self.committed_tokens = 0
        self.target_passes = 0
        self.rounds = 0
        self.drafting_rounds = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.ttft_seconds = 0.0
        self.elapsed_seconds = 0.0
        self.draft_seconds = 0.0
        self.verify_seconds = 0.0
        self._drafted_at: list[int] = []
        self._accepted_at: list[int] = []
        self._histogram: list[int] = []
        self.rollback_restores, self.rollback_seconds, self.rollback_refills = 0, 0.0, 0
        self._by_drafter: dict[str, list[int]] = {}  # name → [drafting rounds, drafted, accepted]
        self.tree_rounds = 0
        self.network_seconds = 0.0

    def add_round(self, event) -> None:
        """Take one RoundVerified (duck-typed so that stats need not import events)."""
        n_drafted = len(event.draft_ids)
        if self.rounds == 0:
            self.ttft_seconds = event.elapsed_seconds
        self.rounds += 1
        self.target_passes += 1
        self.committed_tokens += len(event.committed_ids)
        self.elapsed_seconds = event.elapsed_seconds
        self.draft_seconds += event.draft_seconds
        self.verify_seconds += event.verify_seconds
        self.network_seconds += getattr(event, "network_seconds", 0.0)
        if n_drafted:
            self.drafting_rounds += 1
            self.drafted_tokens += n_drafted
            self.accepted_tokens += event.n_accepted
            mine = self._by_drafter.setdefault(event.drafter, [0, 0, 0])
            mine[0] += 1
            mine[1] += n_drafted
            mine[2] += event.n_accepted
            # per position: a tree counts its depths (drafted at depth d: some node there), as a chain its positions
            n_levels = max(event.depths) + 1 if event.tree_parents else n_drafted
            self.tree_rounds += bool(event.tree_parents)
            grow = n_levels - len(self._drafted_at)
            if grow > 0:
                self._drafted_at += [0] * grow
                self._accepted_at += [0] * grow
            for i in range(n_levels):
                self._drafted_at[i] += 1
            for i in range(event.n_accepted):
                self._accepted_at[i] += 1
            if event.n_accepted >= len(self._histogram):
                self._histogram += [0] * (event.n_accepted + 1 - len(self._histogram))
            self._histogram[event.n_accepted] += 1

    def set_elapsed(self, seconds: float) -> None:
        self.elapsed_seconds = max(self.elapsed_seconds, seconds)

    def set_rollbacks(self, restores: int, seconds: float, refills: int) -> None:
        self.rollback_restores, self.rollback_seconds, self.rollback_refills = restores, seconds, refills

    def snapshot(self) -> GenerationStats:
        per_position = tuple(a / d if d else 0.0 for a, d in zip(self._accepted_at, self._drafted_at))
        histogram = self._histogram + [0] * max(0, len(self._drafted_at) + 1 - len(self._histogram))
        return GenerationStats(
            k=self.k, committed_tokens=self.committed_tokens, target_passes=self.target_passes,
            rounds=self.rounds, drafting_rounds=self.drafting_rounds, drafted_tokens=self.drafted_tokens,
            accepted_tokens=self.accepted_tokens, ttft_seconds=self.ttft_seconds,
            elapsed_seconds=self.elapsed_seconds, draft_seconds=self.draft_seconds,
            verify_seconds=self.verify_seconds, per_position_acceptance=per_position,
            accept_length_histogram=tuple(histogram) if self.drafting_rounds else (),
            verify_cost_seconds=self.verify_cost_seconds, rollback_restores=self.rollback_restores,
            rollback_seconds=self.rollback_seconds, rollback_refills=self.rollback_refills,
            by_drafter=tuple((name, *counts) for name, counts in self._by_drafter.items()),
            tree_rounds=self.tree_rounds, network_seconds=self.network_seconds)


def describe_rollback(cost: dict | None) -> str:
    """A runner's rollback_cost() as one line for the Speculation panel ("" for a KV cache)."""
    if not cost:
        return ""
    size = cost.get("snapshot_bytes") or 0
    weight = f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{size / 2**10:.1f} kB"
    if cost.get("snapshots"):
        return (f"Recurrent state: llama.cpp keeps {cost['snapshots']} per-token snapshots of it ({weight} each), "
                "so a rejected draft is cut off like a KV cache's tail")
    return (f"Recurrent state ({weight}): a rejected draft restores the snapshot taken before the pass and "
            "recomputes the kept tokens")


@dataclass(frozen=True, slots=True)
class AggregateStats(_Rates):
    """Several generations' figures pooled (a benchmark config over many prompts)."""

    generations: int
    committed_tokens: int
    decode_tokens: int  # committed tokens after each generation's first
    decode_seconds: float
    elapsed_seconds: float
    target_passes: int
    drafted_tokens: int
    accepted_tokens: int
    drafting_rounds: int
    decode_rounds: int
    draft_seconds: float
    verify_seconds: float
    tree_rounds: int = 0


def aggregate(runs: list[GenerationStats]) -> AggregateStats:
    return AggregateStats(
        generations=len(runs),
        committed_tokens=sum(s.committed_tokens for s in runs),
        decode_tokens=sum(s.decode_tokens for s in runs),
        decode_seconds=sum(s.decode_seconds for s in runs),
        elapsed_seconds=sum(s.elapsed_seconds for s in runs),
        target_passes=sum(s.target_passes for s in runs),
        drafted_tokens=sum(s.drafted_tokens for s in runs),
        accepted_tokens=sum(s.accepted_tokens for s in runs),
        drafting_rounds=sum(s.drafting_rounds for s in runs),
        decode_rounds=sum(s.decode_rounds for s in runs),
        draft_seconds=sum(s.draft_seconds for s in runs),
        verify_seconds=sum(s.verify_seconds for s in runs),
        tree_rounds=sum(s.tree_rounds for s in runs))


@dataclass(frozen=True, slots=True)
class ServerStats:
    """What a remote server reported about one request's speculation (engine.remote.engine), kept apart from the
    figures measured on our side (tok/s, time to first token) so that every figure says where it came from.

    `source` names where the counts were read: "metrics" (the server's /metrics counters, before and after
    the request), "timings" (the response's own per-request figures), or "" (the server said nothing about
    speculation: `note` says what it exposes). The server's definitions, which llama.cpp and vLLM share:
    acceptance rate = accepted / drafted tokens; mean accepted length = 1 + accepted / drafts (tokens per
    verification step); acceptance at position i = accepted at i / drafts."""

    server: str  # llama-server | vllm | sglang | openai-compatible
    url: str
    source: str  # request (the response's own per-request metrics) | metrics | timings | ""
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]
    completion_tokens: int | None  # the server's own count (usage), None when it gave none
    settings: tuple[tuple[str, str], ...] = ()  # the server's speculation settings, where it reports them
    note: str = ""
    request_draft_tokens: int | None = None  # the response's own figures (llama-server timings.draft_n)
    request_accepted_tokens: int | None = None  # … and timings.draft_n_accepted
    server_prompt_seconds: float | None = None  # the server's own prompt time (timings.prompt_ms)
    server_tok_per_s: float | None = None  # the server's own decode speed (timings.predicted_per_second)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        return tuple(a / self.drafts for a in self.accepted_per_position) if self.drafts else ()

    def as_dict(self) -> dict:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["accepted_per_position"] = list(self.accepted_per_position)
        out["settings"] = dict(self.settings)
        for name in ("acceptance_rate", "mean_accepted_length"):
            out[name] = getattr(self, name)
        out["per_position_acceptance"] = list(self.per_position_acceptance)
        return out
