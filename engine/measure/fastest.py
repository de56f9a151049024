"""Which setting is fastest here? A short sweep over methods and k with repeats, and its one answer.

A single run per setting makes the best k noise (one run's ranking of k flips from run to run), so every
setting runs `repeats` times (≥ 3). Each repeat is one ordinary comparison (engine.measure.compare: plain decoding
first, then every setting, from an empty KV cache), so each speed-up is measured against the plain run of
the same repeat, and drift over the sweep hits plain and speculative runs alike. A setting's figure is the
median of its speed-ups, its noise the range (lowest…highest); the winner is the highest median, plain
decoding (1×) unless a setting beats it.

`FastestSweep` is the fold (the GUI sends one comparison per repeat and feeds it the finished runs);
`find_fastest` drives an engine through every repeat for the CLI or a script. No Qt, no files.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from engine.measure.baselines import ComparisonPlan, baseline_label, plain_decoding_words
from engine.measure.compare import PLAIN, PLAN_INDEX, comparison_events
from engine.core.config import SamplingConfig, SpecConfig, check_k, check_tree
from engine.core.methods import MethodSpec, method_spec, methods
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished
from engine.core.stats import speedup

MIN_REPEATS = 3
DEFAULT_KS = (2, 4, 6)
DEFAULT_MAX_NEW_TOKENS = 64


@dataclass(frozen=True, slots=True)
class SettingResult:
    """One setting over the repeats: its speed-up against each repeat's plain run, and their median."""

    spec: SpecConfig
    speedups: tuple[float, ...]  # one per finished repeat, vs that repeat's plain decoding on the same backend
    tok_per_s: tuple[float, ...]
    acceptance_rates: tuple[float, ...]
    vs_fastest_plain: tuple[float, ...] = ()  # per repeat, vs that repeat's fastest plain run on any backend
    baseline: str = ""  # which plain decoding `speedups` are against ("plain on transformers")

    @property
    def median_vs_fastest_plain(self) -> float:
        return statistics.median(self.vs_fastest_plain) if self.vs_fastest_plain else self.median

    @property
    def median(self) -> float:
        return statistics.median(self.speedups) if self.speedups else 0.0

    @property
    def low(self) -> float:
        return min(self.speedups, default=0.0)

    @property
    def high(self) -> float:
        return max(self.speedups, default=0.0)

    @property
    def median_tok_per_s(self) -> float:
        return statistics.median(self.tok_per_s) if self.tok_per_s else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return statistics.median(self.acceptance_rates) if self.acceptance_rates and self.spec.speculative else None

    def as_dict(self) -> dict:
        return {"setting": self.spec.label(), "method": self.spec.method,
                "k": self.spec.k if self.spec.speculative else None, "median_speedup": self.median,
                "low": self.low, "high": self.high, "speedups": list(self.speedups),
                "median_tok_per_s": self.median_tok_per_s, "acceptance_rate": self.acceptance_rate,
                "baseline": self.baseline, "median_vs_fastest_plain": self.median_vs_fastest_plain}


@dataclass(frozen=True, slots=True)
class FastestResult:
    """Every setting, fastest first (plain decoding among them at 1× by definition), and the winner."""

    results: tuple[SettingResult, ...]
    repeats: int  # repeats that finished (plain and every setting)
    winner: SettingResult

    @property
    def several_backends(self) -> bool:
        """Plain decoding ran on more than one backend (each setting judged against its own)."""
        return sum(not r.spec.speculative for r in self.results) > 1

    @property
    def plain(self) -> SettingResult:
        """The fastest plain decoding (the winner to beat)."""
        return max((r for r in self.results if not r.spec.speculative), key=lambda r: r.median_tok_per_s)

    @property
    def clear_win(self) -> bool:
        """The winner's slowest repeat still beats plain decoding: the win is not noise."""
        return self.winner.spec.speculative and self.winner.low > 1.0

    def verdict(self) -> str:
        """One sentence for the user."""
        w = self.winner
        if not w.spec.speculative:
            return (f"Plain decoding is fastest here: no setting beat it (median of {self.repeats} repeats "
                    "each).")
        noise = "" if self.clear_win else "; its range reaches below 1×, so the gain may be noise"
        against = plain_decoding_words(w.baseline) if self.several_backends else "plain decoding"
        text = (f"Fastest here: {w.spec.label()} at {w.median:.2f}× {against} "
                f"(range {w.low:.2f}–{w.high:.2f}× over {self.repeats} repeats{noise})")
        if self.several_backends:
            text += f"; {w.median_vs_fastest_plain:.2f}× the fastest plain decoding here ({self.plain.baseline})"
        return text + "."

    def as_dict(self) -> dict:
        return {"repeats": self.repeats, "winner": self.winner.spec.label(), "clear_win": self.clear_win,
                "results": [r.as_dict() for r in self.results]}


def candidate_specs(names: Iterable[str], ks: Iterable[int] = DEFAULT_KS, *, draft: str | None = None,
                    backend: str | None = None, trees: Iterable[int] = (), **params) -> list[SpecConfig]:
    """Every speculative method of `names` at every k, leaving out what cannot run: a method that needs a
    draft without a `draft`, a method `backend` cannot serve. Each method gets the `params` it declares
    (e.g. layers=2); a method that branches also runs a token tree of each budget of `trees` at every k, beside
    its chain. ConfigError for an unknown method, a bad k or a bad budget."""
    ks = [check_k(k) for k in ks]
    trees = [check_tree(tree) for tree in trees if tree]
    specs = []
    for name in names:
        info = method_spec(name)
        if not info.speculative or (info.needs_draft and not draft) or (backend and not info.supports(backend)):
            continue
        own = {key: value for key, value in params.items() if info.param(key) is not None}
        chains = [SpecConfig(method=name, k=k, draft=draft if info.needs_draft else None, params=own) for k in ks]
        specs += chains + [chain.with_tree(tree) for chain in chains for tree in (trees if info.branches else ())]
    return specs


