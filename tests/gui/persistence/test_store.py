"""Chat history (gui.persistence: store, records, schema, exports; no Qt): rounds stored and read back as the fold's
DisplayTokens, search, export/import (this format and the one before), a reply that survives SIGKILL of its writer,
an older database migrated, a database of this schema written without the store read back, and a newer database
left untouched; a server's reply's rounds revised at its end, in place of those stored."""

from __future__ import annotations

import dataclasses
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
from engine.core.tokens import DisplayToken, fold_round
from engine.host import history_path
from gui.persistence import schema
from gui.persistence.exports import conversation_from_json, conversation_json, conversation_markdown
from gui.persistence.records import StoredRound, round_meta, token_row
from gui.persistence.recorder import turns_from_conversation
from gui.persistence.store import HistoryError, HistoryReadOnlyError, HistoryStore
import revised_events

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


def same_tokens(stored, live) -> bool:
    """Every DisplayToken field equal, the p's to the 4 places the store keeps."""
    if len(stored) != len(live):
        return False
    for a, b in zip(stored, live):
        for f in dataclasses.fields(DisplayToken):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name.startswith(("p_", "replaced_p_")) and x is not None and y is not None:
                if x != pytest.approx(y, abs=1e-4):
                    return False
            elif x != y:
                return False
    return True


def test_a_stored_round_reads_back_as_the_display_tokens_the_fold_made():
    cut = make_round(3, [" a", " b", " c"], 1, " d", S, committed=1)
    one_hot = make_round(4, [" x"], 0, " y", S, p_draft=(None,))
    for event in [*ROUNDS, cut, one_hot]:
        live = fold_round(event)
        stored = StoredRound.from_rows(event.index, round_meta(event), [token_row(t) for t in live])
        assert same_tokens(stored.tokens, live), event.index
    substituted = StoredRound.from_rows(1, round_meta(ROUNDS[1]), [token_row(t) for t in fold_round(ROUNDS[1])])
    assert substituted.tokens[-1].replaced == " big"  # the correction is told its ghost again
    assert not same_tokens(substituted.tokens, fold_round(ROUNDS[2]))


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
    assert same_tokens(reply.tokens, [t for e in ROUNDS for t in fold_round(e)])
    with pytest.raises(HistoryError, match="finished"):
        db.append_round(mid, ROUNDS[0])


def test_a_replys_rounds_revised_replace_every_stored_round_in_one_transaction(db):
    cid = db.create_conversation("Server")
    mid = db.start_assistant_message(cid, {"spec": revised_events.SPEC_LABEL})
    for event in revised_events.plain_rounds():
        db.append_round(mid, event)
    duplicate = dataclasses.replace(revised_events.revised_rounds()[1], index=0)
    with pytest.raises(HistoryError, match="could not be written"):  # two rounds 0: nothing changes
        db.replace_rounds(mid, (*revised_events.revised_rounds(), duplicate))
    assert len(db.load_conversation(cid).messages[0].rounds) == 8
    db.replace_rounds(mid, revised_events.revised_rounds())
    reply = db.load_conversation(cid).messages[0]
    assert [r.index for r in reply.rounds] == [0, 1, 2, 3] and reply.rounds[2].meta["n_drafted"] == 3
    assert [t.status for t in reply.tokens] == [P, A, A, A, B, R, R, R, S, A, A]
    assert same_tokens(reply.tokens, [t for e in revised_events.revised_rounds() for t in fold_round(e)])
    assert [(t.text, t.token_id) for t in reply.tokens[5:8]] == [("", -1)] * 3
    assert db.finish_from_event(mid, revised_events.finished()) == "".join(revised_events.PIECES)
    with pytest.raises(HistoryError, match="finished"):
        db.replace_rounds(mid, revised_events.revised_rounds())
    markdown = conversation_markdown(db.load_conversation(cid), show_rejected=True)
    assert "How~~▯~~~~▯~~~~▯~~ are" in markdown  # a draft the server does not name, struck through


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


