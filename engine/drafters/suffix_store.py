"""What suffix decoding learned from past chats ("learn from my chats", off by default): the finished replies of
each model, as token ids, in one SQLite file beside the chat history (`<data dir>/suffix-store.sqlite3`,
SPECSCOPE_DATA_DIR overriding the folder), owner-only as the history is (0700 folder, 0600 files).

Durability: WAL journal, one transaction per reply, so a process killed mid-write (kill -9) leaves the store as
it was before that reply or with it, never half of it. A store that can't be read (not a database, a damaged
page, rows of another format) is put aside and started afresh, with one line saying so (`warning`); it never
stops a reply. One that can't be opened at all (the data folder is a file, read-only, locked by another
process) is left as it is: StoreUnavailable says why, and learning is off for that run. Replies are kept per
model key, the newest `max_replies`. Touches only its own files.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from array import array
from pathlib import Path

from engine.host import data_root, owner_only

STORE_NAME = "suffix-store.sqlite3"
FORMAT = 1  # PRAGMA user_version of the store's tables
BUSY_TIMEOUT_S = 0.25
_TABLE = ("CREATE TABLE IF NOT EXISTS replies (id INTEGER PRIMARY KEY, model TEXT NOT NULL, digest TEXT NOT NULL, "
          "tokens BLOB NOT NULL)",
          "CREATE INDEX IF NOT EXISTS replies_model ON replies (model, id)",
          "CREATE INDEX IF NOT EXISTS replies_digest ON replies (digest)")


def default_store_path() -> Path:
    return data_root() / STORE_NAME


def store_files(path: Path) -> list[Path]:
    """The store and the files SQLite keeps beside it."""
    return [path, *(path.with_name(path.name + end) for end in ("-wal", "-shm", "-journal"))]


def _make_private(path: Path) -> None:
    if os.name != "posix":
        return
    for file in store_files(path):
        try:
            if file.exists():
                os.chmod(file, 0o600)
        except OSError:
            pass


def encode(ids) -> bytes:
    """Token ids as little-endian 32-bit integers."""
    data = array("i", ids)
    if sys.byteorder == "big":
        data.byteswap()
    return data.tobytes()


def decode(blob) -> list[int]:
    """The ids `encode` wrote; ValueError for bytes that are not whole 32-bit integers."""
    if not isinstance(blob, bytes) or len(blob) % 4:
        raise ValueError("a reply's tokens are not 32-bit integers")
    data = array("i")
    data.frombytes(blob)
    if sys.byteorder == "big":
        data.byteswap()
    return data.tolist()


def digest(ids) -> str:
    """What names a reply's ids (the history forgets a deleted chat's replies by it)."""
    return hashlib.sha256(encode(ids)).hexdigest()


def forget_replies(replies, path: Path | None = None) -> str | None:
    """Forget what was learned from these replies (lists of token ids: a deleted chat's), where a store exists
    (none is made); the reason, in one line, where it could not."""
    path = path or default_store_path()
    digests = [digest(ids) for ids in replies if ids]
    if not digests or not path.is_file():
        return None
    try:
        store = SuffixStore(path)
    except StoreUnavailable as exc:
        return f"{exc}: a deleted chat's replies are still in it"
    try:
        return store.forget(digests)
    finally:
        store.close()


def clear_store(path: Path | None = None) -> None:
    """Forget everything learned: the store's files are removed (the chat history is cleared with it)."""
    for file in store_files(path or default_store_path()):
        try:
            file.unlink()
        except FileNotFoundError:
            pass


class StoreUnavailable(Exception):
    """The store can't be made or opened here (its folder can't be made, a file can't be written, another
    process holds it): nothing is damaged, nothing is put aside. The message says why, in one line."""


class SuffixStore:
    """The learned replies. `warning` says, in one line, that an unreadable store was started afresh;
    StoreUnavailable where it can't be opened at all."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.warning: str | None = None
        try:
            self._conn = self._open_or_afresh()
        except (OSError, sqlite3.OperationalError) as exc:  # can't open (not damaged): nothing to put aside
            raise StoreUnavailable(f"the suffix-decoding store {self.path} can't be opened ({exc})") from exc

    def _open_or_afresh(self) -> sqlite3.Connection:
        try:
            return self._open()
        except sqlite3.OperationalError:  # can't open, can't write, locked: not damaged
            raise
        except sqlite3.DatabaseError as exc:
            self._put_aside(exc)
            return self._open()

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with owner_only():
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                check = conn.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise sqlite3.DatabaseError(check)
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, FORMAT):
                    raise sqlite3.DatabaseError(f"store format {version}, this SpecScope reads {FORMAT}")
                for statement in _TABLE:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version={FORMAT}")
            except sqlite3.DatabaseError:
                conn.close()
                raise
        _make_private(self.path)
        return conn

    def _put_aside(self, problem: Exception) -> None:
        """An unreadable store: its files are removed and a fresh one is made, with one line saying so."""
        clear_store(self.path)
        self.warning = (f"the suffix-decoding store {self.path} could not be read ({problem}); it was started "
                        "afresh, and what it had learned is gone")

    def replies(self, model: str, limit: int) -> list[list[int]]:
        """The newest `limit` replies learned for `model`, oldest first. Unreadable rows start the store
        afresh (with `warning`), as an unreadable file does."""
        try:
            rows = self._conn.execute("SELECT tokens FROM replies WHERE model = ? ORDER BY id DESC LIMIT ?",
                                      (model, int(limit))).fetchall()
            return [decode(tokens) for (tokens,) in reversed(rows)]
        except (sqlite3.DatabaseError, ValueError) as exc:
            self._conn.close()
            self._put_aside(exc)
            self._conn = self._open()
            return []

    def add(self, model: str, ids, max_replies: int) -> str | None:
        """Learn one finished reply (one transaction), keeping the newest `max_replies` of `model`; the reason,
        in one line, where it could not be written (the reply is still learned for this session)."""
        try:
            with self._conn:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute("INSERT INTO replies (model, digest, tokens) VALUES (?, ?, ?)",
                                   (model, digest(ids), encode(ids)))
                self._conn.execute("DELETE FROM replies WHERE model = ? AND id NOT IN (SELECT id FROM replies "
                                   "WHERE model = ? ORDER BY id DESC LIMIT ?)", (model, model, int(max_replies)))
        except sqlite3.Error as exc:
            return f"the suffix-decoding store {self.path} could not be written ({exc}); this reply is learned " \
                   "for this session only"
        _make_private(self.path)
        return None

    def forget(self, digests: list[str]) -> str | None:
        """Remove the replies named by these digests (a chat deleted from the history); the reason, in one
        line, where they could not be removed."""
        try:
            with self._conn:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany("DELETE FROM replies WHERE digest = ?", [(d,) for d in digests])
        except sqlite3.Error as exc:
            return f"the suffix-decoding store {self.path} could not forget a deleted chat's replies ({exc})"
        return None

    def count(self, model: str) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM replies WHERE model = ?", (model,)).fetchone()[0]

    def close(self) -> None:
        self._conn.close()
