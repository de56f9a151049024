"""The message box: Enter sends, Shift+Enter starts a new line, Up in an empty box asks to edit the last message.
A QPlainTextEdit and two signals, no state."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QPlainTextEdit


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
