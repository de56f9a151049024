"""The history with several windows: one writer per conversation (a live reply is never relabelled
"interrupted" by a second SpecScope), a busy database queues writes instead of blocking or raising and
loses no round, and every file that holds chat text is owner-only."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken
from gui.persistence.exports import conversation_json, write_private
from gui.persistence.fork import branch_recorder
from gui.persistence.recorder import HistoryRecorder, turns_from_conversation
from gui.persistence.records import INTERRUPTED, STREAMING
from gui.persistence.store import HistoryBusyError, HistoryLockedError, HistoryStore

ROOT = Path(__file__).resolve().parents[3]
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes and locks")


def _state(path: Path, message_id: int) -> str:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT state FROM messages WHERE id = ?", (message_id,)).fetchone()[0]


def _tokens(text: str) -> list[DisplayToken]:
    return [DisplayToken(text, TokenStatus.ACCEPTED, 0, 0, 1, 0.9, 0.8, "draft-model", None)]


@posix_only
def test_a_second_store_leaves_a_live_reply_streaming(tmp_path):
    path = tmp_path / "history.sqlite3"
    first = HistoryStore(path)
    conversation = first.create_conversation("live")
    reply = first.start_assistant_message(conversation)
    first.append_tokens(reply, 0, _tokens("Hel"))
    second = HistoryStore(path)  # a second window opening: recovery runs, the reply is live
    assert _state(path, reply) == STREAMING
    assert second.claimed_elsewhere(conversation)
    with pytest.raises(HistoryLockedError, match="another SpecScope window"):
        second.start_assistant_message(conversation)
    first.close()  # the writer is gone: the next store to open finds an orphan and keeps its text
    third = HistoryStore(path)
    assert _state(path, reply) == INTERRUPTED
    assert third.load_conversation(conversation).messages[-1].content == "Hel"
    second.close()
    third.close()


WRITER = textwrap.dedent("""
    import sys, time
    from engine.core.events import TokenStatus
    from engine.core.tokens import DisplayToken
    from gui.persistence.store import HistoryStore
    store = HistoryStore(sys.argv[1])
    conversation = store.create_conversation("other process")
    reply = store.start_assistant_message(conversation)
    store.append_tokens(reply, 0, [DisplayToken("live", TokenStatus.ACCEPTED, 0, 0, 1, 0.9, 0.8, "draft-model", None)])
    print(reply, flush=True)
    time.sleep(120)
""")


@posix_only
def test_another_process_keeps_its_reply_until_it_dies(tmp_path):
    path = tmp_path / "history.sqlite3"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        reply = int(writer.stdout.readline())
        HistoryStore(path).close()
        assert _state(path, reply) == STREAMING  # the other SpecScope is alive: not relabelled
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        HistoryStore(path).close()
        assert _state(path, reply) == INTERRUPTED  # killed: recovered, its round kept
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=30)


@posix_only
def test_a_conversation_live_elsewhere_opens_read_only(tmp_path):
    path = tmp_path / "history.sqlite3"
    first, second = HistoryRecorder(HistoryStore(path)), HistoryRecorder(HistoryStore(path))
    first.user_message("hello", {})
    first.reply_started({})
    second.open(first.conversation_id)
    assert not second.enabled and "another SpecScope window" in second.read_only_reason
    second.user_message("typed in the second window", {})  # goes to a chat of its own
    assert second.enabled and second.conversation_id not in (None, first.conversation_id)
    first.store.close()
    second.store.close()


@posix_only
def test_a_branch_of_a_reply_read_part_way_holds_what_was_read(tmp_path):
    """A reply another window was still writing when this one read it: the branch (a message typed here) keeps the
    rounds that were read, the text the new reply was made from, marked interrupted; the writer's chat goes on."""
    path = tmp_path / "history.sqlite3"
    writer = HistoryStore(path)
    conversation = writer.create_conversation("live")
    writer.add_user_message(conversation, "hello")
    reply = writer.start_assistant_message(conversation)
    writer.append_tokens(reply, 0, _tokens("Hel"))
    reader = HistoryRecorder(HistoryStore(path))
    reader.open(conversation)
    turns, _tokens_read = turns_from_conversation(reader.store.load_conversation(conversation))
    writer.append_tokens(reply, 1, _tokens("lo there"))  # written after the second window read it
    writer.finish_assistant_message(reply)
    branch_recorder(reader, conversation, turns)
    branch = reader.store.load_conversation(reader.conversation_id)
    assert [(m.role, m.content, m.state) for m in branch.messages] == [("user", "hello", "complete"),
                                                                     ("assistant", "Hel", INTERRUPTED)]
    assert reader.enabled and writer.load_conversation(conversation).messages[-1].content == "Hello there"
    writer.close()
    reader.store.close()


def test_a_busy_database_queues_rounds_and_loses_none(tmp_path):
    path = tmp_path / "history.sqlite3"
    recorder = HistoryRecorder(HistoryStore(path))
    recorder.user_message("hello", {})
    recorder.reply_started({})
    reply = recorder.message_id
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    with pytest.raises(HistoryBusyError):
        recorder.store.append_tokens(reply, 0, _tokens("x"))
    for index, text in enumerate(("Hel", "lo")):
        recorder._on_reply(recorder.store.append_tokens, index, _tokens(text))
    assert len(recorder.pending) == 2 and recorder.last_error is None
    blocker.execute("COMMIT")
    blocker.close()
    recorder._on_reply(recorder.store.append_tokens, 2, _tokens("!"))  # the queue goes first, in order
    assert recorder.pending == []
    rounds = recorder.store.load_conversation(recorder.conversation_id).messages[-1].rounds
    assert [r.tokens[0].text for r in rounds] == ["Hel", "lo", "!"]
    recorder.store.close()


def test_a_write_queued_before_its_reply_started_still_lands(tmp_path):
    path = tmp_path / "history.sqlite3"
    recorder = HistoryRecorder(HistoryStore(path))
    recorder.user_message("hello", {})
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    recorder.reply_started({})  # queued: its id is not known yet
    recorder._on_reply(recorder.store.append_tokens, 0, _tokens("late"))
    assert recorder.message_id is None and len(recorder.pending) == 2
    blocker.execute("COMMIT")
    blocker.close()
    assert recorder.flush()
    reply = recorder.store.load_conversation(recorder.conversation_id).messages[-1]
    assert reply.id == recorder.message_id and reply.rounds[0].tokens[0].text == "late"
    recorder.store.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix_only
def test_every_file_with_chat_text_is_owner_only(tmp_path):
    path = tmp_path / "history.sqlite3"
    previous = os.umask(0o022)
    try:
        store = HistoryStore(path)
        conversation = store.create_conversation("private")
        store.add_user_message(conversation, "secret")
        files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}
        export = tmp_path / "chat.json"
        write_private(export, conversation_json(store.load_conversation(conversation)))
        assert _mode(export) == 0o600 and "secret" in export.read_text()
        store.close()
    finally:
        os.umask(previous)


@posix_only
def test_the_migration_backup_is_owner_only(tmp_path):
    from gui.persistence.schema import SCHEMA_V1
    path = tmp_path / "history.sqlite3"
    previous = os.umask(0o022)
    try:
        with sqlite3.connect(path) as conn:
            conn.executescript(SCHEMA_V1)
            conn.execute("PRAGMA user_version = 1")
        HistoryStore(path).close()
        backup = path.with_name(path.name + ".v1.bak")
        assert backup.exists() and _mode(backup) == 0o600 and _mode(path) == 0o600
    finally:
        os.umask(previous)
