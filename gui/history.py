"""The chat window's link to the history store (gui/store.py), in plain Python (no Qt).

`HistoryRecorder` writes a conversation as it happens: the conversation on its first message, each user
message, each reply's rounds as they arrive (one short transaction each, on the GUI thread: ~0.1 ms), and the
reply's end. `turns_from_conversation` turns a stored conversation back into session turns and tokens, so a
past chat re-renders coloured exactly as it was drawn live: stored rounds become `engine.tokens` display
tokens, the same fold the live view uses. Touches the store and the session model's records; no Qt.
"""

from __future__ import annotations

import dataclasses
import time

from engine.stats import GenerationStats
from engine.tokens import DisplayToken, fill_replacements
from gui.session_model import Token, Turn
from gui.store import COMPLETE, INTERRUPTED, Conversation, HistoryError, HistoryStore, StoredRound

TITLE_CHARS = 60
_STATS_FIELDS = tuple(f.name for f in dataclasses.fields(GenerationStats))


def title_from(text: str) -> str:
    words = " ".join(text.split())
    return words if len(words) <= TITLE_CHARS else words[:TITLE_CHARS - 1].rstrip() + "…"


def stats_from_dict(data: dict | None) -> GenerationStats | None:
    if not data:
        return None
    try:
        values = {name: data[name] for name in _STATS_FIELDS}
    except KeyError:
        return None
    values["per_position_acceptance"] = tuple(values["per_position_acceptance"] or ())
    values["accept_length_histogram"] = tuple(values["accept_length_histogram"] or ())
    return GenerationStats(**values)


def display_tokens(stored_round: StoredRound) -> list[DisplayToken]:
    """A stored round's tokens as `engine.tokens` display tokens (positions as stored: engine.tokens'
    0-based convention), each correction told which ghost it replaced, as the live fold does."""
    meta = stored_round.meta or {}
    drafter, n_drafted = str(meta.get("drafter", "")), int(meta.get("n_drafted", 0))
    return fill_replacements([
        DisplayToken(text=t.text, status=t.status, round_index=stored_round.index, position=t.position,
                     draft_length=n_drafted, p_target=t.p_target, p_draft=t.p_draft, drafter=drafter,
                     token_id=t.token_id) for t in stored_round.tokens])


def _token_fields(display: DisplayToken) -> dict:
    fields = {f.name: getattr(display, f.name) for f in dataclasses.fields(DisplayToken)}
    fields["token_id"] = -1 if display.token_id is None else display.token_id
    return fields


def turns_from_conversation(conversation: Conversation, first_serial: int = 0) -> tuple[list[Turn], list[Token]]:
    """Session turns (and the flat token list, serials from `first_serial`) of a stored conversation. System
    messages are left out (the system prompt is a setting)."""
    turns: list[Turn] = []
    tokens: list[Token] = []
    for message in conversation.messages:
        if message.role == "user":
            turns.append(Turn(role="user", text=message.content))
            continue
        if message.role != "assistant":
            continue
        settings = message.settings or {}
        turn = Turn(role="assistant", text=message.content, spec_label=str(settings.get("spec", "")),
                    model=str(settings.get("model_label") or settings.get("model", "")),
                    stop_reason=message.stop_reason or ("interrupted" if message.state == INTERRUPTED else
                                                        "eos" if message.state == COMPLETE else None),
                    stats=stats_from_dict(message.stats), error=message.error)
        if message.state == INTERRUPTED and not message.error:
            turn.error = "interrupted: SpecScope closed before this reply finished; the part above was kept"
        for stored_round in message.rounds:
            for display in display_tokens(stored_round):
                token = Token(serial=first_serial + len(tokens), **_token_fields(display))
                tokens.append(token)
                turn.tokens.append(token)
        turns.append(turn)
    return turns, tokens


class HistoryRecorder:
    """Writes the chat window's conversation to the store as it happens. Every method swallows store errors
    into `last_error` (a broken history must never stop a chat); `write_seconds` sums the time spent writing
    rounds, `rounds_written` counts them."""

    def __init__(self, store: HistoryStore | None) -> None:
        self.store = store
        self.conversation_id: int | None = None
        self.message_id: int | None = None  # the reply being written
        self.user_message_id: int | None = None  # the message it answers
        self.last_error: str | None = None
        self.rounds_written = 0
        self.write_seconds = 0.0

    @property
    def enabled(self) -> bool:
        return self.store is not None and not self.store.read_only

    def _guard(self, action, *args, **kwargs):
        if not self.enabled:
            return None
        try:
            return action(*args, **kwargs)
        except HistoryError as exc:
            self.last_error = str(exc)
            return None

    def new_chat(self) -> None:
        self.conversation_id = self.message_id = self.user_message_id = None

    def open(self, conversation_id: int) -> None:
        self.conversation_id, self.message_id, self.user_message_id = conversation_id, None, None

    def user_message(self, text: str, settings: dict) -> None:
        def write():
            if self.conversation_id is None:
                self.conversation_id = self.store.create_conversation(title_from(text), settings)
            else:
                self.store.update_conversation_settings(self.conversation_id, settings)
            self.user_message_id = self.store.add_user_message(self.conversation_id, text, settings)
        self._guard(write)

    def reply_started(self, settings: dict) -> None:
        if self.conversation_id is None:
            return
        self.message_id = self._guard(self.store.start_assistant_message, self.conversation_id, settings)

    def round_verified(self, event) -> None:
        if self.message_id is None:
            return
        started = time.perf_counter()
        self._guard(self.store.append_round, self.message_id, event)
        self.write_seconds += time.perf_counter() - started
        self.rounds_written += 1

    def reply_finished(self, event) -> None:
        if self.message_id is not None:
            self._guard(self.store.finish_from_event, self.message_id, event)
        self.message_id = None

    def reply_stopped(self, stop_reason: str, stats: dict | None) -> None:
        """The window ended the reply (a new chat, closing SpecScope): what it wrote stays, complete, ended by
        `stop_reason` with its figures so far; not an error."""
        if self.message_id is not None:
            self._guard(self.store.finish_assistant_message, self.message_id, stats=stats, stop_reason=stop_reason)
        self.message_id = None

    def reply_failed(self, message: str, *, taken_back: bool) -> None:
        """The request failed: with nothing generated (`taken_back`: the user message went back to the message
        box) both messages go; otherwise the partial reply stays, marked interrupted, with the error."""
        if taken_back:
            for message_id in (self.message_id, self.user_message_id):
                if message_id is not None:
                    self._guard(self.store.delete_message, message_id)
            conversation = self._guard(self.store.load_conversation, self.conversation_id) \
                if self.conversation_id is not None else None
            if conversation is not None and not conversation.messages:  # its only message was taken back
                self._guard(self.store.delete_conversation, self.conversation_id)
                self.conversation_id = None
        elif self.message_id is not None:
            self._guard(self.store.finish_assistant_message, self.message_id, error=message, state=INTERRUPTED,
                        stop_reason="error")
        self.message_id = None
