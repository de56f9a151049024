"""The chat history's tables and their versions (PRAGMA user_version): the first schema, kept verbatim, and
one migration per later version. sqlite3 only; the store (gui.persistence.store) opens the file, backs it up
before a migration and calls `create` and `migrate` here.

Versions: 1 had conversations and plain-text messages; 2 (current) adds per-message settings, stats, state and
the rounds table (one row per round of a reply: its index, its meta and its tokens as compact rows, see
gui.persistence.records). A fresh database is created as version 1 and migrated, so the migration path runs
every time, not only on old installs. Adding a version: bump SCHEMA_VERSION, add its migration to MIGRATIONS,
and a test that opens a database of the version before.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from typing import Iterator

SCHEMA_VERSION = 2

SCHEMA_V1 = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
"""


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    run_script(conn, """
        ALTER TABLE messages ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
        ALTER TABLE messages ADD COLUMN stats TEXT;
        ALTER TABLE messages ADD COLUMN state TEXT NOT NULL DEFAULT 'complete';
        ALTER TABLE messages ADD COLUMN stop_reason TEXT;
        ALTER TABLE messages ADD COLUMN error TEXT;
        ALTER TABLE messages ADD COLUMN finished_at REAL;
        CREATE TABLE rounds (
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            round_index INTEGER NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}',
            tokens TEXT NOT NULL,
            PRIMARY KEY (message_id, round_index)
        ) WITHOUT ROWID;
        CREATE INDEX conversations_by_update ON conversations(updated_at DESC);
    """)


MIGRATIONS = {1: _migrate_1_to_2}  # from version n to n + 1


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Statement by statement: sqlite3's executescript would COMMIT the open transaction first."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def version_of(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def has_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0] > 0


def create(conn: sqlite3.Connection) -> None:
    """The first schema in an empty database (then `migrate` brings it up to date)."""
    with transaction(conn):
        run_script(conn, SCHEMA_V1)
        conn.execute("PRAGMA user_version = 1")


def migrate(conn: sqlite3.Connection) -> None:
    """From the database's version up to SCHEMA_VERSION, one transaction per step."""
    version = version_of(conn)
    while version < SCHEMA_VERSION:
        with transaction(conn):
            MIGRATIONS[version](conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        version += 1
