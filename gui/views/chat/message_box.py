"""The message box: Enter sends, Shift+Enter starts a new line, Up in an empty box asks to edit the last message.
A QPlainTextEdit and two signals, no state. Above it, `ComposeNotice`: why a message sent from here goes elsewhere
(a chat another window writes is read-only here)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QSizePolicy


class MessageBox(QPlainTextEdit):
    send_requested = Signal()
    edit_last_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("message_box")
        self.setTabChangesFocus(True)
        self.document().contentsChanged.connect(self.updateGeometry)

    def keyPressEvent(self, event) -> None:  # noqa: N802
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.send_requested.emit()
            event.accept()
            return
        if event.key() == Qt.Key.Key_Up and not event.modifiers() and not self.toPlainText():
            self.edit_last_requested.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def sizeHint(self) -> QSize:  # noqa: N802
        lines = min(8, max(2, self.document().blockCount()))
        height = self.fontMetrics().lineSpacing() * lines + 18
        return QSize(400, height)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(120, self.fontMetrics().lineSpacing() * 2 + 18)


class ComposeNotice(QLabel):
    """A line at the message box, shown only while there is something to say about where a message goes."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("notice")
        self.setWordWrap(True)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wraps, never widens the window
        self.hide()

    def show_reason(self, reason: str | None) -> None:
        """`reason` (None: hidden)."""
        self.setText(reason or "")
        self.setVisible(bool(reason))
