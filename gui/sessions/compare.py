"""The state of a comparison or a k sweep, in plain Python (no Qt): what the compare window used to keep.

Each run (plain decoding first, then every setting) folds its events into a `SessionModel` of its own, so a
compare pane renders exactly as the chat does. `CompareState` is the window's state machine: the one
comparison or sweep in flight, the ids that tell its events from a stopped one's stragglers, the last
comparison and the last sweep with its summary. The summary table, the sweep's specs, points, theoretical
curve and best k, the prompt sets: all come from `engine.measure.compare` and `engine.measure.prompts`, so the GUI and
`specscope bench` agree on every figure. A greedy run that differs from plain decoding gets its diagnosis
(engine.measure.divergence: near-tie or mismatch) from the engine's event stream; a strict session reruns the
comparison in float32 on the CPU with transformers ("Prove it in float32"). Export writes what the table shows.

May touch: engine.measure.compare, engine.measure.prompts, engine configs and events (read), gui.sessions.session_model. Never Qt.
"""

from __future__ import annotations

import csv
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.measure.compare import ComparisonPlan, ComparisonRow, SweepSummary, summary_rows, sweep_points, sweep_specs, \
    sweep_summary
from engine.core.methods import all_params
from engine.core.config import SAMPLING_FIELDS, SamplingConfig, SpecConfig, check_k, sampling_to_record
from engine.measure.divergence import Divergence
from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified
from engine.measure.prompts import Prompt, categories_of, load_prompts
from engine.core.tokens import DisplayToken
from gui.sessions.session_model import SessionModel, Turn

# every setting of the run, on every exported row (a row read alone says how it was made)
RUN_FIELDS = ("prompt", "model", "backend", "device", "dtype", *(field.name for field in SAMPLING_FIELDS),
              "max_new_tokens", "strict")
FIGURE_FIELDS = ("tok_per_s", "speedup", "acceptance_rate", "mean_accepted_length", "theoretical_speedup",
                 "efficiency", "draft_seconds", "verify_seconds", "identical_to_plain", "first_difference",
                 "equality", "figures_from", "baseline", "vs_fastest_plain", "tokens", "text")
SWEEP_FIELDS = ("method", "k", "speedup", "theoretical_speedup", "acceptance_rate", "cost_ratio") + RUN_FIELDS
COMPARE, SWEEP = "compare", "sweep"


@dataclass
class Run:
    index: int  # into the plan's runs (plain decoding on each backend first)
    spec: SpecConfig
    session: SessionModel = field(default_factory=SessionModel)
    state: str = "waiting"  # waiting | running | done | stopped | failed
    finished: GenerationFinished | None = None
    divergence: Divergence | None = None  # how its greedy output differs from plain decoding's, if it does
    label: str = ""  # what the user reads: "plain decoding (on transformers)" or the setting's label
    started: GenerationStarted | None = None

    def __post_init__(self) -> None:
        self.label = self.label or self.spec.label()

    @property
    def turn(self) -> Turn | None:
        return self.session.turns[-1] if self.session.turns else None