def sweep_methods() -> list[MethodSpec]:
    """The methods the fastest-setting sweep tries, in their MethodSpecs' order (sweep_rank)."""
    ranked = [m for m in methods() if m.speculative and m.sweep_rank is not None]
    return sorted(ranked, key=lambda m: m.sweep_rank)


def all_methods() -> list[str]:
    return [m.name for m in methods() if m.speculative]


class FastestSweep:
    """The fold of a fastest-setting sweep: `repeats` comparisons of the same settings, each plain first."""

    def __init__(self, specs: Iterable[SpecConfig], repeats: int = MIN_REPEATS) -> None:
        specs = [s for s in specs if s.speculative]
        if not specs:
            raise ConfigError("nothing to compare: no speculative setting can run here")
        if not isinstance(repeats, int) or repeats < MIN_REPEATS:
            raise ConfigError(f"repeats must be an integer ≥ {MIN_REPEATS}, got {repeats!r}")
        self.specs = specs
        self.plan = ComparisonPlan.of(specs)  # what one repeat runs: plain decoding on each backend, then the specs
        self.repeats = repeats
        self.finished: list[dict[int, GenerationFinished]] = []  # per repeat: run index -> its end

    @property
    def runs(self) -> tuple[SpecConfig, ...]:
        return self.plan.runs

    def replan(self, plan: ComparisonPlan) -> None:
        """The plan the engine runs (comparison_events' first item: the backends settings were placed on)."""
        if plan.runs != self.plan.runs and self.finished:
            raise ConfigError("the sweep's settings moved to other backends between repeats")
        self.plan = plan

    @property
    def total_runs(self) -> int:
        return self.repeats * len(self.runs)

    @property
    def runs_done(self) -> int:
        return sum(len(done) for done in self.finished)

    def add(self, repeat: int, index: int, finished: GenerationFinished) -> None:
        """Run `index` (into `runs`) of repeat `repeat` (0-based) ended; a cancelled run does not count."""
        while len(self.finished) <= repeat:
            self.finished.append({})
        if finished.stop_reason != "cancelled" and not finished.error:
            self.finished[repeat][index] = finished

    def complete_repeats(self) -> list[dict[int, GenerationFinished]]:
        return [done for done in self.finished if len(done) == len(self.runs)]

    def result(self) -> FastestResult | None:
        """The answer from every complete repeat; None before the first one."""
        repeats = self.complete_repeats()
        if not repeats:
            return None
        results = [self._setting(index, repeats) for index in range(len(self.runs))]
        # fastest first; a tie goes to plain decoding, then to the smaller k (less wasted work)
        # (ranked against the fastest plain decoding on any backend: what is fastest on this machine)
        results.sort(key=lambda r: (-round(r.median_vs_fastest_plain, 6), r.spec.speculative, r.spec.k))
        return FastestResult(tuple(results), len(repeats), results[0])

    def _setting(self, index: int, repeats: list[dict[int, GenerationFinished]]) -> SettingResult:
        """Run `index` over the complete repeats: against its own backend's plain run and the fastest one."""
        base = self.plan.baseline_index(index)
        ups, rates, speeds, vs_fastest = [], [], [], []
        for done in repeats:
            run = done[index].stats
            plain = done[base].stats.tok_per_s
            fastest = max(done[i].stats.tok_per_s for i in self.plan.plain_indices)
            ups.append(speedup(run.tok_per_s, plain) if plain > 0 else 0.0)
            vs_fastest.append(speedup(run.tok_per_s, fastest) if fastest > 0 else 0.0)
            speeds.append(run.tok_per_s)
            rates.append(run.acceptance_rate)
        return SettingResult(self.runs[index], tuple(ups), tuple(speeds), tuple(rates), tuple(vs_fastest),
                             baseline_label(self.plan.backend_of(base)))


def find_fastest(engine, prompt, specs: Iterable[SpecConfig], *, repeats: int = MIN_REPEATS,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, sampling: SamplingConfig = SamplingConfig(),
                 cancel: threading.Event | None = None, system: str | None = None,
                 on_run: Callable[[int, int, GenerationFinished], None] | None = None) -> FastestResult | None:
    """Run the sweep on `engine` (repeat after repeat) and return its answer; None when stopped before one
    repeat finished. `on_run(repeat, index, finished)` is called after each run."""
    sweep = FastestSweep(specs, repeats)
    cancel = cancel or threading.Event()
    for repeat in range(repeats):
        for index, event in comparison_events(engine, prompt, sweep.specs, max_new_tokens=max_new_tokens,
                                              sampling=sampling, cancel=cancel, system=system):
            if index == PLAN_INDEX:
                sweep.replan(event)
            elif isinstance(event, GenerationFinished):
                sweep.add(repeat, index, event)
                if on_run is not None:
                    on_run(repeat, index, event)
        if cancel.is_set():
            break
    return sweep.result()


__all__ = ["SettingResult", "FastestResult", "FastestSweep", "candidate_specs", "all_methods", "sweep_methods",
           "find_fastest",
           "MIN_REPEATS", "DEFAULT_KS", "DEFAULT_MAX_NEW_TOKENS", "PLAIN"]
