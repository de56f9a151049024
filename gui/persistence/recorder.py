"""The chat window's link to the history store (gui.persistence.store), in plain Python (no Qt).

`HistoryRecorder` writes a conversation as it happens: the conversation on its first message, each user
message, each reply's rounds as they arrive (one short transaction each, on the GUI thread; rounds revised at the
end of a server's reply replace them, in one), and the reply's end; a busy database queues the write (`pending`)
instead of blocking, and a conversation another window writes is read-only here. `turns_from_conversation` turns a stored conversation back into session
turns and tokens, so a past chat re-renders coloured exactly as it was drawn live: a stored round reads back
as the `engine.core.tokens.DisplayToken`s the live fold made, numbered here as the session numbers its own.
Touches the store and the session model's records; no Qt.
"""

from __future__ import annotations

import dataclasses
import time

from engine.core.stats import GenerationStats
from engine.core.tokens import DisplayToken
from gui.persistence.records import COMPLETE, INTERRUPTED, ConversationRecord, round_event
from gui.persistence.store import HistoryBusyError, HistoryError, HistoryStore
from gui.sessions.rounds import RoundRecord
from gui.sessions.session_model import Turn

TITLE_CHARS = 60
_STATS_FIELDS = tuple(f.name for f in dataclasses.fields(GenerationStats) if f.default is dataclasses.MISSING)


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
    values["verify_cost_seconds"] = tuple(data.get("verify_cost_seconds") or ())  # absent in older histories
    try:  # absent in older histories
        values["by_drafter"] = tuple((str(n), int(r), int(d), int(a)) for n, r, d, a in data.get("by_drafter") or ())
    except (TypeError, ValueError):
        values["by_drafter"] = ()
    values["tree_rounds"] = int(data.get("tree_rounds") or 0)  # absent in older histories
    return GenerationStats(**values)


def turns_from_conversation(conversation: ConversationRecord,
                            first_serial: int = 0) -> tuple[list[Turn], list[DisplayToken]]:
    """Session turns (and the flat token list, serials from `first_serial`) of a stored conversation. System
    messages are left out (the system prompt is a setting)."""
    turns: list[Turn] = []
    tokens: list[DisplayToken] = []
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
        committed = 0
        for stored_round in message.rounds:
            serials = []
            for stored in stored_round.tokens:
                token = dataclasses.replace(stored, serial=first_serial + len(tokens))
                serials.append(token.serial)
                tokens.append(token)
                turn.tokens.append(token)
            event = round_event(stored_round, committed)
            committed = event.n_committed_total
            turn.rounds.append(RoundRecord(len(turns), event, tuple(serials)))
        turns.append(turn)
    return turns, tokens


class _Ref:
    """The id of a row that may not be written yet (its write waits in the retry queue): later writes hold the
    reference and read the id when they run."""

    __slots__ = ("id",)

    def __init__(self, row_id: int | None = None) -> None:
        self.id = row_id