class ComparisonSession:
    """Plain decoding and 1…n settings on one prompt, run one after another."""

    def __init__(self, specs: list[SpecConfig], prompt: str, sampling: SamplingConfig = SamplingConfig(),
                 max_new_tokens: int = 128, kind: str = "compare", model: str = "", strict: bool = False) -> None:
        self.specs = list(specs)
        self.strict = strict  # rerun in float32 on the CPU with transformers (engine.measure.compare.STRICT)
        self.prompt = prompt
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        self.kind = kind  # compare | sweep
        self.model = model
        self.device = self.dtype = ""  # as the engine reported them (GenerationStarted)
        self.plan = ComparisonPlan.of(self.specs)
        self.runs = self._runs(self.plan)
        self.done = False
        self.cancelled = False
        self.error: str | None = None

    @staticmethod
    def _runs(plan: ComparisonPlan) -> list[Run]:
        return [Run(i, spec, label=plan.run_label(i)) for i, spec in enumerate(plan.runs)]

    def replan(self, plan: ComparisonPlan) -> None:
        """What the engine will really run (engine.measure.compare.comparison_events' first item: a plain baseline
        on every backend the settings were placed on); comes before the first run starts."""
        self.plan = plan
        self.runs = self._runs(plan)

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    @property
    def current(self) -> Run | None:
        return next((r for r in self.runs if r.state == "running"), None)

    def apply(self, index: int, event) -> list[DisplayToken]:
        """Fold one event of run `index`; returns the tokens a round added (for the pane to draw; after RoundsRevised
        the run's reply's tokens, all of them, to draw again). The plan (index PLAN_INDEX) replaces the runs before
        the first starts."""
        if isinstance(event, ComparisonPlan):
            self.replan(event)
            return []
        run = self.runs[index]
        if isinstance(event, GenerationStarted):
            run.state, run.started = "running", event
            run.session.start(event)
            if not self.model:
                self.model = event.model
            self.device, self.dtype = event.device, event.dtype
            return []
        if isinstance(event, RoundVerified):
            return run.session.apply_round(event)
        if isinstance(event, RoundsRevised):  # a server's steps, told at the end: the run's rounds so far give way
            return run.session.revise(event)
        if isinstance(event, Divergence):
            run.divergence = event
            return []
        if isinstance(event, GenerationFinished):
            run.session.finish(event)
            run.finished = event
            if event.stop_reason == "cancelled":
                run.state, self.cancelled = "stopped", True
            elif event.error:
                run.state = "failed"
            else:
                run.state = "done"
        return []

    def finish(self) -> None:
        """The worker is through (every run done, or Stop ended it): runs that never started stay waiting."""
        self.done = True
        if any(r.state in ("waiting", "running") for r in self.runs):
            self.cancelled = True
        for run in self.runs:
            if run.state == "running":
                run.state = "stopped"

    def fail(self, message: str) -> None:
        self.done = True
        self.error = message
        for run in self.runs:
            if run.state == "running":
                run.state = "failed"

    # ------------------------------------------------------------------ figures
    def finished_runs(self) -> dict[int, GenerationFinished]:
        """Runs that ran to their end: a stopped run's partial figures would mislead."""
        return {r.index: r.finished for r in self.runs if r.state == "done" and r.finished is not None}

    def rows(self) -> list[ComparisonRow]:
        divergences = {r.index: r.divergence for r in self.runs if r.divergence is not None}
        started = {r.index: r.started for r in self.runs if r.started is not None}
        return summary_rows(self.specs, self.finished_runs(), self.greedy, divergences, plan=self.plan,
                            started=started)

    def sweep_summary(self) -> SweepSummary:
        """The sweep of this session's method: one point per finished k, measured against its plain run."""
        method = self.specs[0].method if self.specs else ""
        return sweep_summary(method, sweep_points(self.rows()))


class CannotStart(Exception):
    """A comparison cannot start now (one is running, the chat holds the device, no prompt): the message says
    why. Settings that are refused raise ConfigError instead."""


