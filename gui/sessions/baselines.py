"""The plain-decoding speed of each model as loaded (its name, device and dtype), in plain Python (no Qt): measured
in this run, or remembered from an earlier one (the window keeps them in QSettings). Every speed-up the chat shows
is against one of these. The chat session (gui.sessions.chat) holds one `Baselines`.

May touch: nothing but its own entries. Never Qt, never a widget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Baseline:
    """The plain-decoding speed of one model on one device in one dtype: measured once, used everywhere."""

    tok_per_s: float
    measured_at: float  # seconds since the epoch

    def describe(self) -> str:
        return f"{self.tok_per_s:.1f} tok/s, measured {time.strftime('%d %b %Y %H:%M', time.localtime(self.measured_at))}"


def baseline_key(info) -> str:
    """What a baseline is the speed of: the model as loaded (its name, device and dtype)."""
    return f"{info.requested} · {info.device} · {info.dtype}"


class Baselines(dict[str, Baseline]):
    """baseline_key -> the plain-decoding speed (measured this run, or remembered)."""

    def record(self, info, tok_per_s: float, *, replace: bool, at: float | None = None) -> None:
        """The plain speed of the model loaded as `info`; `replace` off keeps one measured before."""
        key = baseline_key(info)
        if tok_per_s > 0 and (replace or key not in self):
            self[key] = Baseline(tok_per_s, time.time() if at is None else at)

    def remember(self, stored: dict) -> None:
        """Baselines measured in earlier runs (key -> {"tok_per_s", "measured_at"}); this run's stay."""
        for key, value in stored.items():
            try:
                baseline = Baseline(float(value["tok_per_s"]), float(value["measured_at"]))
            except (KeyError, TypeError, ValueError):
                continue
            if baseline.tok_per_s > 0:
                self.setdefault(key, baseline)

    def of(self, info) -> Baseline | None:
        """The plain speed of the model loaded as `info` (None: none loaded, or not measured)."""
        return self.get(baseline_key(info)) if info is not None else None

    def on_backends(self, loaded_as: dict[str, Any]) -> dict[str, Baseline]:
        """backend -> the plain speed of the model loaded there (`loaded_as`: backend -> its info), where stored."""
        found = {backend: self.get(baseline_key(info)) for backend, info in loaded_as.items()}
        return {backend: baseline for backend, baseline in found.items() if baseline is not None}
