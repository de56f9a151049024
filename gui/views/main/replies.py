"""The main window's reply actions: Copy, Regenerate and Edit (from the menus and each message's buttons), and Esc.

Which message is being edited is the chat session's (gui.sessions.chat.ChatSession.editing); this module asks
the session and renders its answers in the message box, the transcript and the status line.
May touch: the window's views and public methods, the clipboard.
"""

from __future__ import annotations

from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication

from engine.core.errors import ConfigError


class ReplyActions:
    def __init__(self, window) -> None:
        self.window = window

    def run(self, action: str, index: int) -> None:
        """A message's own button (the transcript's `action_requested`)."""
        {"copy": self.copy_reply, "regenerate": self.regenerate, "edit": self.edit_message}[action](index)

    def _last_turn(self, role: str) -> int | None:
        turns = self.window.session.turns
        return next((i for i in range(len(turns) - 1, -1, -1) if turns[i].role == role), None)

    def copy_reply(self, index: int | None = None) -> str | None:
        """Put a reply's text (the last one's by default) on the clipboard: what the model wrote, no rejected
        drafts, no glyphs. Returns it."""
        window = self.window
        index = self._last_turn("assistant") if index is None else index
        if index is None or not window.session.turns[index].text:
            window.set_status("No reply to copy yet")
            return None
        text = window.session.turns[index].text
        QApplication.clipboard().setText(text)
        window.set_status(f"Copied the reply ({len(text)} characters)")
        return text

    def regenerate(self, index: int | None = None, current: bool = False) -> bool:
        """Write a reply (the last one by default) again with the settings it ran with (or, with `current` or
        when they are not known, the settings panel's). The chat forks before the message it answered."""
        window, session = self.window, self.window.session
        index = self._last_turn("assistant") if index is None else index
        if index is None or index == 0:
            window.set_status("No reply to regenerate yet")
            return False
        if session.generating or window.tools.comparing() or not session.ready:
            window.set_status("Wait for the reply (or the model) first, or stop it")
            return False
        settings = None if current else session.settings_of(index)
        if settings is None:
            try:
                settings = window.controls.read()
            except ConfigError as exc:
                window.set_status(f"Refused: {exc}")
                return False
        session.cancel_edit()
        text = session.fork_before(index - 1)
        window.transcript.render_turns(session.turns)
        return window.send(text, settings)

    def edit_message(self, index: int | None = None) -> bool:
        """Put one of your messages (the last one by default) in the message box; sending it forks the chat
        there (the history keeps both branches). Esc cancels."""
        window = self.window
        index = self._last_turn("user") if index is None else index
        if index is None or window.session.generating:
            window.set_status("No message to edit yet" if index is None else "Wait for the reply or stop it first")
            return False
        window.message_box.setPlainText(window.session.edit(index))
        window.message_box.moveCursor(QTextCursor.MoveOperation.End)
        window.message_box.setFocus()
        window.set_status("Editing a message: Enter sends it as a new branch of this chat (the history keeps "
                          "both); Esc cancels")
        return True

    def escape(self) -> None:
        """Esc: stop the reply being written, else cancel the edit."""
        window = self.window
        if window.session.generating:
            window.stop()
        elif window.session.cancel_edit():
            window.message_box.clear()
            window.set_status("Edit cancelled")
