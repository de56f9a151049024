"""The settings panel's small boxes (gui.views.chat.controls.ControlsPanel): the reopened chat's saved settings,
the sampling fields with the token budget, the system prompt; and the notes and combo boxes every box uses. Each
box creates and keeps its own widgets and tells what changed by a signal; the panel reads them. Render only: no
state beyond the widgets.

May touch: its own widgets; engine.core.config (SamplingConfig, built from the fields, which checks itself).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QGroupBox, QHBoxLayout, QLabel,
                               QPlainTextEdit, QToolButton, QVBoxLayout, QWidget)



class NoteLabel(QLabel):
    """A wrapped note that is always as tall as its text at its width: a form layout inside a scroll area
    otherwise keeps the height it computed for another width, and clips a long note top and bottom."""

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit(event.size().width())

    def setText(self, text: str) -> None:  # noqa: N802
        super().setText(text)
        self._fit(self.width())

    def _fit(self, width: int) -> None:
        if self.wordWrap() and width > 0:
            height = self.heightForWidth(width)
            if height > 0 and height != self.minimumHeight():
                self.setMinimumHeight(height)


def note_label(name: str) -> QLabel:
    """A wrapped one-line note, hidden until it has something to say."""
    label = NoteLabel()
    label.setObjectName(name)
    label.setWordWrap(True)
    label.hide()
    return label


def narrow_combo() -> QComboBox:
    """A combo box whose long items don't widen the settings dock: it asks for 20 characters (a longer item
    is cut in the box); its popup shows each item in full."""
    return QComboBox(minimumContentsLength=20,
                     sizeAdjustPolicy=QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)


def set_combo_text(combo: QComboBox, text: str) -> None:
    """Select `text` in `combo`, first adding it on top when it is not offered."""
    index = combo.findText(text)
    if index < 0:
        combo.insertItem(0, text)
        index = 0
    combo.setCurrentIndex(index)


class SavedBox(QWidget):
    """Shown for a reopened chat: the settings its last reply ran with, and a button to use them."""

    use_requested = Signal()  # set the panel to what the chat ran with

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.note = QLabel("")
        self.note.setObjectName("notice")
        self.note.setWordWrap(True)
        row.addWidget(self.note, 1)
        self.use_button = QToolButton()
        self.use_button.setText("Use these")
        self.use_button.setToolTip("Set the panel to what this chat ran with")
        self.use_button.clicked.connect(self.use_requested)
        row.addWidget(self.use_button)
        self.hide()

    def show_words(self, words: str | None) -> None:
        """What the reopened chat ran with (None: hide the box)."""
        self.note.setText(f"This chat ran with {words}." if words else "")
        self.setVisible(bool(words))


class SystemBox(QGroupBox):
    """The system prompt: optional instructions sent before the conversation."""

    changed = Signal()  # the text

    def __init__(self, parent=None) -> None:
        super().__init__("System prompt", parent)
        layout = QVBoxLayout(self)
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Optional instructions sent before the conversation")
        self.editor.setMaximumHeight(90)
        self.editor.textChanged.connect(self.changed)
        layout.addWidget(self.editor)

    def prompt(self) -> str:
        return self.editor.toPlainText()

    def set_prompt(self, text: str) -> None:
        self.editor.setPlainText(text)
