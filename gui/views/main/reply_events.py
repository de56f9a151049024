"""The main window's request in flight, as the worker reports it: a reply started, a round verified, its rounds
revised (a server's, at its end: the reply is drawn again), the reply finished or failed. The chat session folds
each event; this draws what it answers in the transcript, the chats list, the settings panel, the live dock and the
status line, and says what happened by signals.

Given the session and the views it renders (never the window). May touch: gui.sessions.chat (its event folds),
gui.sessions.purpose, those views' public methods, the model loading's plain-speed reference.
"""

from __future__ import annotations

from typing import NamedTuple

from PySide6.QtCore import QObject, Signal

from gui.sessions.purpose import Purpose


class ReplyViews(NamedTuple):
    chat: object  # gui.views.main.chat_column.ChatColumn
    history_panel: object  # gui.views.chat.history_panel.HistoryPanel
    controls: object  # gui.views.chat.controls.ControlsPanel
    live: object  # gui.views.main.live_dock.LiveDock
    status_line: object  # gui.views.main.docks.StatusLine


class ReplyEvents(QObject):
    reply_finished = Signal(object)  # Turn: a chat reply ended (also when stopped)
    baseline_measured = Signal(float)  # the plain-decoding reference, tok/s
    request_failed = Signal(str)
    ended = Signal()  # the request in flight ended: the window's actions follow

    def __init__(self, session, views: ReplyViews, loading, parent: QObject | None = None) -> None:
        """`session`: gui.sessions.chat.ChatSession; `loading`: gui.views.main.loading.ModelLoading (the plain
        speed it shows and remembers)."""
        super().__init__(parent)
        self.session, self.loading = session, loading
        self.chat, self.history_panel, self.controls, self.live, self.status_line = views

    def begin(self, status: str) -> None:
        """A request goes out."""
        self.controls.set_pending_note(None)
        self.status_line.set_busy(True)
        self.status_line.say(status)

    def end_active(self) -> None:
        self.status_line.set_busy(self.session.loading is not None)
        self.controls.set_pending_note(None)
        self.ended.emit()

    def started(self, request_id: int, event) -> None:
        turn = self.session.on_started(request_id, event)
        if turn is None:
            return
        self.chat.transcript.begin_assistant(turn)
        self.live.clear()  # the reply's panels redraw from the timer
        self.live.start()

    def round_verified(self, request_id: int, event) -> None:
        tokens = self.session.on_round(request_id, event)
        if tokens is not None:
            self.chat.transcript.append_tokens(tokens)

    def rounds_revised(self, request_id: int, event) -> None:
        """The reply's rounds as they really were (a server tells its steps at the end): the reply is drawn again
        with its revised colours, and the live panels from its revised rounds."""
        if self.session.on_revised(request_id, event) is None:
            return
        self.chat.transcript.render_turns(self.session.turns, self.session.current)
        self.live.clear()
        self.live.feed()

    def finished(self, request_id: int, event) -> None:
        outcome = self.session.on_finished(request_id, event)
        if outcome is None:
            return
        self.end_active()
        self.status_line.say(outcome.status)
        self.loading.baseline_changed()
        if outcome.purpose is not Purpose.CHAT:
            if outcome.baseline is not None:
                self.live.feed()
                self.baseline_measured.emit(outcome.baseline)
            return
        self.history_panel.refresh()
        if outcome.turn is not None:
            self.chat.transcript.end_assistant(outcome.turn)
        self.live.feed()
        if outcome.turn is not None:
            self.reply_finished.emit(outcome.turn)

    def failed(self, request_id: int, message: str) -> None:
        outcome = self.session.on_failed(request_id, message)
        if outcome is None:
            return
        self.end_active()
        if outcome.purpose is Purpose.CHAT:
            self.history_panel.refresh()
            self.chat.show_failure(outcome, self.session.turns, message)
        self.controls.show_runtime_problem(message)
        self.status_line.say(outcome.status)
        self.live.feed()
        self.request_failed.emit(message)
