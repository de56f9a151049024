"""The user's chat history as the app opens it: the store at the data folder (engine.host.history_path), wired so
that deleting a chat or a reply makes suffix decoding's store beside it (engine.drafters.suffix_store, "learn from
my chats") forget those replies. The one place that knows both stores (HistoryStore is told of deleted replies
through its `replies_deleted` parameter). Opening the store touches the database as HistoryStore does.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.drafters.suffix_store import STORE_NAME, forget_replies
from engine.host import history_path
from gui.persistence.store import HistoryStore


def open_user_history(path: str | os.PathLike | None = None) -> HistoryStore:
    """The chat history at `path` (default: the data folder's); deleted replies are forgotten by the suffix store
    in the same folder (where one was ever made). Raises HistoryError as HistoryStore does."""
    path = Path(path) if path is not None else history_path()
    learned = path.with_name(STORE_NAME)
    return HistoryStore(path, replies_deleted=lambda replies: forget_replies(replies, learned))