class CompareState:
    """What the compare window is doing: at most one comparison or sweep in flight.

    `make_request(request_id=, model=, prompt=, specs=, sampling=, max_new_tokens=, strict=)` builds the worker's
    request (the window passes `gui.worker.ComparisonRequest`)."""

    def __init__(self, make_request: Callable[..., Any]) -> None:
        self.make_request = make_request
        self.comparison: ComparisonSession | None = None  # the last side-by-side comparison
        self.sweep: ComparisonSession | None = None  # the last sweep
        self.sweep_summary: SweepSummary | None = None
        self.active: ComparisonSession | None = None
        self.active_id: int | None = None
        self._next_id = 1

    @property
    def running(self) -> bool:
        return self.active is not None

    def start(self, specs: list[SpecConfig], kind: str, prompt: str, sampling: SamplingConfig,
              max_new_tokens: int, model: str, busy: str | None = None, strict: bool = False):
        """The new session and the request to send; CannotStart with the reason when it cannot start now
        (`busy`: why the device is taken, from the chat). `strict`: in float32 on the CPU (transformers)."""
        if self.active is not None:
            raise CannotStart("A comparison is running: stop it first.")
        if busy:
            raise CannotStart(busy)
        prompt = prompt.strip()
        if not prompt:
            raise CannotStart("Type a prompt or pick a preset first.")
        if strict and not sampling.greedy:
            raise CannotStart("The float32 proof checks greedy equality: set the temperature to 0 first.")
        session = ComparisonSession(specs, prompt, sampling, max_new_tokens, kind, strict=strict)
        request = self.make_request(request_id=self._next_id, model=model, prompt=prompt, specs=tuple(specs),
                                    sampling=sampling, max_new_tokens=max_new_tokens, strict=strict)
        self._next_id += 1
        self.active, self.active_id = session, request.request_id
        if kind == COMPARE:
            self.comparison = session
        else:
            self.sweep, self.sweep_summary = session, None
        return session, request

    def start_sweep(self, base: SpecConfig, max_k: int, **kwargs):
        """Plain decoding once, then `base`'s method for k = 1…max_k (engine.measure.compare.sweep_specs); ConfigError
        for a max_k out of k's range."""
        check_k(max_k)
        return self.start(sweep_specs([base], range(1, max_k + 1)), SWEEP, **kwargs)

    def ours(self, request_id: int) -> ComparisonSession | None:
        return self.active if self.active is not None and request_id == self.active_id else None

    def advanced(self, request_id: int, index: int, event) -> list[DisplayToken] | None:
        """Fold one event of run `index`; None when it is a stopped request's straggler."""
        session = self.ours(request_id)
        if session is None:
            return None
        tokens = session.apply(index, event)
        if session.kind == SWEEP and isinstance(event, GenerationFinished):
            self.sweep_summary = session.sweep_summary()
        return tokens

    def finished(self, request_id: int) -> ComparisonSession | None:
        session = self.ours(request_id)
        if session is not None:
            session.finish()
            self._end(session)
        return session

    def failed(self, request_id: int, message: str) -> ComparisonSession | None:
        session = self.ours(request_id)
        if session is not None:
            session.fail(message)
            self._end(session)
        return session

    def _end(self, session: ComparisonSession) -> None:
        self.active, self.active_id = None, None
        if session.kind == SWEEP:
            self.sweep_summary = session.sweep_summary()

    def best_spec(self, fallback: SpecConfig | None = None) -> SpecConfig | None:
        """The sweep's best setting (its method at the best k), or None before a sweep found one."""
        summary = self.sweep_summary
        if summary is None or summary.best is None:
            return None
        if self.sweep is not None and self.sweep.specs:
            return self.sweep.specs[0].with_k(summary.best.k)
        return fallback.with_k(summary.best.k) if fallback is not None else None

    def status(self, session: ComparisonSession) -> str:
        """The status line once a session ended."""
        done = sum(r.state == "done" for r in session.runs)
        status = f"{'Stopped' if session.cancelled else 'Done'} · {done} of {len(session.runs)} runs finished"
        if session.strict:
            status += " · strict check in float32 on the CPU (transformers)"
        kinds = [row.equality for row in session.rows() if not row.is_baseline] if session.kind == COMPARE else []
        for kind, words in (("near-tie", "near-tie"), ("mismatch", "MISMATCH")):
            if kind in kinds:
                status += f" · {kinds.count(kind)} {words}{'s' if kinds.count(kind) > 1 else ''}"
        best = self.sweep_summary.best if session.kind == SWEEP and self.sweep_summary else None
        if best is not None:
            status += f" · best k = {best.k} ({best.speedup:.2f}×)"
        return status


# ------------------------------------------------------------------ export

