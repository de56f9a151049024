"""Several settings on one prompt, one after another on the same device, and the k sweep: the logic shared by
`specscope bench` (engine.measure.bench), the GUI's compare window (gui.sessions.compare) and scripted --compare.

Runs never overlap: concurrent runs would distort each other's timing. Plain decoding runs first, once on
every backend a setting runs on (`ComparisonPlan`, the one rule: a method "auto" moves to transformers runs
beside a plain run there), so every speed-up and every equality claim is judged against plain decoding on the
same backend, dtype and device in the same session; a row's tok/s against the fastest plain run of all is a
separate figure (`vs_fastest_plain`), never the equality claim. Where one differs, the divergence is diagnosed
(engine.measure.divergence: a numerics near-tie or a real mismatch) and reported beside the run; `strict=True` reruns
it all in float32 on the CPU with the transformers backend (`strict_engine`), where equality must be exact.
The k sweep (`sweep_specs`, `sweep_summary`) turns measured points into the theoretical curve and the best k.

Drives an Engine it is given (engine.core.engine); loads a model only for the strict check; no Qt, no files.
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator

import engine.drafters  # noqa: F401  (registers the methods; PLAIN below is one)
from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.measure.baselines import ComparisonPlan, baseline_label, with_plain_first
from engine.measure.divergence import Divergence, diagnose, first_difference
from engine.core.events import Event, GenerationFinished, RoundVerified
from engine.core.stats import GenerationStats, efficiency, speedup, speedup_from_acceptance

PLAIN = SpecConfig()


MEASURED_HERE = "measured here"
STRICT = {"device": "cpu", "dtype": "float32", "backend": "transformers"}  # where equality must be exact


def is_strict(target) -> bool:
    """Whether `target` already runs where greedy equality is exact (float32, CPU, transformers)."""
    device_type = str(target.device).split(":")[0]
    return (target.backend, device_type, target.dtype_label) == ("transformers", "cpu", "float32")


def strict_engine(engine, progress=None):
    """The same target in float32 on the CPU with the transformers backend (the engine itself when it runs
    there already): the strict check's engine. Drafts load the same way."""
    if is_strict(engine.target):
        return engine
    from engine.models.load import load_model
    from engine.runtime import local_engine

    def strict_loader(name, progress=None, **_ignored):
        return load_model(name, progress=progress, **STRICT)

    target = strict_loader(engine.target.name, progress)
    return local_engine(target, draft_loader=strict_loader, on_status=progress)


def runs_on(engine, spec: SpecConfig):
    """The engine `spec` runs on: a BackendRouter's engine for its backend, else `engine` itself. Its target is
    the one a differing output is diagnosed on."""
    from engine.runtime import BackendRouter
    return engine.engine_for(spec) if isinstance(engine, BackendRouter) else engine


def diagnose_run(engine, prompt, system: str | None, plain: GenerationFinished | None,
                 finished: GenerationFinished, rounds: list[RoundVerified], greedy: bool) -> Divergence | None:
    """The divergence of a finished greedy run from its plain baseline (None when identical, when sampling, or
    when either run was cut short by Stop or an error, or for a server's run: its token ids are not ours).
    `engine` is the one both ran on. Costs nothing for an identical output."""
    if not greedy or plain is None or finished.output_ids == plain.output_ids or finished.server is not None:
        return None
    if {plain.stop_reason, finished.stop_reason} & {"cancelled", "out-of-memory"}:
        return None
    prompt_ids = prompt if isinstance(prompt, list) else engine.prompt_ids(prompt, system)
    return diagnose(engine.target, prompt_ids, plain.output_ids, finished.output_ids, rounds)


PLAN_INDEX = -1  # comparison_events' first item: (PLAN_INDEX, the ComparisonPlan it runs)