class HistoryRecorder:
    """Writes the chat window's conversation to the store as it happens. Every method swallows store errors
    into `last_error` (a broken history must never stop a chat); `write_seconds` sums the time spent writing
    rounds, `rounds_written` counts them.

    A busy database (another SpecScope writing) never holds the GUI thread past the store's short timeout
    and never loses a round: the write waits in `pending` and runs, in order, before the next one (or at
    `flush`). A conversation another window is writing is opened read-only here (`read_only_reason`)."""

    def __init__(self, store: HistoryStore | None) -> None:
        self.store = store
        self._conversation = _Ref()
        self._reply: _Ref | None = None  # the reply being written
        self._user: _Ref | None = None  # the message it answers
        self.pending: list = []  # writes that found the database busy, oldest first
        self.read_only_reason: str | None = None  # this conversation is live in another window
        self.last_error: str | None = None
        self.rounds_written = 0
        self.write_seconds = 0.0

    @property
    def conversation_id(self) -> int | None:
        return self._conversation.id

    @property
    def message_id(self) -> int | None:
        return self._reply.id if self._reply is not None else None

    @property
    def enabled(self) -> bool:
        return self.store is not None and not self.store.read_only and self.read_only_reason is None

    def _guard(self, action, *args, **kwargs):
        """Run a write now, after the ones still waiting; a busy database queues it instead."""
        if not self.enabled:
            return None
        write = lambda: action(*args, **kwargs)  # noqa: E731
        if self.pending and not self.flush():
            self.pending.append(write)
            return None
        try:
            return write()
        except HistoryBusyError:
            self.pending.append(write)
        except HistoryError as exc:
            self.last_error = str(exc)
        return None

    def flush(self) -> bool:
        """Run the waiting writes in order; True when none is left (False: still busy, they wait on)."""
        while self.pending:
            try:
                self.pending[0]()
            except HistoryBusyError:
                return False
            except HistoryError as exc:
                self.last_error = str(exc)
            self.pending.pop(0)
        return True

    def close(self, wait_s: float = 5.0) -> int:
        """Before the store closes (SpecScope quits): give the waiting writes up to `wait_s` for the database to
        free, then release this window's conversation. Returns how many writes could not be made (said in
        `last_error`)."""
        deadline = time.monotonic() + wait_s
        while not self.flush() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.pending:
            self.last_error = (f"{len(self.pending)} change(s) to the chat history could not be saved: another "
                               "SpecScope kept the database busy")
        if self.store is not None and self.conversation_id is not None:
            self.store.release(self.conversation_id)
        return len(self.pending)

    def _switch(self, conversation_id: int | None) -> None:
        self.flush()
        if self.store is not None and self.conversation_id is not None and self.conversation_id != conversation_id:
            self.store.release(self.conversation_id)
        self._conversation, self._reply, self._user = _Ref(conversation_id), None, None
        self.read_only_reason = None

    def new_chat(self) -> None:
        self._switch(None)

    def open(self, conversation_id: int) -> None:
        """Write on into a stored conversation, or show it read-only when another window writes it."""
        self._switch(conversation_id)
        if self.store is not None and not self.store.read_only and not self.store.claim(conversation_id):
            self.read_only_reason = ("Read-only here: this chat is open in another SpecScope window, which writes "
                                     "it. A message sent here starts a branch of it (a new chat with these turns).")

    def user_message(self, text: str, settings: dict) -> None:
        if self.read_only_reason is not None:  # another window's live chat: what is typed here is a new one
            self._switch(None)
        conversation, user = self._conversation, _Ref()
        self._user = user

        def write():
            if conversation.id is None:
                conversation.id = self.store.create_conversation(title_from(text), settings)
                self.store.claim(conversation.id)
            else:
                self.store.update_conversation_settings(conversation.id, settings)
            user.id = self.store.add_user_message(conversation.id, text, settings)
        self._guard(write)

    def reply_started(self, settings: dict) -> None:
        if not self.enabled:
            return
        conversation, reply = self._conversation, _Ref()
        self._reply = reply

        def write():
            if conversation.id is not None:
                reply.id = self.store.start_assistant_message(conversation.id, settings)
        self._guard(write)

    def _on_reply(self, action, *args, **kwargs) -> None:
        """A write about the reply being written (skipped when its start could not be written)."""
        reply = self._reply

        def write():
            if reply.id is not None:
                action(reply.id, *args, **kwargs)
        self._guard(write)

    def round_verified(self, event) -> None:
        if self._reply is None:
            return
        started = time.perf_counter()
        self._on_reply(self.store.append_round, event)
        self.write_seconds += time.perf_counter() - started
        self.rounds_written += 1

    def rounds_revised(self, rounds) -> None:
        """The reply's rounds as they really were (engine.core.events.RoundsRevised): its stored rounds give way to
        these, in one transaction (after any write still waiting, so the rounds it replaces are all there)."""
        if self._reply is None:
            return
        started = time.perf_counter()
        self._on_reply(self.store.replace_rounds, tuple(rounds))
        self.write_seconds += time.perf_counter() - started
        self.rounds_written += len(rounds)

    def reply_finished(self, event) -> None:
        if self._reply is not None:
            self._on_reply(self.store.finish_from_event, event)
        self._reply = None

    def reply_stopped(self, stop_reason: str, stats: dict | None) -> None:
        """The window ended the reply (a new chat, closing SpecScope): what it wrote stays, complete, ended by
        `stop_reason` with its figures so far; not an error."""
        if self._reply is not None:
            self._on_reply(self.store.finish_assistant_message, stats=stats, stop_reason=stop_reason)
        self._reply = None

    def reply_failed(self, message: str, *, taken_back: bool) -> None:
        """The request failed: with nothing generated (`taken_back`: the user message went back to the message
        box) both messages go; otherwise the partial reply stays, marked interrupted, with the error."""
        if taken_back:
            conversation, refs = self._conversation, [r for r in (self._reply, self._user) if r is not None]

            def take_back():
                for ref in refs:
                    if ref.id is not None:
                        self.store.delete_message(ref.id)
                if conversation.id is not None and not self.store.load_conversation(conversation.id).messages:
                    self.store.delete_conversation(conversation.id)  # its only message was taken back
                    self.store.release(conversation.id)
                    conversation.id = None
            self._guard(take_back)
        elif self._reply is not None:
            self._on_reply(self.store.finish_assistant_message, error=message, state=INTERRUPTED,
                           stop_reason="error")
        self._reply = None
