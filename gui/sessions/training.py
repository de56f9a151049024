"""No Qt: the state of one "Train a drafter" run as the dialog shows it, and what the app knows of a model's
eagle head without loading the model.

`TrainRun` folds the trainer's TrainProgress values (engine.training.train: they arrive on the training thread,
so the fold holds a lock) into what the dialog draws from its timer: the phase line, the fraction, the loss and
held-out acceptance by draft position against the training step. `head_for(label)` finds a trained head by the
target label its card names (engine.drafters.eagle_head's default folders, read from their head.json cards: a hint for
the offer and the resume line, never a check; the engine checks the weights' fingerprint when it loads one);
`checkpoint_step(folder)` reads how far a run got.

May touch: engine.training.train (TrainOptions, TrainProgress: data only), engine.drafters.eagle_head (the head folders'
place and cards, read-only), the file system (read-only). No Qt, no widgets.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.core.errors import ConfigError
from engine.core.validation import check_train_minutes

POSITIONS = 3  # held-out acceptance is drawn at draft positions 1…3
ENDED = ("done", "cancelled")


def head_for(label: str, root: Path | None = None) -> Path | None:
    """The newest head folder under `root` whose card names `label` as its target, or None."""
    from engine.drafters.eagle_head import heads_root, read_card
    root = root if root is not None else heads_root()
    if not root.is_dir():
        return None
    found = []
    for folder in root.iterdir():
        try:
            card = read_card(folder)
        except (ConfigError, OSError):
            continue
        if card.target == label:
            found.append(((folder / "head.json").stat().st_mtime, folder))
    return max(found)[1] if found else None


def _checkpoint_state(folder: Path | None) -> dict:
    from engine.training.train import STATE_FILE
    if folder is None:
        return {}
    try:
        state = json.loads((Path(folder) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def checkpoint_step(folder: Path | None) -> int | None:
    """The training step a run in `folder` got to (its checkpoint.json), or None when it has none."""
    step = _checkpoint_state(folder).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def checkpoint_points(folder: Path | None) -> list[tuple[int, tuple[float, ...]]]:
    """The held-out acceptance at each evaluation so far, (step, acceptance…), from the checkpoint's history
    rows [step, seconds, loss, acceptance at positions 1…]; rows of another shape are skipped."""
    points = []
    for row in _checkpoint_state(folder).get("history") or ():
        if isinstance(row, list) and len(row) > 3 and all(isinstance(v, (int, float)) for v in row):
            points.append((int(row[0]), tuple(float(v) for v in row[3:])))
    return points


def run_options(base, model: str, minutes: float, from_history: bool):
    """The TrainOptions of a run: `base` (engine.training.train.TrainOptions) with the dialog's choices. Its out
    folder stays base's (None: the model's own, found by its weights' fingerprint), so that running again
    resumes there and a head found by its label alone is never written over."""
    return replace(base, model=model, minutes=check_train_minutes(minutes), from_history=from_history)


def offer_text(label: str, minutes: float) -> str:
    return (f"{label} has no eagle head yet. Train one now? About {minutes:g} minutes on this machine (data "
            "generation included); you can cancel and resume.")


def acceptance_words(acceptance) -> str:
    """"pos 1: 62%  pos 2: 40%  …" (no line break inside an item)."""
    return "  ".join(f"pos\u00a0{i}:\u00a0{a:.0%}" for i, a in enumerate(acceptance, 1)) or "not measured yet"


@dataclass
class Snapshot:
    """What the dialog draws, copied out under the lock."""

    phase: str = ""
    fraction: float = 0.0
    message: str = ""
    step: int = 0
    loss: float | None = None
    acceptance: tuple[float, ...] = ()
    points: list = field(default_factory=list)  # (step, (acceptance at positions 1…)) at each evaluation
    version: int = 0


class TrainRun:
    """One run's progress, folded from TrainProgress values (`fold` may be called from any thread)."""

    def __init__(self, points=()) -> None:
        """`points`: the evaluations of the run it resumes (checkpoint_points), drawn before its own."""
        self._lock = threading.Lock()
        points = list(points)
        self._state = Snapshot(points=points, acceptance=points[-1][1] if points else (),
                               step=points[-1][0] if points else 0)

    def fold(self, progress) -> None:
        with self._lock:
            state = self._state
            if progress.phase != "cancelled":  # a cancelled run says 1.0 (its end); the bar stays where it got to
                state.fraction = progress.fraction
            state.phase, state.message = progress.phase, progress.message
            if progress.step:
                state.step = progress.step
            if progress.loss is not None:
                state.loss = progress.loss
            if progress.acceptance and tuple(progress.acceptance) != state.acceptance:
                state.acceptance = tuple(progress.acceptance)
                state.points.append((progress.step, state.acceptance))
            state.version += 1

    def snapshot(self) -> Snapshot:
        with self._lock:
            return replace(self._state, points=list(self._state.points))

    def series(self) -> list[tuple[list[float], list[float]]]:
        """Per draft position 1…POSITIONS: (training steps, held-out acceptance in %)."""
        points = self.snapshot().points
        return [([float(step) for step, values in points if len(values) > i],
                 [100.0 * values[i] for _step, values in points if len(values) > i]) for i in range(POSITIONS)]


def progress_line(state: Snapshot) -> str:
    """The phase and message, as one line."""
    phase = {"loading": "Loading", "replies": "Writing replies", "features": "Reading features",
             "training": "Training", "done": "Done", "cancelled": "Cancelled"}.get(state.phase, state.phase)
    return f"{phase}: {state.message}" if state.message else phase


def figures_line(state: Snapshot) -> str:
    """Step, loss and the latest held-out acceptance, as one line ("" before training starts)."""
    if not state.step:
        return ""
    loss = f" · loss {state.loss:.3f}" if state.loss is not None else ""
    measured = state.points[-1][0] if state.points else None  # the trainer evaluates every ~40 s
    when = f" (at step {measured})" if measured is not None and measured != state.step else ""
    return f"step {state.step}{loss} · held-out acceptance{when} {acceptance_words(state.acceptance)}"


def result_words(out: Path, card, cancelled: bool) -> str:
    """What a finished (or cancelled) run wrote, from its head card."""
    info = card.info if card is not None else {}
    acceptance = acceptance_words(info.get("held_out_acceptance", ()))
    steps = info.get("steps")
    how = "Cancelled: the head so far was" if cancelled else "The head was"
    after = f" after {steps} steps" if steps is not None else ""
    return f"{how} written to {out}{after}. Held-out acceptance: {acceptance}."