def run_settings(session: ComparisonSession | None) -> dict:
    """Every setting the runs shared: prompt, model, backend, device, dtype, sampling, token budget."""
    if session is None:
        return {}
    from engine.core.errors import SpecScopeError
    from engine.models.sources import backend_for, resolve_source

    try:
        backend = backend_for(resolve_source(session.model)) if session.model else ""
    except SpecScopeError:
        backend = ""
    if session.strict:
        backend = "transformers"
    return {"prompt": session.prompt, "model": session.model, "backend": backend, "device": session.device,
            "dtype": session.dtype, **sampling_to_record(session.sampling), "max_new_tokens": session.max_new_tokens,
            "strict": session.strict}


def csv_fields() -> tuple[str, ...]:
    """The CSV's columns: the setting (every registered method's parameters among them), the figures, the run."""
    return ("label", "method", "k", "draft", *(p.name for p in all_params()), *FIGURE_FIELDS, *RUN_FIELDS)


def row_record(row: ComparisonRow) -> dict:
    """A table row with its setting in full (its method's parameters too); plain decoding has no k (it drafts
    nothing)."""
    record = row.as_dict()
    record.update(k=row.spec.k if row.spec.speculative else None, draft=row.spec.draft, **row.spec.param_values())
    if row.spec.backend is not None:  # a row on the other backend (the same model loaded there) says so
        record["backend"] = row.spec.backend
    return record


def write_rows_csv(rows: list[ComparisonRow], path: str | Path, session: ComparisonSession | None = None) -> None:
    shared = run_settings(session)
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=csv_fields(), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            record = row_record(row)
            own = {"backend": record["backend"]} if "backend" in record else {}
            writer.writerow({k: "" if v is None else v for k, v in {**record, **shared, **own}.items()})


def write_rows_json(session: ComparisonSession, path: str | Path) -> None:
    rows = session.rows()
    document = {**run_settings(session), "rows": [dict(row_record(row), diff=row.diff) for row in rows]}
    Path(path).write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")


def write_sweep_csv(summary: SweepSummary, path: str | Path, session: ComparisonSession | None = None) -> None:
    shared = run_settings(session)
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=SWEEP_FIELDS)
        writer.writeheader()
        for point in summary.as_dict()["points"]:
            writer.writerow({k: "" if v is None else v for k, v in {"method": summary.method, **point, **shared}.items()})


def write_sweep_json(summary: SweepSummary, session: ComparisonSession | None, path: str | Path) -> None:
    document = {**run_settings(session), **summary.as_dict()}
    Path(path).write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")


def export_name(kind: str, session: ComparisonSession | None, suffix: str, when: float | None = None) -> str:
    """A default file name that says what is in it: specscope-compare-default-2026-12-01-1015.csv."""
    import time

    what = "sweep" if kind.startswith("sweep") else "compare"
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(session.model).name if session and session.model else "")
    stamp = time.strftime("%Y-%m-%d-%H%M", time.localtime(when))
    return "-".join(p for p in ("specscope", what, model.strip("-"), stamp) if p) + f".{suffix}"


# ------------------------------------------------------------------ prompts

def load_prompt_choices(path: str | Path) -> list[Prompt]:
    """Presets (assets/presets.json) or a Spec-Bench JSON lines file (first turn): engine.measure.prompts."""
    return load_prompts(str(path))


def categories(choices: list[Prompt]) -> list[str]:
    return categories_of(choices)


# ------------------------------------------------------------------ diff for display

def word_diff(plain: str, other: str) -> list[tuple[str, str]]:
    """(op, text) pieces: op is "equal", "plain" (only in plain) or "other" (only in this setting); words and
    the whitespace between them are kept, so the pieces read as the two texts interleaved."""
    a, b = re.split(r"(\s+)", plain), re.split(r"(\s+)", other)
    pieces: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            pieces.append(("equal", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(("plain", "".join(a[i1:i2])))
        if j2 > j1:
            pieces.append(("other", "".join(b[j1:j2])))
    return [p for p in pieces if p[1]]
