"""Cleared with the history: deleting a chat (or a reply) makes suffix decoding's store beside the history
forget the replies it learned from it, by their committed token ids; a store that was never made is not made.
The app's history (gui.persistence.user_history) is wired so; a HistoryStore tells its `replies_deleted`."""

from __future__ import annotations

from engine.drafters.suffix_store import STORE_NAME, SuffixStore
from gui.persistence.store import HistoryStore
from gui.persistence.user_history import open_user_history
from test_store import ROUNDS, make_stats


def reply_ids() -> list[int]:
    """The ids ROUNDS commit (the rejected ghosts are no part of the reply)."""
    return [i for r in ROUNDS for i in r.committed_ids]


def write_chat(db) -> tuple[int, int]:
    cid = db.create_conversation("Geography")
    db.add_user_message(cid, "What is the capital of France?")
    mid = db.start_assistant_message(cid)
    for event in ROUNDS:
        db.append_round(mid, event)
    db.finish_assistant_message(mid, stats=make_stats().as_dict(), stop_reason="eos")
    return cid, mid


def learned(folder) -> list[list[int]]:
    store = SuffixStore(folder / STORE_NAME)
    try:
        return store.replies("m", 100)
    finally:
        store.close()


def test_deleting_a_chat_forgets_what_was_learned_from_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path))
    with open_user_history() as db:  # the app's: in the data folder
        kept, _ = write_chat(db)
        gone, _ = write_chat(db)
        store = SuffixStore(tmp_path / STORE_NAME)
        store.add("m", reply_ids(), 100)  # learned from both chats (the same reply)
        store.add("m", reply_ids(), 100)
        store.add("m", [1, 2, 3], 100)  # another reply
        store.close()
        db.delete_conversation(gone)
        assert learned(tmp_path) == [[1, 2, 3]]
        assert [c.id for c in db.list_conversations()] == [kept]


def test_deleting_a_reply_forgets_it_and_no_store_is_made(tmp_path):
    with open_user_history(tmp_path / "history.sqlite3") as db:
        _, mid = write_chat(db)
        db.delete_message(mid)
        assert not (tmp_path / STORE_NAME).exists()  # learning was never on: nothing to forget, nothing made
        _, mid = write_chat(db)
        store = SuffixStore(tmp_path / STORE_NAME)
        store.add("m", reply_ids(), 100)
        store.close()
        db.delete_message(mid)
        assert learned(tmp_path) == []


def test_a_store_tells_which_replies_were_deleted(tmp_path):
    told: list[list[list[int]]] = []
    with HistoryStore(tmp_path / "history.sqlite3", replies_deleted=told.append) as db:
        cid, mid = write_chat(db)
        db.delete_message(mid)
        assert told == [[reply_ids()]]
        db.delete_conversation(cid)  # its reply is gone already: only the user's message was left
        assert told == [[reply_ids()], []]
    with HistoryStore(tmp_path / "history.sqlite3") as db:  # told nobody: deleting still works
        cid, _ = write_chat(db)
        db.delete_conversation(cid)
        assert db.list_conversations() == []
    assert not (tmp_path / STORE_NAME).exists()
