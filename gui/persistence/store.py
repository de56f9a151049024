"""Chat history in SQLite: conversations, messages, and every round of every reply with its tokens coloured
as they were made (accepted, rejected ghosts, substituted, bonus), so that a conversation re-renders as it
was. Pure Python (sqlite3); no Qt. The tables and their versions are gui.persistence.schema's; what is read
back are gui.persistence.records' plain records, the tokens engine.core.tokens' own DisplayTokens (0-based
positions as they are); exports to files are gui.persistence.exports'. Touches only the database file (and its
backup copy on migration).

Where: engine.host.history_path() (`<data folder>/history.sqlite3`; SPECSCOPE_DATA_DIR overrides the folder).
Rows are read by column name (sqlite3.Row).

Durability: WAL journal, `synchronous=NORMAL`, one short transaction per write. Each round of a reply is its
own commit, so a crash or SIGKILL mid-reply loses at most the round being written; everything committed is
there on the next start (NORMAL is durable against a process crash; against a power cut the last commits may
be lost, never the database).

Partial replies are kept: a reply whose writer died is found in state "streaming" when the database is next
opened (by a writable store), turned into "interrupted", and its text rebuilt from the rounds it committed.
The GUI shows it with an "interrupted" mark; nothing is thrown away.

Several windows: one writer per conversation. A store `claim`s a conversation before writing a reply into it
(gui.persistence.writer_locks: an OS file lock, released when the writer ends or dies), so a second
SpecScope never relabels a reply that is still streaming in another one, and can tell a conversation that
is live elsewhere (`claimed_elsewhere`) to open it read-only. A database another process keeps busy makes a
write fail after BUSY_TIMEOUT_S with HistoryBusyError (the GUI thread never waits longer); the recorder
(gui.persistence.recorder) keeps such writes and replays them when the database frees.

Privacy: the database, its -wal/-shm files, the locks and the migration backup are created owner-only
(gui.persistence.private_files). Deleting a conversation or a reply tells `replies_deleted` (a constructor
parameter) the committed token ids of each reply deleted: the app's store (gui.persistence.user_history) has
suffix decoding's store forget them.

Versions: an older database is migrated in place after a backup copy (`history.sqlite3.v<version>.bak`); a
database from a newer SpecScope is opened read-only with a message saying so, and never changed or wiped.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from engine.core.tokens import DisplayToken, committed_text, fold_round
from engine.host import history_path, owner_only
from gui.persistence import schema
from gui.persistence.private_files import make_private
from gui.persistence.records import (COMPLETE, INTERRUPTED, ROLES, STREAMING, ConversationRecord,
                                     ConversationSummary, SearchHit, StoredMessage, StoredRound, round_meta,
                                     token_row)
from gui.persistence.writer_locks import ConversationLocks

RepliesDeleted = Callable[[list[list[int]]], object]  # the committed token ids of each assistant reply deleted


class HistoryError(Exception):
    """The history database cannot be used as asked; the text is meant for the user."""


class HistoryReadOnlyError(HistoryError):
    """A write to a history opened read-only (written by a newer SpecScope)."""


class HistoryBusyError(HistoryError):
    """Another process holds the database's write lock (longer than BUSY_TIMEOUT_S): try the write again."""


class HistoryLockedError(HistoryError):
    """The conversation is being written by another SpecScope (its writer lock is held)."""


BUSY_TIMEOUT_S = 0.25  # the longest a write waits for another process's lock (it runs on the GUI thread)
MESSAGE_COLUMNS = ("id, conversation_id, role, content, state, created_at, finished_at, settings, stats, "
                   "stop_reason, error")


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _loads(text, default=None):
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def _contains(haystack, needle) -> int:
    return int(haystack is not None and needle in str(haystack).casefold())


def _reply_text(rounds: Iterable[StoredRound]) -> str:
    """A reply's text: what its stored rounds committed."""
    return committed_text(t for r in rounds for t in r.tokens)


def _stored_message(row: sqlite3.Row, rounds: tuple[StoredRound, ...]) -> StoredMessage:
    """A messages row (MESSAGE_COLUMNS) read back; a reply cut short reads as what its rounds committed."""
    cut_short = row["state"] != COMPLETE and rounds
    return StoredMessage(
        id=row["id"], conversation_id=row["conversation_id"], role=row["role"],
        content=_reply_text(rounds) if cut_short else row["content"], state=row["state"],
        created_at=row["created_at"], finished_at=row["finished_at"], settings=_loads(row["settings"], {}),
        stats=_loads(row["stats"]), stop_reason=row["stop_reason"], error=row["error"], rounds=rounds)


