"""Baselines: every setting is judged against plain decoding on the backend, dtype and device it ran on, measured
in the same run. `ComparisonPlan` is the one rule for what a comparison runs (engine.measure.compare, the GUI's
compare window and fastest sweep); `target_baseline` and `add_vs_fastest_plain` label `specscope bench`'s rows
(engine.measure.bench). The cross-backend picture (a row's tok/s against the fastest plain decoding of the run,
on any backend) is a separate figure, never the equality claim. Plain data; no Qt, no models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from engine.core.config import SpecConfig, parse_spec
from engine.core.stats import speedup


def _place(spec: SpecConfig, primary: str | None) -> str | None:
    """Where `spec` runs, for its baseline: None for the engine's own backend (as loaded), else the backend
    its `backend=` names (a server's address included)."""
    return None if spec.backend in (None, primary) else spec.backend


@dataclass(frozen=True, slots=True)
class ComparisonPlan:
    """What a comparison runs, in order: plain decoding on every backend a setting runs on (each setting's
    baseline: the same backend, dtype and device), then every setting in the order given. A setting on a
    server runs as its server was started and has no plain baseline of its own. `primary` is the backend the
    engine loaded (None where not known yet: a setting without `backend=` runs there)."""

    runs: tuple[SpecConfig, ...]
    primary: str | None = None

    @classmethod
    def of(cls, specs: Iterable[SpecConfig], primary: str | None = None) -> "ComparisonPlan":
        specs = list(specs)
        kept = [s for s in specs if s.speculative or s.remote_url is not None]
        places = [_place(s, primary) for s in specs if s.remote_url is None and (s.speculative or _place(s, primary))]
        if not places or any(s.remote_url is not None for s in kept):  # a server's row needs a local plain beside it
            places.insert(0, None)
        places = sorted(dict.fromkeys(places), key=lambda place: place is not None)  # the loaded backend's first
        plains = [SpecConfig(backend=place) for place in places]
        return cls(tuple(plains + kept), primary)

    def is_plain(self, index: int) -> bool:
        spec = self.runs[index]
        return not spec.speculative and spec.remote_url is None

    @property
    def plain_indices(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.runs)) if self.is_plain(i))

    def baseline_index(self, index: int) -> int | None:
        """The plain run that run `index` is judged against (itself for a plain run); None for a server's."""
        spec = self.runs[index]
        if spec.remote_url is not None:
            return None
        place = _place(spec, self.primary)
        return next(i for i in self.plain_indices if _place(self.runs[i], self.primary) == place)

    def backend_of(self, index: int) -> str:
        """The backend run `index` runs on, in words ("" where the engine's own is not known yet)."""
        return _place(self.runs[index], self.primary) or self.primary or ""

    @property
    def several_places(self) -> bool:
        """More than one place runs: each row's own baseline differs from some other row's."""
        return len(self.plain_indices) > 1 or any(s.remote_url is not None for s in self.runs)

    def run_label(self, index: int) -> str:
        """What the user reads for run `index`: "plain decoding" (with its backend where several run)."""
        if not self.is_plain(index):
            return self.runs[index].label()
        backend = self.backend_of(index)
        return f"plain decoding on {backend}" if self.several_places and backend else "plain decoding"


def with_plain_first(specs: Iterable[SpecConfig], primary: str | None = None) -> list[SpecConfig]:
    """Plain decoding on each backend the settings run on, then every speculative setting in the order given
    (ComparisonPlan). A spec that does not speculate on the engine's own backend (method none, whatever its
    k) is dropped, since it would only repeat that baseline."""
    return list(ComparisonPlan.of(specs, primary).runs)


def baseline_label(backend: str, device: str = "", dtype: str = "") -> str:
    """"plain on transformers · cpu · bfloat16": the baseline a row's speed-up and equality are judged against,
    with its device label and dtype where known (a plain run's GenerationStarted, or a loaded target's)."""
    where = device if device.startswith(backend or "\0") else " · ".join(p for p in (backend, device) if p)
    return "plain on " + " · ".join(p for p in (where or "this backend", dtype) if p)


def plain_decoding_words(baseline: str) -> str:
    """A baseline label as a run's title: "plain on transformers · cpu" → "plain decoding on transformers · cpu"."""
    return baseline.replace("plain on ", "plain decoding on ", 1)


def baseline_backend(baseline: str) -> str:
    """The backend a baseline label names: "plain on transformers · cpu · bfloat16" → "transformers"."""
    return baseline.partition(" · ")[0].removeprefix("plain on ")


def target_baseline(engine) -> str:
    """What the rows run on `engine` are judged against: "plain on transformers · cpu · bfloat16"."""
    target = engine.target
    return baseline_label(target.backend, target.device_label or str(target.device), target.dtype_label)


def add_vs_fastest_plain(summary: dict) -> None:
    """Where plain decoding ran on several backends (or a server's row is there), every row's tok/s against
    the fastest plain decoding of the run, per category: the cross-backend picture, beside the speed-up
    against its own backend's plain decoding (never the equality claim)."""
    specs = {label: parse_spec(label) for label in summary}
    plains = {label: rows for label, rows in summary.items()
              if not specs[label].speculative and specs[label].remote_url is None}
    if len(plains) < 2 and not any(spec.remote_url for spec in specs.values()):
        return
    for rows in summary.values():
        for key, row in rows.items():
            fastest = max((p[key]["tok_per_s"] for p in plains.values() if key in p), default=0.0)
            row["vs_fastest_plain"] = speedup(row["tok_per_s"], fastest)


__all__ = ["ComparisonPlan", "with_plain_first", "baseline_label", "plain_decoding_words", "baseline_backend", "target_baseline", "add_vs_fastest_plain"]
