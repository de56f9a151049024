"""Chat history (gui/persistence/store.py, no Qt): rounds as coloured tokens, search, export/import, a reply that survives
SIGKILL of its writer, migration of an older database, and a newer database left untouched."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.core.events import GenerationFinished, RoundVerified, TokenStatus
from engine.core.stats import GenerationStats
from gui.persistence import store as history
from gui.persistence.store import HistoryError, HistoryReadOnlyError, HistoryStore

ROOT = Path(__file__).resolve().parents[3]
A, R, S, B, P = (TokenStatus.ACCEPTED, TokenStatus.REJECTED, TokenStatus.SUBSTITUTED, TokenStatus.BONUS,
                 TokenStatus.PLAIN)


def make_round(index, draft, n_accepted, target, status, committed=None, p_draft=None):
    """A RoundVerified: `draft` and `target` are text pieces; ids are their positions in a toy vocabulary."""
    draft_ids = tuple(100 + i for i in range(len(draft)))
    pieces = tuple(draft[:n_accepted]) + (target,)
    ids = draft_ids[:n_accepted] + (7,)
    committed = len(pieces) if committed is None else committed
    return RoundVerified(
        index=index, drafter="draft-model", draft_ids=draft_ids, draft_pieces=tuple(draft), n_accepted=n_accepted,
        target_id=7, target_status=status, target_piece=target,
        p_target=tuple(0.9 - 0.1 * i for i in range(len(draft))),
        p_draft=p_draft if p_draft is not None else tuple(0.8 for _ in draft),
        p_target_of_target_id=0.6, committed_ids=ids[:committed], committed_pieces=pieces[:committed],
        draft_seconds=0.01, verify_seconds=0.02, elapsed_seconds=0.1 * (index + 1), n_committed_total=0)


def make_stats(tokens=6):
    return GenerationStats(k=4, committed_tokens=tokens, target_passes=3, rounds=3, drafting_rounds=2,
                           drafted_tokens=8, accepted_tokens=5, ttft_seconds=0.1, elapsed_seconds=0.5,
                           draft_seconds=0.1, verify_seconds=0.3, per_position_acceptance=(1.0, 0.5),
                           accept_length_histogram=(0, 1, 1))


ROUNDS = [
    make_round(0, [], 0, "Paris", P),  # prefill: the target alone
    make_round(1, [" is", " the", " big", " city"], 2, " capital", S),  # partial acceptance, 2 ghosts
    make_round(2, [" of", " France"], 2, ".", B),  # all accepted, then a bonus
]
REPLY = "Paris is the capital of France."


@pytest.fixture
def db(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        yield store


def write_reply(db, settings=None):
    cid = db.create_conversation("Geography", {"model": "Qwen/Qwen3-32B", "draft": "Qwen/Qwen3-0.6B",
                                               "method": "draft-model", "k": 4, "sampling": {"temperature": 0}})
    db.add_user_message(cid, "What is the capital of France?")
    mid = db.start_assistant_message(cid, settings or {"method": "draft-model", "k": 4})
    for event in ROUNDS:
        db.append_round(mid, event)
    db.finish_from_event(mid, GenerationFinished(stop_reason="eos", text=REPLY, output_ids=(), stats=make_stats()))
    return cid, mid


def test_rounds_become_tokens_with_ghosts_where_they_were_drafted():
    tokens = history.tokens_from_round(ROUNDS[1])
    assert [(t.text, t.status, t.position) for t in tokens] == [
        (" is", A, 0), (" the", A, 1), (" big", R, 2), (" city", R, 3), (" capital", S, 2)]
    assert tokens[2].p_target == pytest.approx(0.7) and tokens[2].p_draft == 0.8
    assert tokens[-1].p_target == 0.6 and tokens[-1].p_draft is None
    bonus = history.tokens_from_round(ROUNDS[2])
    assert [(t.status, t.position) for t in bonus] == [(A, 0), (A, 1), (B, 2)]
    assert [(t.status, t.position) for t in history.tokens_from_round(ROUNDS[0])] == [(P, None)]
    cut = history.tokens_from_round(make_round(3, [" a", " b", " c"], 1, " d", S, committed=1))
    assert [(t.text, t.status) for t in cut] == [(" a", A)]  # a stop cut the rest: no ghosts, no correction
    one_hot = history.tokens_from_round(make_round(4, [" x"], 0, " y", S, p_draft=(None,)))
    assert [(t.status, t.p_draft) for t in one_hot] == [(R, None), (S, None)]
    assert history.text_of(t for e in ROUNDS for t in history.tokens_from_round(e)) == REPLY


def test_reply_round_trip_keeps_everything_needed_to_render_it(db):
    cid, mid = write_reply(db)
    conversation = db.load_conversation(cid)
    assert conversation.title == "Geography" and conversation.settings["draft"] == "Qwen/Qwen3-0.6B"
    user, reply = conversation.messages
    assert (user.role, user.content) == ("user", "What is the capital of France?")
    assert reply.role == "assistant" and reply.state == "complete" and reply.content == REPLY
    assert reply.stop_reason == "eos" and reply.stats["committed_tokens"] == 6
    assert reply.stats["acceptance_rate"] == pytest.approx(5 / 8)
    assert [r.index for r in reply.rounds] == [0, 1, 2]
    assert reply.rounds[1].meta["n_accepted"] == 2 and reply.rounds[1].meta["drafter"] == "draft-model"
    assert [t.status for t in reply.tokens] == [P, A, A, R, R, S, A, A, B]
    assert reply.tokens == tuple(t for e in ROUNDS for t in history.tokens_from_round(e))
    with pytest.raises(HistoryError, match="finished"):
        db.append_round(mid, ROUNDS[0])


def test_conversations_list_rename_search_delete(db):
    first = db.create_conversation("Cooking")
    db.add_user_message(first, "How long do I boil an egg? Mon CAFÉ est froid.")
    time.sleep(0.01)
    second, mid = write_reply(db)
    assert [c.id for c in db.list_conversations()] == [second, first]  # latest activity first
    assert db.list_conversations()[0].n_messages == 2
    db.rename_conversation(first, "  Eggs\nand coffee ")
    assert db.load_conversation(first).title == "Eggs and coffee"
    hits = db.search("café")  # case-insensitive beyond ASCII
    assert [(h.conversation_id, h.role) for h in hits] == [(first, "user")] and "CAFÉ" in hits[0].snippet
    assert {h.conversation_id for h in db.search("CAPITAL")} == {second}  # the question and the reply
    assert [h.message_id for h in db.search("capital of france")] == [m.id for m in
                                                                      db.load_conversation(second).messages]
    assert db.search("geograph")[0].message_id is None  # the title
    assert db.search("zebra") == [] and db.search("   ") == []
    db.delete_conversation(second)
    assert [c.id for c in db.list_conversations()] == [first]
    assert db._conn.execute("SELECT count(*) FROM rounds").fetchone()[0] == 0  # the rounds went with it
    with pytest.raises(HistoryError, match="no conversation"):
        db.load_conversation(second)
    assert db.integrity_check() == "ok"


def test_export_json_reimports_identically_and_markdown_reads_well(db):
    cid, _ = write_reply(db)
    exported = db.export_json(cid)
    assert json.loads(exported)["format"] == "specscope.conversation"
    copy = db.load_conversation(db.import_json(exported))
    original = db.load_conversation(cid)
    assert copy.title == original.title and copy.settings == original.settings
    for a, b in zip(original.messages, copy.messages, strict=True):
        assert (a.role, a.content, a.state, a.stats, a.stop_reason, a.settings) == \
               (b.role, b.content, b.state, b.stats, b.stop_reason, b.settings)
        assert a.rounds == b.rounds
    with pytest.raises(HistoryError, match="cannot be imported"):
        db.import_json('{"format": "something else"}')
    markdown = db.export_markdown(cid)
    assert markdown.startswith("# Geography\n")
    assert "## You" in markdown and "## Assistant (method draft-model · k 4)" in markdown
    assert REPLY in markdown and "stop: eos" in markdown and "acceptance 62%" in markdown
    assert "~~ big~~~~ city~~ capital" in db.export_markdown(cid, show_rejected=True)


WRITER = textwrap.dedent("""
    import sys
    from engine.core.events import TokenStatus
    from gui.persistence.store import HistoryStore, StoredToken
    store = HistoryStore(sys.argv[1])
    cid = store.create_conversation("Killed mid-reply")
    store.add_user_message(cid, "Count for me")
    mid = store.start_assistant_message(cid)
    print(mid, flush=True)
    i = 0
    while True:
        tokens = [StoredToken(f" w{i}a", TokenStatus.ACCEPTED, i, 0, 0.9, 0.8, 1),
                  StoredToken(f" x{i}", TokenStatus.REJECTED, i, 1, 0.1, 0.7, 2),
                  StoredToken(f" w{i}b", TokenStatus.SUBSTITUTED, i, 1, 0.5, None, 3)]
        store.append_tokens(mid, i, tokens, {"n_accepted": 1})
        print(i, flush=True)  # only after the commit returned
        i += 1
