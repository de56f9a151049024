"""A round's recorded tree in the chat history (issue 23): the store keeps it in the round's meta, a reopened chat
reads it back as the very RoundDetail the engine made, with its rollback time; the JSON export carries it; a
damaged tree is dropped, never an error; and the session's rounds (gui.sessions.rounds.RoundRecord) match the
tokens they became, live and reopened."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.core.events import (Alternatives, GenerationFinished, GenerationStarted, PositionDetail, RoundDetail,
                                TokenStatus)
from engine.core.tokens import fold_round
from gui.persistence.exports import conversation_from_json, conversation_json
from gui.persistence.records import StoredRound, round_event, round_meta, token_row
from gui.persistence.recorder import turns_from_conversation
from gui.persistence.store import HistoryStore
from gui.sessions.session_model import SessionModel
from test_store import ROUNDS, make_stats, REPLY


def tree(m: int, sampled: bool) -> RoundDetail:
    positions = []
    for i in range(m + 1):
        target = Alternatives((7 + i, 8, 9, 10, 11), (0.5, 0.2, 0.1, 0.05, 0.05), ("a", "b", "c", "d", "e"))
        draft = Alternatives((100 + i, 8, 9, 10, 11), (0.6, 0.1, 0.1, 0.1, 0.1), ("x", "b", "c", "d", "e")) \
            if i < m else None
        positions.append(PositionDetail(target, 1.25 + i, draft, 0.3 if sampled and i < m else None,
                                        target if sampled and i == 1 else None))
    return RoundDetail(tuple(positions))


RECORDED = [dataclasses.replace(event, detail=tree(len(event.draft_ids), sampled=i == 1),
                                rollback_seconds=0.004 if event.n_accepted < len(event.draft_ids) else 0.0)
            for i, event in enumerate(ROUNDS)]


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


def test_the_tree_and_the_rollback_time_survive_the_store_and_the_export(db):
    cid = write(db, RECORDED)
    reply = db.load_conversation(cid).messages[-1]
    back = [round_event(stored, 0) for stored in reply.rounds]
    assert [e.detail for e in back] == [e.detail for e in RECORDED]  # probabilities kept to 5 places: exact here
    assert [e.rollback_seconds for e in back] == [e.rollback_seconds for e in RECORDED]
    assert back[1].detail.positions[1].residual is not None and back[1].detail.positions[0].draw == 0.3
    exported = conversation_from_json(conversation_json(db.load_conversation(cid)))
    again = [round_event(stored, 0) for stored in exported.messages[-1].rounds]
    assert [e.detail for e in again] == [e.detail for e in RECORDED]
    assert '"entropy_bits"' in conversation_json(db.load_conversation(cid))


def test_a_round_recorded_without_a_tree_stores_no_detail_and_a_damaged_one_is_dropped():
    plain = round_meta(ROUNDS[1])
    assert "detail" not in plain and "rollback_seconds" not in plain
    meta = round_meta(RECORDED[1])
    assert meta["detail"]["positions"][0]["target"]["pieces"][0] == "a"
    json.dumps(meta)  # the meta is JSON
    rows = [token_row(t) for t in fold_round(RECORDED[1])]
    damaged = StoredRound.from_rows(1, {**meta, "detail": {"positions": [{"target": {"ids": ["x"]}}]}}, rows)
    assert round_event(damaged, 0).detail is None  # unreadable: no tree, the round itself reads back
    assert round_event(damaged, 0).n_accepted == RECORDED[1].n_accepted


def test_reopened_turns_hold_their_rounds_and_each_token_finds_its_round(db):
    cid = write(db, RECORDED)
    turns, tokens = turns_from_conversation(db.load_conversation(cid))
    session = SessionModel()
    session.restore(turns, tokens)
    reply = turns[-1]
    assert [r.index for r in reply.rounds] == [0, 1, 2] and all(r.turn == 1 for r in reply.rounds)
    assert [len(r.serials) for r in reply.rounds] == [len(fold_round(e)) for e in RECORDED]
    for record in reply.rounds:
        for serial in record.serials:
            assert session.round_of(serial) is record and session.tokens[serial].round_index == record.index
    assert reply.rounds[1].detail == RECORDED[1].detail and reply.rounds[1].rollback_seconds == 0.004
    assert session.round_of(len(tokens)) is None and session.round_of(-1) is None


def test_live_rounds_match_their_tokens_and_the_live_list():
    session = SessionModel()
    session.add_user("hi")
    session.start(GenerationStarted(spec_label="draft-model:k=4", method="draft-model", k=4, model="m", draft=None,
                                    device="cpu", dtype="float32", greedy=True, prompt_tokens=3,
                                    reused_prefix_tokens=0, max_new_tokens=32))
    for event in RECORDED:
        tokens = session.apply_round(event)
        record = session.current.rounds[-1]
        assert record.event is event and record.serials == tuple(t.serial for t in tokens)
        assert all(session.round_of(t.serial) is record for t in tokens)
    assert session.live.rounds == session.current.rounds and session.live.rounds[0].turn == 1
    substituted = session.current.rounds[1]
    assert (substituted.n_drafted, substituted.n_accepted) == (4, 2)
    assert substituted.verify_seconds == pytest.approx(0.02 - 0.004)  # the pass alone
    assert substituted.as_dict()["rollback_ms"] == 4.0
    kinds = {session.tokens[s].status for s in substituted.serials}
    assert kinds == {TokenStatus.ACCEPTED, TokenStatus.REJECTED, TokenStatus.SUBSTITUTED}
