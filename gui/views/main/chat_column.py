"""The main window's middle column: the legend, the transcript, the compose notice, the message box and the Send,
Stop and New chat buttons. It creates and keeps its widgets; the window connects their signals to its slots.

Given the chat session it renders (its tokens and rounds, for the transcript's tooltips and focus) and the
palette. May touch: the chat views (gui.views.chat), QtWidgets. No chat state.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from gui import theme
from gui.views.chat.message_box import ComposeNotice, MessageBox
from gui.views.chat.transcript import LegendBar, TranscriptView


class ChatColumn(QWidget):
    def __init__(self, session, palette: theme.Palette) -> None:
        """`session`: gui.sessions.chat.ChatSession (read: its tokens and rounds)."""
        super().__init__()
        self.session = session
        self.legend = LegendBar(palette, colour_by=True)
        self.transcript = TranscriptView(self.token_at, palette, actions=True, round_of=session.round_of)
        self.transcript.setPlaceholderText("Loading the model…")
        self.compose_notice = ComposeNotice()  # a chat another window writes: read-only here, and what sending does
        self.message_box = MessageBox()
        self.message_box.setPlaceholderText("Loading the model… (you can type already)")
        self.message_box.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.send_button = button("Send", "Send the message (Enter; Shift+Enter for a new line)")
        self.send_button.setObjectName("send_button")
        self.stop_button = button("Stop", "Stop at the next round and keep what was written (Esc)")
        self.new_chat_button = button("New chat", "Start over (Ctrl+N); the settings and the plain-speed figure stay")
        self._lay_out()

    def _lay_out(self) -> None:
        column = QVBoxLayout(self)
        column.setContentsMargins(10, 8, 10, 10)
        column.setSpacing(6)
        column.addWidget(self.legend)
        column.addWidget(self.transcript, 1)
        column.addWidget(self.compose_notice)
        input_row = QHBoxLayout()
        input_row.setSpacing(6)
        input_row.addWidget(self.message_box, 1)
        buttons = QVBoxLayout()
        buttons.setSpacing(4)
        for widget in (self.send_button, self.stop_button, self.new_chat_button):
            buttons.addWidget(widget)
        buttons.addStretch(1)
        input_row.addLayout(buttons)
        column.addLayout(input_row)

    def token_at(self, serial: int):
        """The chat's token `serial` (the transcript's tooltips), or None."""
        tokens = self.session.tokens
        return tokens[serial] if 0 <= serial < len(tokens) else None

    def show_loading(self, name: str) -> None:
        self.transcript.setPlaceholderText(f"Loading {name}…")

    def show_ready(self, model_label: str) -> None:
        """A model is loaded: the placeholders say how to write to it."""
        self.transcript.setPlaceholderText(f"{model_label} is ready. Type a message below and press Enter.")
        self.message_box.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self.message_box.viewport().update()

    def show_failure(self, outcome, turns, message: str) -> None:
        """A chat reply failed (gui.sessions.chat's outcome): the message given back to the box where nothing was
        written, else the reply as far as it went; a notice says why."""
        if outcome.restored_text is not None:
            self.transcript.render_turns(turns)
            if not self.message_box.toPlainText().strip():
                self.message_box.setPlainText(outcome.restored_text)
        elif outcome.turn is not None:
            self.transcript.end_assistant(outcome.turn)
        self.transcript.append_notice(f"Not generated: {message}")


def button(text: str, tip: str) -> QPushButton:
    made = QPushButton(text)
    made.setToolTip(tip)
    return made
