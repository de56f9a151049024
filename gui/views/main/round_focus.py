"""The round focus: which round of the chat the user hovers and which one they picked, shared by the transcript
and the round panels (the timeline, the round's tree). Hovering a token or a timeline bar highlights that
round everywhere; clicking picks it (the tree shows it; a token also opens its round's popover).

Holds two RoundRecords (gui.sessions.rounds) and pushes them to every view that shows the focus; it reads the
chat session's token → round map and nothing else. A click on a token picks its round and opens the round's
popover there (the token's position focused).

May touch: the chat session (read), the transcript's and the panels' focus methods and signals, QtCore.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from gui.views.live.panel import RoundFocusPanel


class RoundFocus(QObject):
    changed = Signal(object, object)  # hovered, selected (RoundRecord | None each)

    def __init__(self, session, parent=None, popover=None) -> None:
        """`popover`: gui.views.chat.token_popover.TokenPopover, a clicked token's round beside it (None: none)."""
        super().__init__(parent)
        self.session = session  # gui.sessions.session_model.SessionModel (round_of, turns)
        self.hovered = None
        self.selected = None
        self.popover = popover
        self._views: list = []

    def attach(self, view) -> None:
        """A view with `show_focus(hovered, selected)`; a live panel that takes part in the focus
        (gui.views.live.panel.RoundFocusPanel) also moves it by its `round_hovered` / `round_selected` signals."""
        self._views.append(view)
        if isinstance(view, RoundFocusPanel):
            view.round_hovered.connect(self.hover)
            view.round_selected.connect(self.select)
        view.show_focus(self.hovered, self.selected)

    def hover_token(self, serial: int) -> None:
        """The transcript's token under the mouse (-1: none)."""
        self.hover(self.session.round_of(serial) if serial >= 0 else None)

    def select_token(self, serial: int) -> None:
        record = self.session.round_of(serial) if serial >= 0 else None
        if record is not None:
            self.select(record)

    def click_token(self, serial: int, global_point) -> None:
        """A token clicked in the transcript: its round is picked, and its tree opens beside it (the popover)."""
        record = self.session.round_of(serial) if serial >= 0 else None
        if record is None:
            return
        self.select(record)
        if self.popover is not None:
            self.popover.show_for(record, self.session.tokens[serial].position, global_point)

    def set_palette(self, palette) -> None:
        if self.popover is not None:
            self.popover.set_palette(palette)

    def hover(self, record) -> None:
        if record is not self.hovered:
            self.hovered = record
            self._push()

    def select(self, record) -> None:
        if record is not self.selected:
            self.selected = record
            self._push()

    def select_index(self, index: int) -> bool:
        """Pick round `index` of the reply the live views show (the scripted --select-round); False: no such round."""
        record = next((r for r in self.session.live.rounds if r.index == index), None)
        if record is None:
            return False
        self.select(record)
        return True

    def clear(self) -> None:
        """A new chat, a reply starts, a saved chat opens: the old rounds are gone."""
        if self.hovered is not None or self.selected is not None:
            self.hovered = self.selected = None
            self._push()

    def _push(self) -> None:
        for view in self._views:
            view.show_focus(self.hovered, self.selected)
        self.changed.emit(self.hovered, self.selected)
