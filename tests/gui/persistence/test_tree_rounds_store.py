"""A tree round in the chat history: the store keeps its shape (`tree_parents`) in the round's meta, so a reopened
chat, the JSON export read back and a replay read the very tree the engine sent (the Markdown export strikes
through only the drafts turned down where the reply goes on); a round stored before trees (no
tree_parents) reads back as a chain; a stop inside a tree round keeps the tree of the nodes it stored."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.core.events import GenerationFinished
from engine.core.tokens import fold_round
from fakes import fake_detail
from gui.persistence.exports import conversation_from_json, conversation_json, conversation_markdown
from gui.persistence.records import StoredRound, round_event, round_meta, token_row
from gui.persistence.store import HistoryStore
from test_store import ROUNDS, make_stats
from tree_events import tree_event

TREE = tree_event(record=lambda e: fake_detail(e, True))
BONUS = tree_event(bonus=True, index=5)


def stored(event, meta=None) -> StoredRound:
    return StoredRound.from_rows(event.index, round_meta(event) if meta is None else meta,
                                 [token_row(t) for t in fold_round(event)])


def same_round(back, event) -> None:
    for name in ("draft_ids", "draft_pieces", "n_accepted", "target_id", "target_status", "tree_parents",
                 "committed_ids"):
        assert getattr(back, name) == getattr(event, name), name
    assert (back.detail is None) == (event.detail is None)  # its figures kept to 5 places


@pytest.mark.parametrize("event", [TREE, BONUS], ids=["correction", "bonus"])
def test_a_tree_round_reads_back_as_the_tree_it_was(event):
    back = round_event(stored(event), 0)
    same_round(back, event)
    assert back.is_tree and back.depths == event.depths


def test_a_round_stored_before_trees_reads_back_as_a_chain():
    meta = round_meta(TREE)
    assert meta["tree_parents"] == list(TREE.tree_parents)
    old = {key: value for key, value in meta.items() if key != "tree_parents"}
    back = round_event(stored(TREE, old), 0)
    assert back.tree_parents == () and not back.is_tree and back.draft_ids == TREE.draft_ids
    chain = ROUNDS[1]
    assert "tree_parents" not in round_meta(chain) and round_event(stored(chain), 0).tree_parents == ()
    damaged = dict(meta, tree_parents=[3, 0, 1])  # a parent after its child: not a tree
    assert round_event(stored(TREE, damaged), 0).tree_parents == ()


def test_a_stop_inside_a_tree_round_keeps_the_nodes_it_stored():
    cut = dataclasses.replace(TREE, committed_ids=TREE.committed_ids[:1], committed_pieces=TREE.committed_pieces[:1])
    back = round_event(stored(cut), 0)
    assert back.draft_ids == TREE.draft_ids[:1] and back.tree_parents == (-1,)


def test_the_store_and_the_json_export_keep_the_tree(tmp_path):
    with HistoryStore(tmp_path / "history.sqlite3") as db:
        cid = db.create_conversation("Trees", {"method": "draft-model", "k": 3, "tree": 9})
        db.add_user_message(cid, "Grow one.")
        mid = db.start_assistant_message(cid, {"method": "draft-model", "k": 3, "tree": 9})
        for event in (ROUNDS[0], TREE, BONUS):
            db.append_round(mid, event)
        db.finish_from_event(mid, GenerationFinished(stop_reason="eos", text="", output_ids=(), stats=make_stats()))
        conversation = db.load_conversation(cid)
    exported = conversation_from_json(conversation_json(conversation))
    for record in (conversation, exported):
        rounds = record.messages[-1].rounds
        back = [round_event(r, 0) for r in rounds]
        assert [b.tree_parents for b in back] == [(), TREE.tree_parents, BONUS.tree_parents]
        same_round(back[1], TREE)
    assert json.loads(conversation_json(conversation))  # plain JSON
    markdown = conversation_markdown(conversation, show_rejected=True)
    assert "tree 9" in markdown
    # the correction round strikes through the line the drafter put first below the kept tip (g under d), as a
    # chain's rejected tail; its sibling h and the other branches are the tree view's
    assert " a d~~ g~~ T" in markdown and "~~ h~~" not in markdown and "~~ b~~" not in markdown