def comparison_events(engine, prompt, specs: list[SpecConfig], *, max_new_tokens: int = 128,
                      sampling: SamplingConfig = SamplingConfig(), cancel: threading.Event | None = None,
                      system: str | None = None, strict: bool = False, diagnosis: bool = True
                      ) -> Iterator[tuple[int, Event | Divergence | ComparisonPlan]]:
    """First (PLAN_INDEX, plan): what will run (ComparisonPlan: a plain baseline on every backend used); then
    (index into plan.runs, event) for every run in turn. Each run starts from an empty KV cache, so none
    profits from another's prefill. A greedy run whose output differs from its own backend's plain decoding is
    followed by its diagnosis, (index, Divergence), unless `diagnosis` is False (a caller that only times the
    runs). `strict`: on strict_engine(engine)."""
    cancel = cancel or threading.Event()
    if strict:
        engine = strict_engine(engine, engine.on_status)
    plan = ComparisonPlan.of(specs, engine.target.backend)
    yield PLAN_INDEX, plan
    plains: dict[int, GenerationFinished] = {}
    for index, spec in enumerate(plan.runs):
        if cancel.is_set():
            return
        engine.release()
        rounds: list[RoundVerified] = []
        for event in engine.generate(prompt, spec=spec, sampling=sampling, max_new_tokens=max_new_tokens,
                                     cancel=cancel, system=system):
            if isinstance(event, RoundVerified):
                rounds.append(event)
            elif isinstance(event, GenerationFinished):
                if plan.is_plain(index):
                    plains[index] = event
                base = plan.baseline_index(index)
                plain = plains.get(base) if base is not None else None
                divergence = diagnose_run(runs_on(engine, spec), prompt, system, plain, event, rounds,
                                          sampling.greedy and diagnosis)
                yield index, event
                if divergence is not None:
                    yield index, divergence
                continue
            yield index, event


def text_diff(plain: str, other: str) -> str:
    """A unified word-level diff, readable in a text box."""
    return "\n".join(difflib.unified_diff(plain.split(" "), other.split(" "), "plain", "this setting",
                                          lineterm="", n=3))


BASELINE_MISSING = " (not measured: that run did not finish)"
NOT_MEASURED = "not compared (its plain decoding did not finish)"


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    label: str
    spec: SpecConfig
    stats: GenerationStats
    text: str
    output_ids: tuple[int, ...]
    tok_per_s: float
    speedup: float | None
    acceptance_rate: float
    mean_accepted_length: float
    theoretical_speedup: float
    efficiency: float | None
    draft_seconds: float
    verify_seconds: float
    identical_to_plain: bool | None  # None when sampling (outputs need not match)
    first_difference: int | None
    diff: str
    divergence: Divergence | None = None  # the diagnosis of the first difference (engine.measure.divergence)
    figures_from: str = MEASURED_HERE  # or "the server at URL": a remote row's counts are the server's own
    baseline: str = ""  # what speed-up and equality are judged against: "plain on transformers · cpu · bfloat16"
    # ("" for a server's row: no plain baseline of its own)
    vs_fastest_plain: float | None = None  # tok/s ÷ the fastest plain decoding of the run, on any backend
    # (the cross-backend picture; never the equality claim)
    is_baseline: bool = False  # a plain decoding run: some rows' baseline

    @property
    def equality(self) -> str:
        """identical | near-tie | mismatch | differs (not diagnosed) | sampled (not compared token for token) |
        not compared (the server's tokens, or its plain decoding did not finish)"""
        if self.identical_to_plain is None:
            if self.spec.remote_url is not None:
                return "not compared (the server's tokens)"
            return NOT_MEASURED if self.baseline.endswith(BASELINE_MISSING) else "sampled"
        if self.identical_to_plain:
            return "identical"
        return self.divergence.kind if self.divergence is not None else "differs"

    def as_dict(self) -> dict:
        return {"label": self.label, "method": self.spec.method, "k": self.spec.k, "tok_per_s": self.tok_per_s,
                "speedup": self.speedup, "acceptance_rate": self.acceptance_rate,
                "mean_accepted_length": self.mean_accepted_length,
                "theoretical_speedup": self.theoretical_speedup, "efficiency": self.efficiency,
                "draft_seconds": self.draft_seconds, "verify_seconds": self.verify_seconds,
                "identical_to_plain": self.identical_to_plain, "first_difference": self.first_difference,
                "equality": self.equality, "figures_from": self.figures_from, "baseline": self.baseline,
                "vs_fastest_plain": self.vs_fastest_plain,
                "divergence": self.divergence.as_dict() if self.divergence is not None else None,
                "tokens": self.stats.committed_tokens, "text": self.text}


