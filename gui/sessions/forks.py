"""Where the chat branches (Edit, Regenerate), in plain Python (no Qt): the user message being edited, the settings
each message was sent with (Regenerate sends again with them), and the turns a fork keeps (those before a user
message). The chat session (gui.sessions.chat) holds one `Branches` and writes the fork to the history
(gui.persistence.fork).

May touch: gui.sessions.session_model's turns and tokens (read). Never Qt, never a widget.
"""

from __future__ import annotations

from typing import Any

from engine.core.tokens import DisplayToken
from gui.sessions.session_model import Turn

Settings = Any  # gui.sessions.chat.Settings (what the settings panel sent a message with); not imported: chat imports this


class Branches:
    """The message being edited (`editing`: its turn index) and what each message was sent with (`sent_with`)."""

    def __init__(self) -> None:
        self.editing: int | None = None
        self.sent_with: list[tuple[Turn, Settings]] = []  # each message sent this session and its settings

    def sent(self, turn: Turn, settings: Settings) -> None:
        self.sent_with.append((turn, settings))

    def edit(self, turn_index: int) -> None:
        """The user message `turn_index` is being edited: sending forks the chat before it."""
        self.editing = turn_index

    def cancel_edit(self) -> bool:
        """No message is being edited any more; returns whether one was."""
        editing, self.editing = self.editing, None
        return editing is not None

    def take_edit(self) -> int | None:
        """The message being edited, as the edited text goes out (and no message is being edited after)."""
        editing, self.editing = self.editing, None
        return editing

    def settings_of(self, turns: list[Turn], turn_index: int) -> Settings | None:
        """The settings the user message `turn_index` (or the reply to it) was sent with, if sent this session."""
        turn = turns[turn_index]
        if turn.role == "assistant" and turn_index > 0:
            turn = turns[turn_index - 1]
        return next((settings for sent, settings in self.sent_with if sent is turn), None)


def turns_before(turns: list[Turn], tokens: list[DisplayToken],
                 turn_index: int) -> tuple[list[Turn], list[DisplayToken]]:
    """What a fork before the user message `turn_index` keeps: the turns before it and their tokens (serials run
    in turn order, so the kept turns' tokens come first)."""
    kept = turns[:turn_index]
    n_tokens = sum(len(t.tokens) for t in kept)
    return kept, tokens[:n_tokens]
