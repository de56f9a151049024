"""The state of a comparison or a k sweep, in plain Python (no Qt).

Each run (plain decoding first, then every setting) folds its events into a `SessionModel` of its own, so a
compare pane renders exactly as the chat does. The summary table and the sweep's points come from
`engine.compare`, so the GUI and `specscope bench` agree on every figure. Export writes what the table shows.
"""

from __future__ import annotations

import csv
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.prompts import Prompt as BenchPrompt, load_prompts
from engine.compare import (ComparisonRow, SweepPoint, best_k, pooled_alpha_and_cost, summary_rows,
                            theoretical_curve, with_plain_first)
from engine.config import SamplingConfig, SpecConfig
from engine.events import GenerationFinished, GenerationStarted, RoundVerified
from gui.session_model import SessionModel, Token, Turn

CSV_FIELDS = ("label", "method", "k", "tok_per_s", "speedup", "acceptance_rate", "mean_accepted_length",
              "theoretical_speedup", "efficiency", "draft_seconds", "verify_seconds", "identical_to_plain",
              "first_difference", "tokens", "text")
SWEEP_FIELDS = ("k", "speedup", "theoretical_speedup", "acceptance_rate", "cost_ratio")


@dataclass
class Run:
    index: int  # 0: plain decoding
    spec: SpecConfig
    session: SessionModel = field(default_factory=SessionModel)
    state: str = "waiting"  # waiting | running | done | stopped | failed
    finished: GenerationFinished | None = None

    @property
    def label(self) -> str:
        return "plain decoding" if self.index == 0 else self.spec.label()

    @property
    def turn(self) -> Turn | None:
        return self.session.turns[-1] if self.session.turns else None


class ComparisonSession:
    """Plain decoding and 1…n settings on one prompt, run one after another."""

    def __init__(self, specs: list[SpecConfig], prompt: str, sampling: SamplingConfig = SamplingConfig(),
                 max_new_tokens: int = 128, kind: str = "compare", model: str = "") -> None:
        self.specs = list(specs)
        self.prompt = prompt
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        self.kind = kind  # compare | sweep
        self.model = model
        self.runs = [Run(i, spec) for i, spec in enumerate(with_plain_first(self.specs))]
        self.done = False
        self.cancelled = False
        self.error: str | None = None

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    @property
    def current(self) -> Run | None:
        return next((r for r in self.runs if r.state == "running"), None)

    def apply(self, index: int, event) -> list[Token]:
        """Fold one event of run `index`; returns the tokens a round added (for the pane to draw)."""
        run = self.runs[index]
        if isinstance(event, GenerationStarted):
            run.state = "running"
            run.session.start(event)
            if not self.model:
                self.model = event.model
            return []
        if isinstance(event, RoundVerified):
            return run.session.apply_round(event)
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
        return summary_rows(self.specs, self.finished_runs(), self.greedy)

    def sweep_points(self) -> list[SweepPoint]:
        """One point per finished k, measured against this session's plain run."""
        return sorted((SweepPoint(row.spec.k, row.speedup or 0.0, row.acceptance_rate, row.stats.cost_ratio)
                       for row in self.rows()[1:] if row.speedup is not None), key=lambda p: p.k)


@dataclass(frozen=True, slots=True)
class SweepSummary:
    method: str
    points: tuple[SweepPoint, ...]
    alpha: float
    cost_ratio: float
    theory: tuple[float, ...]  # theoretical speed-up at each point's k
    best: SweepPoint | None

    @classmethod
    def of(cls, method: str, points: list[SweepPoint]) -> "SweepSummary":
        points = sorted(points, key=lambda p: p.k)
        alpha, cost = pooled_alpha_and_cost(points)
        theory = theoretical_curve(alpha, cost, [p.k for p in points]) if points else []
        return cls(method, tuple(points), alpha, cost, tuple(theory), best_k(points))

    def as_dict(self) -> dict:
        return {"method": self.method, "alpha": self.alpha, "cost_ratio": self.cost_ratio,
                "best_k": self.best.k if self.best else None,
                "points": [{"k": p.k, "speedup": p.speedup, "theoretical_speedup": t,
                            "acceptance_rate": p.acceptance_rate, "cost_ratio": p.cost_ratio}
                           for p, t in zip(self.points, self.theory)]}


# ------------------------------------------------------------------ export

def write_rows_csv(rows: list[ComparisonRow], path: str | Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.as_dict().items()})


def write_rows_json(session: ComparisonSession, path: str | Path) -> None:
    rows = session.rows()
    document = {"model": session.model, "prompt": session.prompt, "max_new_tokens": session.max_new_tokens,
                "temperature": session.sampling.temperature, "seed": session.sampling.seed,
                "rows": [dict(row.as_dict(), diff=row.diff) for row in rows]}
    Path(path).write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")


def write_sweep_csv(summary: SweepSummary, path: str | Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=SWEEP_FIELDS)
        writer.writeheader()
        for point in summary.as_dict()["points"]:
            writer.writerow(point)


def write_sweep_json(summary: SweepSummary, session: ComparisonSession | None, path: str | Path) -> None:
    document = summary.as_dict()
    if session is not None:
        document.update(model=session.model, prompt=session.prompt, max_new_tokens=session.max_new_tokens)
    Path(path).write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")


# ------------------------------------------------------------------ prompts

@dataclass(frozen=True, slots=True)
class PromptChoice:
    id: str
    category: str
    title: str
    text: str


def load_prompt_choices(path: str | Path) -> list[PromptChoice]:
    """Presets (assets/presets.json) or a Spec-Bench JSON lines file (first turn), via engine.bench."""
    prompts: list[BenchPrompt] = load_prompts(str(path))
    titles: dict[str, str] = {}
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        titles = {str(p["id"]): str(p.get("title", "")) for p in document.get("presets", [])}
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
        pass  # JSON lines: titles come from the text
    return [PromptChoice(p.id, p.category, titles.get(p.id) or _shorten(p.text), p.text) for p in prompts]


def categories(choices: list[PromptChoice]) -> list[str]:
    return list(dict.fromkeys(c.category for c in choices))


def _shorten(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


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
