"""Branching a stored chat: Edit and resend, and Regenerate, continue a conversation from an earlier message; a
message typed in a chat another window writes (read-only here) continues it in a branch of its own.

The old conversation stays as it was; the new branch is a new conversation holding a copy of the messages
before the fork (replies with their rounds, so the branch re-renders coloured), titled after the old one.
The smallest addition the reply actions need, written with the store's public functions only (gui.persistence.store
has no fork of its own). Touches the history store and the recorder's ids; no Qt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from gui.persistence.records import COMPLETE, INTERRUPTED
from gui.persistence.recorder import HistoryRecorder
from gui.persistence.store import HistoryError, HistoryStore

if TYPE_CHECKING:  # the session's turns are only read here (role, rounds): persistence never imports sessions
    from gui.sessions.session_model import Turn

CHAT_ROLES = ("user", "assistant")  # the session's turns; system messages are a setting, not a turn
BRANCH_MARK = " (branch)"


def fork_conversation(store: HistoryStore, conversation_id: int, keep: int,
                      rounds_read: Sequence[int] | None = None) -> int:
    """A new conversation with the first `keep` user and assistant messages of `conversation_id`; returns its id.
    `rounds_read`: how many rounds of each kept reply the caller read (a reply another window was still writing
    then has more now): the branch keeps those only, so it holds what was shown and what a reply was made from."""
    conversation = store.load_conversation(conversation_id)
    title = conversation.title if conversation.title.endswith(BRANCH_MARK) else conversation.title + BRANCH_MARK
    new_id = store.create_conversation(title, conversation.settings)
    messages = [m for m in conversation.messages if m.role in CHAT_ROLES][:keep]
    read = iter(rounds_read) if rounds_read is not None else None
    for message in messages:
        if message.role == "user":
            store.add_user_message(new_id, message.content, message.settings)
            continue
        message_id = store.start_assistant_message(new_id, message.settings)
        rounds = message.rounds if read is None else message.rounds[:next(read, len(message.rounds))]
        for stored_round in rounds:
            store.append_tokens(message_id, stored_round.index, stored_round.tokens, stored_round.meta)
        whole = len(rounds) == len(message.rounds) and message.state in (COMPLETE, INTERRUPTED)
        store.finish_assistant_message(message_id, stats=message.stats if whole else None,
                                       stop_reason=message.stop_reason if whole else "interrupted",
                                       error=message.error, state=message.state if whole else INTERRUPTED)
    return new_id


def branch_recorder(recorder: HistoryRecorder, conversation_id: int | None, kept: Sequence["Turn"]) -> None:
    """From now on `recorder` writes to a branch of `conversation_id` holding the session's `kept` turns as they
    were read (no turn: a new chat, made on the next message). If the copy fails (`recorder.last_error` says
    why), the branch is saved from its next message on as a chat of its own; the chat itself goes on either way."""
    recorder.new_chat()
    if conversation_id is None or not kept or not recorder.enabled:
        return
    rounds_read = [len(turn.rounds) for turn in kept if turn.role == "assistant"]
    try:
        recorder.open(fork_conversation(recorder.store, conversation_id, len(kept), rounds_read))
    except HistoryError as exc:
        recorder.last_error = str(exc)