def summary_rows(specs: list[SpecConfig], finished: dict[int, GenerationFinished], greedy: bool,
                 divergences: dict[int, Divergence] | None = None, *, plan: ComparisonPlan | None = None,
                 started: dict | None = None) -> list[ComparisonRow]:
    """The table: one row per finished run of `plan` (ComparisonPlan.of(specs) when not given), each judged
    against plain decoding on its own backend (speed-up, identical, diff), and its tok/s against the fastest
    plain run of all (`vs_fastest_plain`); `divergences` by run index (from comparison_events) give a differing
    row its diagnosis, `started` (GenerationStarted by run index) the baselines' device and dtype for labels."""
    divergences, started = divergences or {}, started or {}
    plan = plan or ComparisonPlan.of(specs)
    plain_speeds = [finished[i].stats.tok_per_s for i in plan.plain_indices if i in finished]
    fastest_plain = max(plain_speeds, default=0.0)
    rows = []
    for index, spec in enumerate(plan.runs):
        done = finished.get(index)
        if done is None:
            continue
        base = plan.baseline_index(index)
        plain = finished.get(base) if base is not None else None
        rows.append(_row(plan, index, done, plain, greedy, divergences.get(index), fastest_plain,
                         _baseline(plan, base, started.get(base))))
    return rows


def _baseline(plan: ComparisonPlan, base: int | None, started) -> str:
    if base is None:
        return ""
    device, dtype = (started.device, started.dtype) if started is not None else ("", "")
    return baseline_label(plan.backend_of(base), device, dtype)


def _row(plan: ComparisonPlan, index: int, done: GenerationFinished, plain: GenerationFinished | None,
         greedy: bool, divergence: Divergence | None, fastest_plain: float, baseline: str) -> ComparisonRow:
    """One run's row, judged against `plain` (its own backend's plain decoding; None: not measured)."""
    spec, s = plan.runs[index], done.stats
    if plain is None and baseline:  # its plain run was stopped or failed: said, never another backend's used
        baseline += BASELINE_MISSING
    measured = speedup(s.tok_per_s, plain.stats.tok_per_s) if plain else None
    compared = plain is not None and greedy and spec.remote_url is None  # a server's ids are not ours
    difference = first_difference(plain.output_ids, done.output_ids) if compared else None
    identical = (difference is None) if compared else None
    return ComparisonRow(
        label=spec.label(), spec=spec, stats=s, text=done.text, output_ids=done.output_ids,
        tok_per_s=s.tok_per_s, speedup=measured, acceptance_rate=s.acceptance_rate,
        mean_accepted_length=s.mean_accepted_length, theoretical_speedup=s.theoretical_speedup,
        efficiency=efficiency(measured, s.theoretical_speedup), draft_seconds=s.draft_seconds,
        verify_seconds=s.verify_seconds, identical_to_plain=identical, first_difference=difference,
        diff="" if identical in (True, None) else text_diff(plain.text, done.text),
        divergence=divergence if identical is False else None,
        figures_from=MEASURED_HERE if spec.remote_url is None else f"the server at {spec.remote_url}",
        baseline=baseline, vs_fastest_plain=speedup(s.tok_per_s, fastest_plain) if fastest_plain > 0 else None,
        is_baseline=plan.is_plain(index))


# ------------------------------------------------------------------ k sweep

@dataclass(frozen=True, slots=True)
class SweepPoint:
    k: int
    speedup: float
    acceptance_rate: float
    cost_ratio: float


def theoretical_curve(alpha: float, cost_ratio: float, ks: list[int], curve=None,
                      draft_seconds_per_token: float | None = None) -> list[float]:
    """Speed-up predicted for each k from one α and the draft cost (engine.core.stats.speedup_from_acceptance): on the
    target's measured verify-cost curve where one is given (engine.core.stats.VerifyCost; the draft cost
    then in seconds per drafted token), else on the free-verification fallback with one cost ratio c."""
    return [speedup_from_acceptance(alpha, k, cost_ratio, curve=curve, draft_seconds_per_token=draft_seconds_per_token)
            for k in ks]