class HistoryStore:
    """The chat history. Thread-safe (one connection behind a lock); close() it, or use it as a context
    manager. `read_only` is True (with `read_only_reason`) for a database from a newer SpecScope.
    `replies_deleted` is told the committed token ids of each assistant reply deleted (after the deletion)."""

    def __init__(self, path: str | os.PathLike | None = None, *, recover: bool = True,
                 replies_deleted: RepliesDeleted | None = None) -> None:
        self.path = Path(path) if path is not None else history_path()
        self.read_only = False
        self.read_only_reason: str | None = None
        self._replies_deleted = replies_deleted
        self._lock = threading.RLock()
        self._writer_locks = ConversationLocks(self.path)
        with owner_only():
            self._conn = self._open()
        make_private(*self.private_files())
        if recover and not self.read_only:
            try:
                self.recover_interrupted()
            except HistoryBusyError:  # another SpecScope is writing: its replies are live; next start retries
                pass

    def private_files(self) -> list[Path]:
        """The database and the files beside it that hold chat text."""
        return [self.path, *(self.path.with_name(self.path.name + suffix) for suffix in ("-wal", "-shm")),
                *self.path.parent.glob(f"{self.path.name}.v*.bak")]

    # -- opening, versions, migrations
    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:  # the data folder is a file, or can't be made here: no history this session
            raise HistoryError(f"its folder {self.path.parent} can't be made ({exc.strerror or exc}), so nothing "
                               "is saved this session") from None
        try:
            conn = self._connect(read_only=False)
            version = schema.version_of(conn)
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"the chat history {self.path} cannot be opened ({exc}); it was left as it is") \
                from None
        if version > schema.SCHEMA_VERSION:
            conn.close()
            self.read_only = True
            self.read_only_reason = (
                f"This chat history was written by a newer SpecScope (format {version}; this version knows up "
                f"to {schema.SCHEMA_VERSION}), so it is open read-only and nothing in it is changed. Update SpecScope "
                "to add to it.")
            return self._connect(read_only=True)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            if version == 0:
                if schema.has_tables(conn):
                    conn.close()
                    raise HistoryError(f"{self.path} is not a SpecScope chat history (it has other tables); it "
                                       "was left as it is")
                schema.create(conn)
            elif version < schema.SCHEMA_VERSION:
                self._backup(conn, version)
            schema.migrate(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise HistoryError(f"the chat history {self.path} could not be upgraded ({exc}); it was left as it "
                               "is") from None
        return conn

    def _connect(self, *, read_only: bool) -> sqlite3.Connection:
        if read_only:
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        else:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=BUSY_TIMEOUT_S)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        if not read_only:
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.create_function("specscope_contains", 2, _contains, deterministic=True)
        return conn

    def _backup(self, conn: sqlite3.Connection, version: int) -> None:
        target = self.path.with_name(f"{self.path.name}.v{version}.bak")
        if target.exists():
            return
        with owner_only():
            backup = sqlite3.connect(target)
            try:
                conn.backup(backup)
            finally:
                backup.close()
        make_private(target)

    @property
    def schema_version(self) -> int:
        with self._lock:
            return schema.version_of(self._conn)

    def close(self) -> None:
        with self._lock:
            self._writer_locks.release_all()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        make_private(*self.private_files())

    # -- one writer per conversation (gui.persistence.writer_locks)
    def claim(self, conversation_id: int) -> bool:
        """Become the one writer of a conversation (until release/close, or this process ends). False when
        another SpecScope (or another store) is writing it."""
        with self._lock:
            return self._writer_locks.claim(conversation_id)

    def release(self, conversation_id: int | None) -> None:
        with self._lock:
            self._writer_locks.release(conversation_id)

    def claimed_elsewhere(self, conversation_id: int) -> bool:
        """Whether another writer (another window, another SpecScope) holds the conversation now."""
        with self._lock:
            return self._writer_locks.held_elsewhere(conversation_id)

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def integrity_check(self) -> str:
        with self._lock:
            return self._conn.execute("PRAGMA integrity_check").fetchone()[0]

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise HistoryReadOnlyError(self.read_only_reason)
        with self._lock:
            if self._conn is None:
                raise HistoryError("the chat history is closed")
            try:
                with schema.transaction(self._conn):
                    yield self._conn
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise HistoryBusyError(f"the chat history is busy (another SpecScope is writing it): {exc}") \
                        from None
                raise HistoryError(f"the chat history could not be written ({exc})") from None
            except sqlite3.DatabaseError as exc:
                raise HistoryError(f"the chat history could not be written ({exc})") from None

    def _read(self) -> sqlite3.Connection:
        if self._conn is None:
            raise HistoryError("the chat history is closed")
        return self._conn

    # -- conversations
    def create_conversation(self, title: str = "New chat", settings: dict | None = None) -> int:
        now = time.time()
        with self._write() as conn:
            cursor = conn.execute("INSERT INTO conversations (title, created_at, updated_at, settings) "
                                  "VALUES (?, ?, ?, ?)", (_title(title), now, now, _dumps(settings or {})))
            return cursor.lastrowid

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        with self._write() as conn:
            _require(conn.execute("UPDATE conversations SET title = ? WHERE id = ?",
                                  (_title(title), conversation_id)), conversation_id)

    def update_conversation_settings(self, conversation_id: int, settings: dict) -> None:
        """The conversation's settings (model, draft, method, k, sampling): a JSON-ready dict."""
        with self._write() as conn:
            _require(conn.execute("UPDATE conversations SET settings = ?, updated_at = ? WHERE id = ?",
                                  (_dumps(settings), time.time(), conversation_id)), conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        """The conversation; `replies_deleted` is told its replies."""
        with self._write() as conn:
            replies = self._reply_ids(conn, "conversation_id", conversation_id)
            conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        self._tell_deleted(replies)

    def _reply_ids(self, conn: sqlite3.Connection, column: str, value: int) -> list[list[int]]:
        """The committed token ids of each assistant reply whose `column` (id, conversation_id) is `value`."""
        rows = conn.execute(f"SELECT id FROM messages WHERE {column} = ? AND role = 'assistant'", (value,)).fetchall()
        return [[t.token_id for r in self._rounds(conn, row["id"]) for t in r.tokens
                 if t.committed and t.token_id is not None] for row in rows]

    def _tell_deleted(self, replies: list[list[int]]) -> None:
        if self._replies_deleted is not None:
            self._replies_deleted(replies)

    def list_conversations(self, limit: int | None = None, offset: int = 0) -> list[ConversationSummary]:
        """Newest activity first."""
        with self._lock:
            rows = self._read().execute(
                "SELECT c.id, c.title, c.created_at, c.updated_at, c.settings, "
                "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) AS n_messages "
                "FROM conversations c ORDER BY c.updated_at DESC, c.id DESC LIMIT ? OFFSET ?",
                (-1 if limit is None else limit, offset)).fetchall()
        return [ConversationSummary(r["id"], r["title"], r["created_at"], r["updated_at"], _loads(r["settings"], {}),
                                    r["n_messages"]) for r in rows]

    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Conversations whose title or messages contain `text` (case-insensitive, any language), newest
        first; one hit per matching message with a snippet around the first match."""
        needle = (text or "").strip().casefold()
        if not needle:
            return []
        with self._lock:
            conn = self._read()
            titles = conn.execute(
                "SELECT id, title FROM conversations WHERE specscope_contains(title, ?) "
                "ORDER BY updated_at DESC, id DESC LIMIT ?", (needle, limit)).fetchall()
            messages = conn.execute(
                "SELECT m.conversation_id, c.title, m.id, m.role, m.content FROM messages m "
                "JOIN conversations c ON c.id = m.conversation_id WHERE specscope_contains(m.content, ?) "
                "ORDER BY c.updated_at DESC, c.id DESC, m.id LIMIT ?", (needle, limit)).fetchall()
        hits = [SearchHit(r["id"], r["title"], None, None, r["title"]) for r in titles]
        hits += [SearchHit(r["conversation_id"], r["title"], r["id"], r["role"], _snippet(r["content"], needle))
                 for r in messages]
        return hits[:limit]

    # -- messages
    def add_message(self, conversation_id: int, role: str, content: str, settings: dict | None = None) -> int:
        """A finished message (user or system text)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        now = time.time()
        with self._write() as conn:
            cursor = conn.execute(
                "INSERT INTO messages (conversation_id, role, content, created_at, settings, state, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, now, _dumps(settings or {}), COMPLETE, now))
            conn.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
            return cursor.lastrowid

    def add_user_message(self, conversation_id: int, content: str, settings: dict | None = None) -> int:
        return self.add_message(conversation_id, "user", content, settings)

    def start_assistant_message(self, conversation_id: int, settings: dict | None = None) -> int:
        """An empty reply in state "streaming"; rounds are appended as they come. This store claims the
        conversation first (HistoryLockedError when another writer holds it)."""
        if not self.claim(conversation_id):
            raise HistoryLockedError("this chat is being written by another SpecScope window; it is read-only here")
        now = time.time()
        with self._write() as conn:
            cursor = conn.execute(
                "INSERT INTO messages (conversation_id, role, content, created_at, settings, state) "
                "VALUES (?, 'assistant', '', ?, ?, ?)", (conversation_id, now, _dumps(settings or {}), STREAMING))
            conn.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
            return cursor.lastrowid

    def append_round(self, message_id: int, event) -> None:
        """Store one `engine.core.events.RoundVerified` of a streaming reply (its own short transaction)."""
        self.append_tokens(message_id, event.index, fold_round(event), round_meta(event))

    def append_tokens(self, message_id: int, round_index: int, tokens: Iterable[DisplayToken],
                      meta: dict | None = None) -> None:
        """The lower-level form of append_round: one round's tokens (their round index, drafter and draft
        length are the round's: `round_index` and `meta`). Re-sending a round replaces it."""
        rows = _dumps([token_row(t) for t in tokens])
        with self._write() as conn:
            _require_unfinished(conn, message_id)
            conn.execute("INSERT OR REPLACE INTO rounds (message_id, round_index, meta, tokens) VALUES (?, ?, ?, ?)",
                         (message_id, round_index, _dumps(meta or {}), rows))

    def replace_rounds(self, message_id: int, events) -> None:
        """A streaming reply's rounds as they really were (RoundsRevised.rounds), in place of all it has stored."""
        rows = [(message_id, e.index, _dumps(round_meta(e)), _dumps([token_row(t) for t in fold_round(e)]))
                for e in events]
        with self._write() as conn:
            _require_unfinished(conn, message_id)
            conn.execute("DELETE FROM rounds WHERE message_id = ?", (message_id,))
            conn.executemany("INSERT INTO rounds (message_id, round_index, meta, tokens) VALUES (?, ?, ?, ?)", rows)

    def finish_assistant_message(self, message_id: int, *, stats: dict | None = None, stop_reason: str | None = None,
                                 error: str | None = None, state: str = COMPLETE) -> str:
        """Close a reply: its text is rebuilt from the stored rounds. Returns that text."""
        if state not in (COMPLETE, INTERRUPTED):
            raise ValueError("state must be complete or interrupted")
        now = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                raise HistoryError(f"there is no message {message_id}")
            content = _reply_text(self._rounds(conn, message_id))
            conn.execute("UPDATE messages SET content = ?, state = ?, stats = ?, stop_reason = ?, error = ?, "
                         "finished_at = ? WHERE id = ?",
                         (content, state, None if stats is None else _dumps(stats), stop_reason, error, now,
                          message_id))
            conn.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, row["conversation_id"]))
            return content

    def finish_from_event(self, message_id: int, finished) -> str:
        """Close a reply from `engine.core.events.GenerationFinished` (stats, stop reason, error)."""
        return self.finish_assistant_message(message_id, stats=finished.stats.as_dict(),
                                             stop_reason=finished.stop_reason, error=finished.error)

    def recover_interrupted(self) -> list[int]:
        """Replies left "streaming" by a writer that died: mark them "interrupted" with the text of the rounds
        they committed. Returns their ids."""
        with self._write() as conn:
            rows = conn.execute("SELECT id, conversation_id FROM messages WHERE state = ?", (STREAMING,)).fetchall()
            # a reply whose conversation has a live writer (here or in another SpecScope) is still streaming
            ids = [row["id"] for row in rows if not self._writer_locks.held_here(row["conversation_id"])
                   and not self.claimed_elsewhere(row["conversation_id"])]
            for message_id in ids:
                content = _reply_text(self._rounds(conn, message_id))
                conn.execute("UPDATE messages SET state = ?, content = ?, stop_reason = 'interrupted' WHERE id = ?",
                             (INTERRUPTED, content, message_id))
            return ids

    def delete_message(self, message_id: int) -> None:
        with self._write() as conn:
            replies = self._reply_ids(conn, "id", message_id)
            conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        self._tell_deleted(replies)

    # -- reading back
    @staticmethod
    def _rounds(conn: sqlite3.Connection, message_id: int) -> list[StoredRound]:
        rows = conn.execute("SELECT round_index, meta, tokens FROM rounds WHERE message_id = ? ORDER BY round_index",
                            (message_id,)).fetchall()
        return [StoredRound.from_rows(row["round_index"], _loads(row["meta"], {}), _loads(row["tokens"], []))
                for row in rows]

    def load_conversation(self, conversation_id: int) -> ConversationRecord:
        """Everything needed to re-render a conversation, coloured."""
        with self._lock:
            conn = self._read()
            row = conn.execute("SELECT id, title, created_at, updated_at, settings FROM conversations WHERE id = ?",
                               (conversation_id,)).fetchone()
            if row is None:
                raise HistoryError(f"there is no conversation {conversation_id}")
            rows = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY id",
                                (conversation_id,)).fetchall()
            messages = tuple(_stored_message(m, tuple(self._rounds(conn, m["id"])) if m["role"] == "assistant" else ())
                             for m in rows)
        return ConversationRecord(row["id"], row["title"], row["created_at"], row["updated_at"],
                                  _loads(row["settings"], {}), messages)

    def add_conversation(self, record: ConversationRecord) -> int:
        """A copy of `record` (an import: gui.persistence.exports) as a new conversation, in one transaction;
        returns its id. A reply that was still streaming is kept as interrupted."""
        with self._write() as conn:
            cid = conn.execute("INSERT INTO conversations (title, created_at, updated_at, settings) VALUES (?,?,?,?)",
                               (_title(record.title), record.created_at, record.updated_at,
                                _dumps(record.settings or {}))).lastrowid
            for m in record.messages:
                if m.role not in ROLES:
                    raise HistoryError(f"a message has the unknown role {m.role!r}")
                state = m.state if m.state in (COMPLETE, INTERRUPTED) else INTERRUPTED
                mid = conn.execute(
                    "INSERT INTO messages (conversation_id, role, content, created_at, settings, stats, state, "
                    "stop_reason, error, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (cid, m.role, m.content, m.created_at, _dumps(m.settings or {}),
                     None if m.stats is None else _dumps(m.stats), state, m.stop_reason, m.error,
                     m.finished_at)).lastrowid
                for r in m.rounds:
                    conn.execute("INSERT INTO rounds (message_id, round_index, meta, tokens) VALUES (?,?,?,?)",
                                 (mid, r.index, _dumps(r.meta or {}), _dumps([token_row(t) for t in r.tokens])))
            return cid


# ---------------------------------------------------------------- helpers

def _require_unfinished(conn: sqlite3.Connection, message_id: int) -> None:  # a reply that still takes rounds
    row = conn.execute("SELECT state FROM messages WHERE id = ?", (message_id,)).fetchone()
    if row is None or row["state"] == COMPLETE:
        raise HistoryError(f"there is no message {message_id}" if row is None else
                           f"message {message_id} is finished; start a new reply to add rounds")


def _require(cursor: sqlite3.Cursor, conversation_id: int) -> None:
    if cursor.rowcount == 0:
        raise HistoryError(f"there is no conversation {conversation_id}")


def _title(title: str) -> str:
    title = " ".join((title or "").split())
    return title[:200] or "New chat"


def _snippet(content: str, needle: str, width: int = 60) -> str:
    at = content.casefold().find(needle)
    if at < 0:
        return content[: 2 * width]
    start, end = max(0, at - width), min(len(content), at + len(needle) + width)
    text = " ".join(content[start:end].split())
    return ("…" if start else "") + text + ("…" if end < len(content) else "")
