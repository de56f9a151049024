"""The state of "Which setting is fastest here?", in plain Python (no Qt): what the dialog shows, it asks here.

One sweep at a time: `repeats` comparisons of the same settings on the chat's last prompt, sent one after
another to the chat's worker (gui.worker.ComparisonRequest, plain decoding first in each), folded by
engine.measure.fastest.FastestSweep. The request ids live in their own range, so the compare window (which hears the
same worker signals, counting its ids from 1) drops this sweep's events and this state drops the compare
window's. A method the loaded model refuses before the first run (early exit on llama.cpp) is left out with
its reason, and the sweep starts again without it.

May touch: engine.measure.fastest and engine.core.config (read). Never Qt, never a widget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished
from engine.core.methods import method_spec
from engine.measure.compare import ComparisonPlan
from engine.measure.fastest import FastestResult, FastestSweep, candidate_specs, sweep_methods

REQUEST_ID_BASE = 1 << 30  # never one of the compare window's ids


def parse_ks(text: str) -> list[int]:
    """'2, 4, 6' → [2, 4, 6]; ConfigError naming what is wrong (engine.core.config.check_k checks each)."""
    try:
        ks = [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"k values must be whole numbers separated by commas, got {text!r}") from None
    if not ks:
        raise ConfigError("give at least one k value, e.g. 2, 4, 6")
    return list(dict.fromkeys(ks))


def parse_trees(text: str) -> list[int]:
    """'8, 16' → [8, 16]; '' → [] (chains only); ConfigError naming what is wrong (engine.core.config.check_tree
    checks each)."""
    try:
        budgets = [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"tree budgets must be whole numbers of nodes separated by commas, got {text!r}") from None
    return list(dict.fromkeys(budget for budget in budgets if budget))


@dataclass(frozen=True, slots=True)
class Plan:
    """What one sweep runs: the same for every repeat."""

    model: str
    prompt: str
    sampling: SamplingConfig
    max_new_tokens: int


class FastestState:
    """`make_request(request_id=, model=, prompt=, specs=, sampling=, max_new_tokens=)` builds the worker's
    request (the dialog passes gui.worker.ComparisonRequest)."""

    def __init__(self, make_request: Callable[..., Any]) -> None:
        self.make_request = make_request
        self.sweep: FastestSweep | None = None
        self.result: FastestResult | None = None
        self.skipped: list[str] = []  # "method label: reason" for each method the model refused
        self.repeat = 0  # the repeat in flight (0-based)
        self.active_id: int | None = None
        self.plan: Plan | None = None
        self._next_id = REQUEST_ID_BASE

    @property
    def running(self) -> bool:
        return self.active_id is not None

    def start(self, plan: Plan, ks_text: str, repeats: int, draft: str | None, busy: str | None = None,
              trees_text: str = ""):
        """The first repeat's request; ConfigError with the reason when the sweep cannot start. `trees_text`: the
        token-tree budgets the methods that branch also run at each k ("" for chains only)."""
        if self.running:
            raise ConfigError("the sweep is running: stop it first")
        if busy or not plan.prompt.strip():
            raise ConfigError(busy or "send a message in the chat first: the sweep runs on its last prompt")
        names = [m.name for m in sweep_methods()]
        self.sweep = FastestSweep(candidate_specs(names, parse_ks(ks_text), draft=draft,
                                                  trees=parse_trees(trees_text)), repeats)
        self.plan, self.repeat, self.result, self.skipped = plan, 0, None, []
        return self._request()

    def _request(self):
        plan = self.plan
        request = self.make_request(request_id=self._next_id, model=plan.model, prompt=plan.prompt,
                                    specs=tuple(self.sweep.specs), sampling=plan.sampling,
                                    max_new_tokens=plan.max_new_tokens)
        self._next_id += 1
        self.active_id = request.request_id
        return request

    def ours(self, request_id: int) -> bool:
        return self.active_id is not None and request_id == self.active_id

    def advanced(self, request_id: int, index: int, event) -> bool:
        """A run's event; True when it finished a run of this sweep or told what each repeat runs (the
        engine's plan: a plain baseline on every backend used), so the progress moved."""
        if not self.ours(request_id):
            return False
        if isinstance(event, ComparisonPlan):
            self.sweep.replan(event)
            return True
        if not isinstance(event, GenerationFinished):
            return False
        self.sweep.add(self.repeat, index, event)
        return True

    def finished(self, request_id: int):
        """A repeat's comparison ended: the next repeat's request, or None when the sweep is over (then
        `result` holds its answer, None if stopped before a repeat finished)."""
        if not self.ours(request_id):
            return None
        complete = len(self.sweep.complete_repeats()) > self.repeat
        self.repeat += 1
        if complete and self.repeat < self.sweep.repeats:
            return self._request()
        self.active_id = None
        self.result = self.sweep.result()
        return None

    def failed(self, request_id: int, message: str):
        """The worker refused the repeat: a request without the refused method (before the first run only), or
        None when the sweep ends on the refusal."""
        if not self.ours(request_id):
            return None
        label = message.partition(": ")[0]
        refused = next((s.method for s in self.sweep.specs if s.label() == label), None)
        remaining = [s for s in self.sweep.specs if s.method != refused]
        if refused is not None and self.repeat == 0 and remaining:
            self.skipped.append(f"{method_spec(refused).label}: {message.partition(': ')[2] or message}")
            self.sweep = FastestSweep(remaining, self.sweep.repeats)
            return self._request()
        self.active_id = None
        return None

    def status(self) -> str:
        done = len(self.sweep.complete_repeats()) if self.sweep else 0
        ended = "Stopped" if self.result is None or done < self.sweep.repeats else "Done"
        return f"{ended} · {done} of {self.sweep.repeats if self.sweep else 0} repeats"

    def verdict(self) -> str:
        result = self.sweep.result() if self.sweep is not None else None
        text = result.verdict() if result is not None else ""
        if self.skipped:
            text += (" " if text else "") + "Left out: " + "; ".join(self.skipped) + "."
        return text

    def winner(self) -> SpecConfig | None:
        return self.result.winner.spec if self.result is not None else None