def pooled_alpha_and_cost(points: list[SweepPoint]) -> tuple[float, float]:
    """α and c pooled over the sweep, the inputs of the theoretical curve."""
    if not points:
        return 0.0, 0.0
    return (sum(p.acceptance_rate for p in points) / len(points),
            sum(p.cost_ratio for p in points) / len(points))


def pooled_draft_seconds(points: list[SweepPoint], curve) -> float:
    """Draft seconds per drafted token pooled over the sweep, on a measured curve: each point's c is draft
    cost over its mean verify pass, a pass over k+1 tokens, so d ≈ c × cost(k+1)."""
    if not points:
        return 0.0
    return sum(p.cost_ratio * curve.cost(p.k + 1) for p in points) / len(points)


def best_k(points: list[SweepPoint]) -> SweepPoint | None:
    """The fastest k; a tie goes to the smaller k (less memory, less wasted work)."""
    return max(points, key=lambda p: (round(p.speedup, 6), -p.k), default=None)


def sweep_specs(specs: Iterable[SpecConfig], ks: Iterable[int]) -> list[SpecConfig]:
    """What a sweep runs after plain decoding: each speculative spec's setting at every k, spec by spec."""
    ks = list(ks)
    return [spec.with_k(k) for spec in specs if spec.speculative for k in ks]


def parse_sweep(text: str) -> list[int]:
    try:
        low, _, high = text.partition("-")
        ks = list(range(int(low), int(high or low) + 1))
    except ValueError:
        raise ConfigError(f"--sweep-k wants a range like 1-8, got {text!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > 16:
        raise ConfigError(f"--sweep-k range must lie within 1-16, got {text!r}")
    return ks


def sweep_points(rows: Iterable[ComparisonRow]) -> list[SweepPoint]:
    """One point per finished speculative row with a measured speed-up, sorted by k."""
    return sorted((SweepPoint(row.spec.k, row.speedup or 0.0, row.acceptance_rate, row.stats.cost_ratio)
                   for row in rows if row.spec.speculative and row.speedup is not None), key=lambda p: p.k)


@dataclass(frozen=True, slots=True)
class SweepSummary:
    """A method's sweep: its points by k, the pooled α and c, the theoretical curve and the best k."""

    method: str
    points: tuple[SweepPoint, ...]
    alpha: float
    cost_ratio: float
    theory: tuple[float, ...]  # theoretical speed-up at each point's k
    best: SweepPoint | None

    def as_dict(self) -> dict:
        return {"method": self.method, "alpha": self.alpha, "cost_ratio": self.cost_ratio,
                "best_k": self.best.k if self.best else None,
                "points": [{"k": p.k, "speedup": p.speedup, "theoretical_speedup": t,
                            "acceptance_rate": p.acceptance_rate, "cost_ratio": p.cost_ratio}
                           for p, t in zip(self.points, self.theory)]}


def sweep_summary(method: str, points: Iterable[SweepPoint], curve=None) -> SweepSummary:
    """The whole sweep pipeline on measured points: sort by k, pool α and c, predict each k (on the
    target's measured verify-cost curve `curve` where known, else assuming verification free), pick the best."""
    points = sorted(points, key=lambda p: p.k)
    alpha, cost = pooled_alpha_and_cost(points)
    draft = None if curve is None else pooled_draft_seconds(points, curve)
    theory = theoretical_curve(alpha, cost, [p.k for p in points], curve, draft)
    return SweepSummary(method, tuple(points), alpha, cost, tuple(theory), best_k(points))


__all__ = ["parse_sweep", "BASELINE_MISSING", "NOT_MEASURED", "ComparisonPlan", "PLAN_INDEX", "baseline_label", "runs_on", "comparison_events", "summary_rows", "diagnose_run", "strict_engine", "is_strict", "STRICT", "ComparisonRow", "first_difference", "text_diff", "PLAIN",
           "with_plain_first", "SweepPoint", "theoretical_curve", "pooled_alpha_and_cost", "pooled_draft_seconds", "best_k", "sweep_specs",
           "sweep_points", "SweepSummary", "sweep_summary"]
