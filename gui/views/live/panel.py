"""The live-panel contract: what the main window's live dock asks of every panel in it.

A panel is built with the palette, renders a `LiveSnapshot` (the chat session's live stats, its figures and
the plain-speed reference), takes a new palette and clears; its class says its `name` (the scripted mode's
`--panel` names it so) and its `stretch`. A panel about rounds (the timeline, the round's tree) declares that it
takes part in the round focus by being a `RoundFocusPanel`: it says which round the user hovers or picks (signals
`round_hovered` / `round_selected`, a gui.sessions.rounds.RoundRecord or None) and shows the focus it is given
(`show_focus(hovered, selected)`); the dock connects every such panel to the window's round focus
(gui.views.main.round_focus), which also highlights the round's tokens in the transcript. The dock
(gui.views.main.live_dock) holds the list of panel classes and feeds, themes and clears them in one loop each:
adding a panel is one module here plus one line in that list.

May touch: gui.theme and gui.sessions.session_model (types only), QtCore's Signal. Never a session, never the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from PySide6.QtCore import Signal

from gui import theme
from gui.sessions.session_model import Figures, LiveStats


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """What the panels draw from, read from the chat session at one moment."""

    live: LiveStats  # the reply's ring buffers and counts (read only)
    figures: Figures  # the stats cards' figures (gui.sessions.chat.ChatSession.figures)
    baseline_tok_per_s: float | None  # plain decoding's speed with this model, if measured
    tick: bool = False  # a tick of the dock's timer while a reply is written (else: draw everything now)

    @property
    def version(self) -> int:
        return self.live.version


@runtime_checkable
class LivePanel(Protocol):
    """A widget of the live dock, made as `Panel(palette)`.

    `update_from` draws the snapshot; on a tick a panel that is costly to draw may draw part of it now and
    return True: it is fed again on the next tick, at the same version, until it returns False. `clear`
    forgets what was drawn (a new chat, a reply starts, a saved chat opens); the next snapshot redraws it."""

    name: str  # what the scripted `--panel` calls it (one word)
    stretch: int  # its share of the dock's spare height (0: its own height)

    def update_from(self, snapshot: LiveSnapshot) -> bool: ...

    def set_palette(self, palette: theme.Palette) -> None: ...

    def clear(self) -> None: ...


class RoundFocusPanel:
    """A live panel that takes part in the round focus (the module docstring), declared by inheriting this beside
    its widget class (`class RoundTimeline(QWidget, RoundFocusPanel)`); the dock reads it with isinstance."""

    round_hovered = Signal(object)  # the round under the mouse (RoundRecord), None when it leaves
    round_selected = Signal(object)  # the round the user picked (RoundRecord)

    def show_focus(self, hovered, selected) -> None:
        """Show the hovered and the picked round (RoundRecord | None each)."""
        raise NotImplementedError
