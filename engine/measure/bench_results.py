"""`specscope bench`'s rows: what each row's runs tallied (per category and overall, 'all') and the figures
summarised from them. A `ConfigResult` is one of our configs, measured here, its greedy outputs diagnosed against
plain decoding and, under --compare-hf, transformers' generate() beside it; a `ServerResult` is a model on a
server (engine.remote.engine) run as its server was started: tok/s measured here, acceptance as the server
reports it, no theory and no diagnosis. What differs is written in each type.

Plain data and the definitions of engine.core.stats; runs nothing, touches nothing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.config import REMOTE_PREFIX, SpecConfig
from engine.core.stats import AggregateStats, GenerationStats, aggregate, efficiency, speedup
from engine.measure.bench_llama import comparison_row
from engine.measure.divergence import Divergence
from engine.measure.prompts import Prompt
from engine.measure.verify_cost import theoretical_from_stats

if TYPE_CHECKING:
    from engine.remote.engine import RemoteEngine

__all__ = ["RunTally", "ConfigResult", "ServerResult", "summarise"]


def _counts() -> defaultdict:
    return defaultdict(int)


@dataclass
class RunTally:
    """What a row's runs gave, per category and overall: their stats, their outputs (by prompt id) and how many
    equal plain decoding's (the run's first row)."""

    spec: SpecConfig
    stats: dict[str, list[GenerationStats]] = field(default_factory=lambda: defaultdict(list))
    identical: dict[str, int] = field(default_factory=_counts)
    outputs: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def record(self, prompt: Prompt, finished, baseline: RunTally) -> None:
        """Count one finished run (engine.core.events.GenerationFinished) of `prompt`."""
        for key in ("all", prompt.category):
            self.stats[key].append(finished.stats)
        self.outputs[prompt.id] = finished.output_ids
        if finished.output_ids == baseline.outputs[prompt.id]:
            for key in ("all", prompt.category):
                self.identical[key] += 1


@dataclass
class ConfigResult(RunTally):
    """One of our configs, run here. `diagnosed`: greedy and local, so every output that differs from plain
    decoding's got a diagnosis (engine.measure.divergence), counted as a near-tie or a mismatch."""

    hf_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    hf_tokens: dict[str, int] = field(default_factory=_counts)
    hf_identical: int = 0
    diagnosed: bool = False
    near_ties: dict[str, int] = field(default_factory=_counts)
    mismatches: dict[str, int] = field(default_factory=_counts)
    divergences: dict[str, Divergence] = field(default_factory=dict)  # by prompt id

    @property
    def label(self) -> str:
        return self.spec.label()

    def figures_from(self) -> str:
        """Where this row's figures come from, in words (the report says it for every row)."""
        return "measured here"

    def equality_counts(self, key: str) -> dict:
        """identical / near_ties / mismatches for `key` ("all" or a category); None where not diagnosed
        (sampling: outputs are not compared token for token)."""
        if not self.diagnosed:
            return {"identical": None, "near_ties": None, "mismatches": None}
        return {"identical": self.identical[key], "near_ties": self.near_ties[key],
                "mismatches": self.mismatches[key]}

    def add_divergence(self, prompt: Prompt, divergence: Divergence) -> None:
        self.divergences[prompt.id] = divergence
        counter = self.near_ties if divergence.is_near_tie else self.mismatches
        for key in ("all", prompt.category):
            counter[key] += 1

    def record_hf(self, prompt: Prompt, finished, new_ids: list[int], seconds: float) -> None:
        """Count transformers' generate() on the same prompt (--compare-hf) beside our `finished` run."""
        for key in ("all", prompt.category):
            self.hf_seconds[key] += seconds
            self.hf_tokens[key] += len(new_ids)
        ours = list(finished.output_ids)
        self.hf_identical += int(new_ids[:len(ours)] == ours)

    def finish_row(self, row: dict, key: str, is_baseline: bool, compare_hf: bool) -> None:
        """transformers' figures beside ours (--compare-hf)."""
        if compare_hf and self.hf_seconds[key] > 0:
            hf_tok_s = self.hf_tokens[key] / self.hf_seconds[key]
            row["hf_e2e_tok_per_s"] = hf_tok_s
            row["ours_over_hf"] = row["e2e_tok_per_s"] / hf_tok_s if hf_tok_s else None

    def finish_overall(self, row: dict, compare_hf: bool) -> None:
        """The overall row's outputs beside transformers' and the diagnosed divergences."""
        if compare_hf:
            row["hf_identical_outputs"] = self.hf_identical
        if self.diagnosed:
            row["divergences"] = [{"prompt": prompt_id, **d.as_dict()} for prompt_id, d in self.divergences.items()]


