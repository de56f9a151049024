"""Colour by: what a token's box shows in the transcript. "status" (accepted, substituted, bonus, plain, rejected:
theme.token_format) or one figure per token on a sequential scale of the palette: the acceptance probability
min(1, p_target/p_draft), the target's entropy where it decided the token, the drafter's confidence.

The figures are gui.sessions.rounds' (defined once there); this module only names the modes, maps a figure to a
colour and builds the one callable the Markdown layout formats every token with. A token with no figure in a
mode (the target's own token under acceptance, a round with no recorded tree under entropy) keeps a neutral
look, no box; every mode keeps the status's other cues (a rejected draft dim and struck through, a correction
underlined, a bonus dot-underlined), so colour is never the only one.

May touch: gui.theme, gui.sessions.rounds' per-token figures, QtGui text formats. No widget, no state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtGui import QColor, QTextCharFormat

from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken
from gui import theme
from gui.sessions.rounds import MAX_ENTROPY_BITS, RoundRecord, token_acceptance, token_confidence, token_entropy

STATUS = "status"
RoundLookup = Callable[[int | None], RoundRecord | None]  # a token's serial → its round (SessionModel.round_of)
TokenFormat = Callable[[DisplayToken], QTextCharFormat]  # what the layout formats each token with


@dataclass(frozen=True, slots=True)
class ColourMode:
    """One way to colour the tokens: its name (settings, signals), what the user reads, and, for a scale, the
    figure of a token (None: no value) with the scale's end labels and the value at its far end."""

    name: str
    label: str
    short_label: str  # the closed combo box (the legend's row is as narrow as the window's minimum allows)
    description: str  # the combo box's tooltip: what the figure is
    value: Callable[[DisplayToken, RoundRecord | None], float | None] | None = None  # None: the status mode
    maximum: float = 1.0
    low_label: str = "0"
    high_label: str = "1"
    scale: str = "scale_probability"  # the Palette field with the scale's stops

    @property
    def is_scale(self) -> bool:
        return self.value is not None

    def stops(self, palette: theme.Palette) -> tuple[str, ...]:
        return getattr(palette, self.scale)

    def fraction(self, value: float) -> float:
        """Where `value` sits on the scale, 0…1 (clipped at the far end)."""
        return min(1.0, max(0.0, value / self.maximum))


MODES: dict[str, ColourMode] = {mode.name: mode for mode in (
    ColourMode(STATUS, "Status", "Status", "What happened to each token: accepted, substituted, bonus, plain or a rejected "
                                 "draft (the chips beside name them)"),
    ColourMode("acceptance", "Acceptance probability", "Acceptance",
               "min(1, p_target / p_draft): the chance speculative sampling keeps a drafted token; an n-gram "
               "drafter's draft is one-hot (p_draft = 1). Drafted tokens only: the target's own have no value",
               lambda token, _record: token_acceptance(token)),
    ColourMode("entropy", "Target entropy", "Entropy",
               f"The entropy, in bits, of the target's distribution where it decided the token (0: certain; "
               f"{MAX_ENTROPY_BITS:g} bits and more at the far end). Only rounds whose tree was recorded have it",
               token_entropy, maximum=MAX_ENTROPY_BITS, low_label="0 bits",
               high_label=f"{MAX_ENTROPY_BITS:g}+ bits", scale="scale_entropy"),
    ColourMode("confidence", "Draft confidence", "Confidence",
               "p_draft: the drafter's probability of the token it drafted. Drafted tokens of a drafter with a "
               "distribution only (not n-gram, not the target's own tokens)",
               lambda token, _record: token_confidence(token)),
)}


def mode(name: str) -> ColourMode:
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown colouring {name!r}; choose one of {', '.join(MODES)}") from None


def token_value(name: str, token: DisplayToken, round_of: RoundLookup | None = None) -> float | None:
    """The figure token has in mode `name` (None: no value, or the status mode)."""
    chosen = mode(name)
    if chosen.value is None:
        return None
    record = round_of(token.serial) if round_of is not None and token.serial is not None else None
    return chosen.value(token, record)


def scale_colour(stops: tuple[str, ...], fraction: float) -> QColor:
    """The colour at `fraction` (0…1) of a scale through evenly spaced `stops`."""
    if len(stops) == 1:
        return QColor(stops[0])
    at = min(1.0, max(0.0, fraction)) * (len(stops) - 1)
    i = min(int(at), len(stops) - 2)
    t = at - i
    low, high = QColor(stops[i]), QColor(stops[i + 1])
    return QColor(round(low.red() + (high.red() - low.red()) * t), round(low.green() + (high.green() - low.green()) * t),
                  round(low.blue() + (high.blue() - low.blue()) * t))


def status_formatter(palette: theme.Palette) -> TokenFormat:
    """Today's look: each token by its status, every other one of a status on the alternate box."""
    return lambda token: theme.token_format(palette, token.status, token.serial % 2 == 1, token.serial)


def scale_format(palette: theme.Palette, chosen: ColourMode, token: DisplayToken, value: float | None) -> QTextCharFormat:
    """A token in a scale mode: the scale's colour as its box (none: no value), the status's other cues kept."""
    fmt = theme.token_format(palette, token.status, False, token.serial)
    fmt.clearBackground()
    if value is not None:
        fmt.setBackground(scale_colour(chosen.stops(palette), chosen.fraction(value)))
        if token.status is TokenStatus.REJECTED:  # still dim, but readable on a box
            fmt.setForeground(QColor(palette.text_dim))
    return fmt


def no_value_format(palette: theme.Palette) -> QTextCharFormat:
    """How a token with no value looks in a scale mode (the legend's "no value" chip)."""
    return theme.text_format(palette)


def token_formatter(name: str, palette: theme.Palette, round_of: RoundLookup | None = None) -> TokenFormat:
    """The callable the transcript's layout formats every token with, in mode `name`."""
    chosen = mode(name)
    if not chosen.is_scale:
        return status_formatter(palette)
    return lambda token: scale_format(palette, chosen, token, token_value(name, token, round_of))