def as_format_1(exported: str) -> str:
    """An export as the format before wrote it: a token's round under the name `round`."""
    data = json.loads(exported)
    data["format_version"] = 1
    for message in data["conversation"]["messages"]:
        for r in message["rounds"]:
            r["tokens"] = [{("round" if k == "round_index" else k): v for k, v in t.items()} for t in r["tokens"]]
    return json.dumps(data)


def test_export_json_reimports_identically_also_from_the_format_before_and_markdown_reads_well(db):
    cid, _ = write_reply(db)
    original = db.load_conversation(cid)
    exported = conversation_json(original)
    document = json.loads(exported)
    assert document["format"] == "specscope.conversation" and document["format_version"] == 2
    token = document["conversation"]["messages"][1]["rounds"][1]["tokens"][2]
    assert token == {"text": " big", "status": "rejected", "round_index": 1, "position": 2, "p_target": 0.7,
                     "p_draft": 0.8, "token_id": 102}
    for text in (exported, as_format_1(exported)):
        copy = db.load_conversation(db.add_conversation(conversation_from_json(text)))
        assert copy.id != cid and copy.title == original.title and copy.settings == original.settings
        for a, b in zip(original.messages, copy.messages, strict=True):
            assert (a.role, a.content, a.state, a.stats, a.stop_reason, a.settings) == \
                   (b.role, b.content, b.state, b.stats, b.stop_reason, b.settings)
            assert a.rounds == b.rounds
    with pytest.raises(HistoryError, match="cannot be imported"):
        conversation_from_json('{"format": "something else"}')
    newer = {**document, "format_version": 3}
    with pytest.raises(HistoryError, match="newer SpecScope"):
        conversation_from_json(json.dumps(newer))
    markdown = conversation_markdown(original)
    assert markdown.startswith("# Geography\n")
    assert "## You" in markdown and "## Assistant (method draft-model · k 4)" in markdown
    assert REPLY in markdown and "stop: eos" in markdown and "acceptance 62%" in markdown
    assert "~~ big~~~~ city~~ capital" in conversation_markdown(original, show_rejected=True)


