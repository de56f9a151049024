"""One writer per conversation of the chat history: an OS file lock per conversation
(`<database>.locks/c<id>.lock`), held while a store writes a reply into it and released when the writer ends or
dies, so a second SpecScope never relabels a reply still streaming in another one and can open that chat
read-only. Pure Python; touches only the lock folder beside the database. Where there are no POSIX locks
(Windows) one writer is not enforced.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.host import owner_only
from gui.persistence.private_files import PRIVATE

NO_POSIX_LOCKS = -1  # what `_try_lock` holds where one writer is not enforced (there is no fd to close)


class ConversationLocks:
    """The writer locks of one database's conversations, and which of them this store holds. Not thread-safe
    on its own: the store calls it under its lock."""

    def __init__(self, db_path: Path) -> None:
        self.folder = db_path.with_name(db_path.name + ".locks")
        self._held: dict[int, int] = {}  # conversation id -> the fd of its writer lock, held here

    def _lock_file(self, conversation_id: int) -> Path:
        self.folder.mkdir(mode=0o700, exist_ok=True)
        return self.folder / f"c{int(conversation_id)}.lock"

    def _try_lock(self, conversation_id: int) -> int | None:
        """An fd holding the conversation's writer lock, or None when another writer holds it."""
        try:
            import fcntl
        except ImportError:
            return NO_POSIX_LOCKS
        with owner_only():
            fd = os.open(self._lock_file(conversation_id), os.O_RDWR | os.O_CREAT, PRIVATE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def held_here(self, conversation_id: int) -> bool:
        return conversation_id in self._held

    def claim(self, conversation_id: int) -> bool:
        """Become the one writer of a conversation; False when another writer holds it."""
        if conversation_id in self._held:
            return True
        fd = self._try_lock(conversation_id)
        if fd is None:
            return False
        self._held[conversation_id] = fd
        return True

    def release(self, conversation_id: int | None) -> None:
        fd = self._held.pop(conversation_id, None) if conversation_id is not None else None
        if fd is not None and fd != NO_POSIX_LOCKS:
            os.close(fd)

    def release_all(self) -> None:
        for conversation_id in list(self._held):
            self.release(conversation_id)

    def held_elsewhere(self, conversation_id: int) -> bool:
        """Whether another writer (another window, another SpecScope) holds the conversation now."""
        if conversation_id in self._held:
            return False
        fd = self._try_lock(conversation_id)
        if fd is None:
            return True
        if fd != NO_POSIX_LOCKS:
            os.close(fd)
        return False