@dataclass
class ServerResult(RunTally):
    """A model on a server, run as its server was started (as the run's model, or a `remote:url=…` config):
    the server reports no draft/verify times, so there is no theory to hold it to, and beside local plain
    decoding it has no speed-up of its own (engine.measure.baselines' vs_fastest_plain compares it)."""

    server: RemoteEngine = field(kw_only=True)

    @property
    def label(self) -> str:
        return f"{REMOTE_PREFIX}url={self.server.target.address.url}"

    def figures_from(self) -> str:
        info = self.server.server
        counts = "/metrics" if info.metrics else "response timings (no /metrics)"
        return (f"tok/s and TTFT measured here, network included; acceptance from {info.kind}'s {counts} "
                f"at {self.server.target.address.url}")

    def equality_counts(self, key: str) -> dict:
        """Not diagnosed: a server's outputs are its own run's."""
        return {"identical": None, "near_ties": None, "mismatches": None}

    def finish_row(self, row: dict, key: str, is_baseline: bool, compare_hf: bool) -> None:
        row["theoretical_speedup"] = row["efficiency"] = None
        if not is_baseline:
            row["speedup"], row["baseline"] = None, ""

    def finish_overall(self, row: dict, compare_hf: bool) -> None:
        """Nothing more: no reference ran beside it, nothing was diagnosed."""


def summarise(results: list[ConfigResult | ServerResult], compare_hf: bool, comparisons: dict | None = None,
              cost=None, against: str = "") -> dict:
    """Every row's figures, overall ('all') and per category, as plain data; with the measured verify
    cost curve `cost` (engine.measure.verify_cost), the theoretical speed-up on it too. `against` names the
    baseline (results[0]: plain decoding on the same backend); a server's row has none (speed-up None)."""
    baseline = results[0]
    out = {}
    for result in results:
        rows = {}
        for key, runs in result.stats.items():
            pooled = aggregate(runs)
            row = _row(result, key, pooled, aggregate(baseline.stats[key]), cost)
            row.update(comparison_row((comparisons or {}).get(result.label), key, pooled.tok_per_s))  # ours only
            row["figures_from"] = result.figures_from()
            row["baseline"] = against
            result.finish_row(row, key, result is baseline, compare_hf)
            rows[key] = row
        result.finish_overall(rows["all"], compare_hf)
        out[result.label] = rows
    return out


def _row(result: RunTally, key: str, pooled: AggregateStats, base: AggregateStats, cost) -> dict:
    """The pooled figures of `result`'s row `key` against its baseline's, in the order the JSON keeps."""
    measured = speedup(pooled.tok_per_s, base.tok_per_s)
    row = {
        "prompts": pooled.generations,
        "tokens": pooled.committed_tokens,
        "tok_per_s": pooled.tok_per_s,
        "e2e_tok_per_s": pooled.e2e_tok_per_s,
        "speedup": measured,
        "acceptance_rate": pooled.acceptance_rate,
        "mean_accepted_length": pooled.mean_accepted_length,
        "theoretical_speedup": pooled.theoretical_speedup,
        "efficiency": efficiency(measured, pooled.theoretical_speedup),
        "identical_to_none": result.identical[key],
        **result.equality_counts(key),
        "draft_seconds": pooled.draft_seconds,
        "verify_seconds": pooled.verify_seconds,
        "drafted_tokens": pooled.drafted_tokens,
        "accepted_tokens": pooled.accepted_tokens,
        "decode_tokens": pooled.decode_tokens,
        "decode_rounds": pooled.decode_rounds,
        "cost_ratio": pooled.cost_ratio,
    }
    if cost is not None:
        on_cost = theoretical_from_stats(pooled, cost)
        row["theoretical_speedup_measured_cost"] = on_cost
        row["efficiency_measured_cost"] = efficiency(measured, on_cost) if on_cost else None
    return row
