"""Branching a stored chat: Edit and resend, and Regenerate, continue a conversation from an earlier message.

The old conversation stays as it was; the new branch is a new conversation holding a copy of the messages
before the fork (replies with their rounds, so the branch re-renders coloured), titled after the old one.
The smallest addition the reply actions need, written with the store's public functions only (gui.persistence.store
has no fork of its own). Touches the history store and the recorder's ids; no Qt.
"""

from __future__ import annotations

from gui.persistence.records import COMPLETE, INTERRUPTED
from gui.persistence.recorder import HistoryRecorder
from gui.persistence.store import HistoryError, HistoryStore

CHAT_ROLES = ("user", "assistant")  # the session's turns; system messages are a setting, not a turn
BRANCH_MARK = " (branch)"


def fork_conversation(store: HistoryStore, conversation_id: int, keep: int) -> int:
    """A new conversation with the first `keep` user and assistant messages of `conversation_id`; returns its id."""
    conversation = store.load_conversation(conversation_id)
    title = conversation.title if conversation.title.endswith(BRANCH_MARK) else conversation.title + BRANCH_MARK
    new_id = store.create_conversation(title, conversation.settings)
    messages = [m for m in conversation.messages if m.role in CHAT_ROLES][:keep]
    for message in messages:
        if message.role == "user":
            store.add_user_message(new_id, message.content, message.settings)
            continue
        message_id = store.start_assistant_message(new_id, message.settings)
        for stored_round in message.rounds:
            store.append_tokens(message_id, stored_round.index, stored_round.tokens, stored_round.meta)
        store.finish_assistant_message(message_id, stats=message.stats, stop_reason=message.stop_reason,
                                       error=message.error,
                                       state=message.state if message.state in (COMPLETE, INTERRUPTED) else INTERRUPTED)
    return new_id


def branch_recorder(recorder: HistoryRecorder, conversation_id: int | None, keep: int) -> None:
    """From now on `recorder` writes to a branch of `conversation_id` holding its first `keep` turns (no turn:
    a new chat, made on the next message). If the copy fails (`recorder.last_error` says why), the branch is
    saved from its next message on as a chat of its own; the chat itself goes on either way."""
    recorder.new_chat()
    if conversation_id is None or keep <= 0 or not recorder.enabled:
        return
    try:
        recorder.open(fork_conversation(recorder.store, conversation_id, keep))
    except HistoryError as exc:
        recorder.last_error = str(exc)
