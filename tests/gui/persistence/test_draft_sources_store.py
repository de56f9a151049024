"""The draft model's own pieces behind each drafted token (a draft of another tokenizer:
engine.drafters.cross_tokenizer; RoundVerified.draft_sources, DisplayToken.draft_source) in the chat history: the
store keeps them with the tokens, a reopened reply's tokens and rounds have them again (and so its tooltips), the
JSON export and a branch carry them, and a row or an exported token without them (any other drafter, an older
history or export) reads back with None."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.core.events import GenerationFinished
from engine.core.tokens import fold_round
from gui.persistence.exports import conversation_from_json, conversation_json
from gui.persistence.fork import fork_conversation
from gui.persistence.records import StoredRound, round_event, round_meta, token_row
from gui.persistence.recorder import turns_from_conversation
from gui.persistence.store import HistoryStore
from gui.views.chat.token_tooltip import describe_token
from test_store import REPLY, ROUNDS, make_stats

SOURCES = {1: ("i · s", " the", " bi · g", " ci · ty"), 2: (" o · f", " Fr · ance")}
CROSS = [dataclasses.replace(event, draft_sources=SOURCES.get(event.index, ())) for event in ROUNDS]


@pytest.fixture
def db(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        yield store


def write(db, events):
    cid = db.create_conversation("Geography", {"method": "draft-model", "k": 4})
    db.add_user_message(cid, "What is the capital of France?")
    mid = db.start_assistant_message(cid, {"method": "draft-model", "k": 4})
    for event in events:
        db.append_round(mid, event)
    db.finish_from_event(mid, GenerationFinished(stop_reason="eos", text=REPLY, output_ids=(), stats=make_stats()))
    return cid


def sources(tokens) -> list:
    return [t.draft_source for t in tokens]


LIVE = sources(t for event in CROSS for t in fold_round(event))


def test_the_fold_gives_the_pieces_these_tests_look_for():
    assert LIVE.count(None) == 3 and "i · s" in LIVE and " Fr · ance" in LIVE  # the target's own tokens: None


def test_a_reopened_reply_keeps_the_draft_models_pieces_in_its_tokens_rounds_and_tooltips(db):
    cid = write(db, CROSS)
    conversation = db.load_conversation(cid)
    assert sources(conversation.messages[-1].tokens) == LIVE
    assert [round_event(r, 0).draft_sources for r in conversation.messages[-1].rounds] == \
           [e.draft_sources for e in CROSS]
    _, tokens = turns_from_conversation(conversation)
    assert sources(tokens) == LIVE
    ghost = next(t for t in tokens if t.draft_source == " bi · g")
    assert "drafted as the draft model's tokens:  bi · g" in describe_token(ghost)


def test_the_json_export_and_a_branch_carry_them(db):
    cid = write(db, CROSS)
    exported = conversation_json(db.load_conversation(cid))
    token = json.loads(exported)["conversation"]["messages"][1]["rounds"][1]["tokens"][0]
    assert token["draft_source"] == "i · s"
    imported = conversation_from_json(exported)
    assert sources(imported.messages[-1].tokens) == LIVE
    stored_again = db.load_conversation(db.add_conversation(imported))
    assert sources(stored_again.messages[-1].tokens) == LIVE
    branch = db.load_conversation(fork_conversation(db, cid, keep=2))
    assert sources(branch.messages[-1].tokens) == LIVE


def test_rows_and_exports_without_them_read_back_with_none(db):
    cid = write(db, ROUNDS)  # a draft of the target's tokenizer: nothing to keep
    rows = [json.loads(text) for (text,) in db._conn.execute("SELECT tokens FROM rounds")]
    assert {len(row) for stored in rows for row in stored} == {6}  # the row as an older history wrote it
    reply = db.load_conversation(cid).messages[-1]
    assert sources(reply.tokens) == [None] * len(LIVE)
    assert all(round_event(r, 0).draft_sources == () for r in reply.rounds)
    exported = conversation_json(db.load_conversation(cid))
    assert '"draft_source"' not in exported
    assert sources(conversation_from_json(exported).messages[-1].tokens) == [None] * len(LIVE)
    old_rows = [token_row(t)[:6] for t in fold_round(CROSS[1])]
    assert sources(StoredRound.from_rows(1, round_meta(CROSS[1]), old_rows).tokens) == [None] * 5
