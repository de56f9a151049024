"""What one field of SamplingConfig is, written once beside the field itself: its type, default, check, help line,
the words a settings line uses for it, and how a control shows it (range, step, decimals, the text of its "off"
value). engine.core.config declares SamplingConfig's fields with `described` and reads them back as
`SamplingField`s (SAMPLING_FIELDS); from those come its record, its words, its command-line options
(engine.cli.arguments) and its GUI controls (gui.views.chat.sampling_box), so nobody lists the fields by hand.

Pure Python: imports only dataclasses; the checks it is given are engine.core.validation's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Callable

_KEY = "sampling_field"  # where `described` keeps a field's SamplingField in the dataclass field's metadata


@dataclass(frozen=True, slots=True)
class SamplingField:
    """One field of SamplingConfig: the one source for its record key, command-line option, settings words and
    GUI control."""

    default: object
    type: type  # float or int (None, where the default is None, means "not set": a random seed)
    check: Callable  # value -> the value as kept; ConfigError (with the range) for one that doesn't fit
    help: str  # one line for --help: what its special value means ("0 = greedy")
    label: str  # the caption beside its control ("Top-p")
    words: str = ""  # what a settings line calls it ("temperature 0.7"); "": the line leaves it out
    control_range: tuple[float, float] = (0, 0)  # what its control lets one pick (within the check's range)
    step: float = 1  # its control's arrow step
    decimals: int = 0  # a float control's decimals
    special: str = ""  # what the control shows at the bottom of its range ("0 (greedy)", "off", "random")
    unset_shown: int | None = None  # what the control and QSettings hold for None (seed: -1, random)
    greedy_ignores: bool = False  # greedy decoding (temperature 0) ignores it: its control is disabled then
    name: str = ""  # the dataclass field's name (filled in by `described_fields`)

    @property
    def cli_flag(self) -> str:
        """The command-line option: `--top-p` for top_p."""
        return "--" + self.name.replace("_", "-")

    def shown(self, value):
        """`value` as its control shows it and QSettings keeps it (None: `unset_shown`)."""
        return self.unset_shown if value is None else value

    def from_shown(self, shown):
        """The value a control's `shown` number stands for (`unset_shown`: None); a float rounded to 4 places, so
        a spin box's binary noise (0.7000000000000001) is not kept."""
        if self.unset_shown is not None and shown == self.unset_shown:
            return None
        return round(shown, 4) if self.type is float and isinstance(shown, float) else shown


def described(description: SamplingField):
    """A dataclass field whose default is the description's, carrying the description (read by
    `described_fields`)."""
    return field(default=description.default, metadata={_KEY: description})


def described_fields(cls) -> tuple[SamplingField, ...]:
    """The SamplingFields of a dataclass declared with `described`, named, in declaration order."""
    return tuple(replace(f.metadata[_KEY], name=f.name) for f in fields(cls))


__all__ = ["SamplingField", "described", "described_fields"]