""")


def test_history_survives_sigkill_mid_reply(tmp_path):
    path = tmp_path / "history.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True,
                               env=env, cwd=ROOT)
    try:
        message_id = int(process.stdout.readline())
        acknowledged = -1
        deadline = time.monotonic() + 30
        while acknowledged < 40 and time.monotonic() < deadline:
            acknowledged = int(process.stdout.readline())
        os.kill(process.pid, signal.SIGKILL)  # mid-reply, with no chance to clean up
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    assert acknowledged >= 40 and process.returncode == -signal.SIGKILL
    with HistoryStore(path) as store:
        assert store.integrity_check() == "ok"
        (conversation,) = store.list_conversations()
        user, reply = store.load_conversation(conversation.id).messages
        assert reply.id == message_id and reply.state == "interrupted" and reply.stop_reason == "interrupted"
        indices = [r.index for r in reply.rounds]
        assert indices == list(range(len(indices))) and len(indices) >= acknowledged + 1  # every commit is there
        expected = "".join(f" w{i}a w{i}b" for i in indices)
        assert reply.content == expected  # the partial reply is kept, without its ghosts
        assert [h.message_id for h in store.search(f"w{acknowledged}b")] == [reply.id]
        assert store.recover_interrupted() == []


def plant_v1(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(history.SCHEMA_V1)
    conn.execute("INSERT INTO conversations VALUES (1, 'Old chat', 1.0, 2.0, '{\"model\": \"default\"}')")
    conn.execute("INSERT INTO messages VALUES (1, 1, 'user', 'hello from v1', 1.0)")
    conn.execute("INSERT INTO messages VALUES (2, 1, 'assistant', 'hi, I am old', 1.5)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def test_older_database_is_migrated_not_wiped(tmp_path):
    path = tmp_path / "history.sqlite3"
    plant_v1(path)
    with HistoryStore(path) as store:
        assert store.schema_version == history.SCHEMA_VERSION == 2 and not store.read_only
        old = store.load_conversation(1)
        assert old.settings == {"model": "default"}
        assert [(m.role, m.content, m.state) for m in old.messages] == [
            ("user", "hello from v1", "complete"), ("assistant", "hi, I am old", "complete")]
        assert store.search("OLD")[0].conversation_id == 1
        mid = store.start_assistant_message(1)  # and it takes new-style replies
        store.append_round(mid, ROUNDS[0])
        assert store.finish_assistant_message(mid) == "Paris"
    backup = sqlite3.connect(tmp_path / "history.sqlite3.v1.bak")
    assert backup.execute("PRAGMA user_version").fetchone()[0] == 1
    assert backup.execute("SELECT content FROM messages WHERE id = 1").fetchone()[0] == "hello from v1"
    backup.close()


def test_newer_database_is_opened_read_only_and_left_untouched(tmp_path):
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        write_reply(store)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=DELETE")  # one file to fingerprint
    conn.execute("ALTER TABLE conversations ADD COLUMN pinned INTEGER")  # what a v3 might have added
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    fingerprint = hashlib.sha256(path.read_bytes()).hexdigest()
    with HistoryStore(path) as store:
        assert store.read_only and "newer SpecScope" in store.read_only_reason
        assert store.list_conversations()[0].title == "Geography"  # still readable
        assert store.load_conversation(1).messages[1].content == REPLY
        with pytest.raises(HistoryReadOnlyError, match="read-only"):
            store.create_conversation("new")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fingerprint


def test_foreign_or_damaged_files_are_refused_and_kept(tmp_path):
    foreign = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    with pytest.raises(HistoryError, match="not a SpecScope chat history"):
        HistoryStore(foreign)
    assert sqlite3.connect(foreign).execute("SELECT count(*) FROM notes").fetchone() == (0,)
    damaged = tmp_path / "damaged.sqlite3"
    damaged.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(HistoryError, match="left as it is"):
        HistoryStore(damaged)
    assert damaged.read_bytes() == b"this is not a database at all" * 100


def test_default_location_follows_specscope_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path / "data"))
    with HistoryStore() as store:
        assert store.path == tmp_path / "data" / "history.sqlite3"
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    if os.name == "posix":
        assert (tmp_path / "data" / "history.sqlite3").stat().st_mode & 0o077 == 0


def test_a_long_reply_stays_cheap(db):
    cid = db.create_conversation("Long")
    mid = db.start_assistant_message(cid)
    started = time.perf_counter()
    for i in range(1250):  # 5,000 committed tokens in rounds of 4, plus a ghost each
        db.append_tokens(mid, i, [history.StoredToken(f" tok{i}", A, i, j, 0.91234567, 0.8, 1000 + i)
                                  for j in range(3)]
                         + [history.StoredToken(f" no{i}", R, i, 3, 0.1, 0.6, 5),
                            history.StoredToken(f" end{i}", S, i, 3, 0.5, None, 6)])
    text = db.finish_assistant_message(mid)
    assert text.count(" tok") == 3750 and " no1" not in text
    load_started = time.perf_counter()
    reply = db.load_conversation(cid).messages[0]
    print(f"1250 round commits {load_started - started:.2f} s, load {time.perf_counter() - load_started:.3f} s")
    assert len(reply.tokens) == 6250
    stored = db._conn.execute("SELECT sum(length(tokens)) FROM rounds WHERE message_id = ?", (mid,)).fetchone()[0]
    assert stored / len(reply.tokens) < 36  # bytes per token, its text included