WRITER = textwrap.dedent("""
    import sys
    from engine.core.events import TokenStatus
    from engine.core.tokens import DisplayToken
    from gui.persistence.store import HistoryStore
    store = HistoryStore(sys.argv[1])
    cid = store.create_conversation("Killed mid-reply")
    store.add_user_message(cid, "Count for me")
    mid = store.start_assistant_message(cid)
    print(mid, flush=True)
    i = 0
    while True:
        tokens = [DisplayToken(f" w{i}a", TokenStatus.ACCEPTED, i, 0, 2, 0.9, 0.8, "draft-model", 1),
                  DisplayToken(f" x{i}", TokenStatus.REJECTED, i, 1, 2, 0.1, 0.7, "draft-model", 2),
                  DisplayToken(f" w{i}b", TokenStatus.SUBSTITUTED, i, 1, 2, 0.5, None, "draft-model", 3)]
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
    conn.executescript(schema.SCHEMA_V1)
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
        assert store.schema_version == schema.SCHEMA_VERSION == 2 and not store.read_only
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


def plant_v2(path: Path) -> None:
    """A chat as schema 2 holds it, written with SQL alone (no store, no records): token rows
    [text, status code, position, p_target, p_draft, token id], the round's drafter and length in its meta, and
    an early row without its token id."""
    conn = sqlite3.connect(path)
    conn.executescript(schema.SCHEMA_V1)
    conn.execute("PRAGMA user_version = 1")
    schema.migrate(conn)
    conn.execute("INSERT INTO conversations VALUES (1, 'Stored chat', 1.0, 2.0, '{}')")
    conn.execute("INSERT INTO messages (id, conversation_id, role, content, created_at) "
                 "VALUES (1, 1, 'user', 'Capital of France?', 1.0)")
    conn.execute("INSERT INTO messages (id, conversation_id, role, content, created_at, state, stop_reason) "
                 "VALUES (2, 1, 'assistant', 'Paris is the capital', 1.5, 'complete', 'eos')")
    rounds = [(0, {"drafter": "target", "n_drafted": 0, "n_accepted": 0}, [["Paris", "p", None, 0.6, None]]),
              (1, {"drafter": "draft-model", "n_drafted": 3, "n_accepted": 2},
               [[" is", "a", 0, 0.9, 0.8, 100], [" the", "a", 1, 0.8, 0.8, 101], [" big", "r", 2, 0.7, 0.8, 102],
                [" capital", "s", 2, 0.6, None, 7]])]
    for index, meta, rows in rounds:
        conn.execute("INSERT INTO rounds VALUES (2, ?, ?, ?)", (index, json.dumps(meta), json.dumps(rows)))
    conn.commit()
    conn.close()


def test_a_database_of_this_schema_written_without_the_store_reads_back_as_display_tokens(tmp_path):
    path = tmp_path / "history.sqlite3"
    plant_v2(path)
    with HistoryStore(path) as store:
        assert store.schema_version == 2 and not (tmp_path / "history.sqlite3.v2.bak").exists()
        chat = store.load_conversation(1)
    reply = chat.messages[1]
    assert all(isinstance(t, DisplayToken) for t in reply.tokens)
    assert [(t.text, t.status, t.round_index, t.position, t.draft_length, t.drafter, t.token_id)
            for t in reply.tokens] == [
        ("Paris", P, 0, None, 0, "target", None), (" is", A, 1, 0, 3, "draft-model", 100),
        (" the", A, 1, 1, 3, "draft-model", 101), (" big", R, 1, 2, 3, "draft-model", 102),
        (" capital", S, 1, 2, 3, "draft-model", 7)]
    correction = reply.tokens[-1]
    assert (correction.replaced, correction.replaced_p_target, correction.replaced_p_draft) == (" big", 0.7, 0.8)
    assert all(t.serial is None for t in reply.tokens)
    turns, tokens = turns_from_conversation(chat, first_serial=10)
    assert [t.role for t in turns] == ["user", "assistant"] and turns[1].text == "Paris is the capital"
    assert [t.serial for t in tokens] == list(range(10, 15)) and turns[1].tokens == tokens
    assert [t.text for t in tokens] == [t.text for t in reply.tokens]


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
        assert store.path == tmp_path / "data" / "history.sqlite3" == history_path()
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    if os.name == "posix":
        assert (tmp_path / "data" / "history.sqlite3").stat().st_mode & 0o077 == 0


def test_a_long_reply_stays_cheap(db):
    cid = db.create_conversation("Long")
    mid = db.start_assistant_message(cid)
    started = time.perf_counter()
    for i in range(1250):  # 5,000 committed tokens in rounds of 4, plus a ghost each
        db.append_tokens(mid, i, [DisplayToken(f" tok{i}", A, i, j, 4, 0.91234567, 0.8, "draft-model", 1000 + i)
                                  for j in range(3)]
                         + [DisplayToken(f" no{i}", R, i, 3, 4, 0.1, 0.6, "draft-model", 5),
                            DisplayToken(f" end{i}", S, i, 3, 4, 0.5, None, "draft-model", 6)])
    text = db.finish_assistant_message(mid)
    assert text.count(" tok") == 3750 and " no1" not in text
    load_started = time.perf_counter()
    reply = db.load_conversation(cid).messages[0]
    print(f"1250 round commits {load_started - started:.2f} s, load {time.perf_counter() - load_started:.3f} s")
    assert len(reply.tokens) == 6250
    stored = db._conn.execute("SELECT sum(length(tokens)) FROM rounds WHERE message_id = ?", (mid,)).fetchone()[0]
    assert stored / len(reply.tokens) < 36  # bytes per token, its text included
