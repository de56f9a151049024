"""The round's tree as data (gui.sessions.round_tree), with no Qt: the committed path ends on the target's token,
the turned-down drafts branch off where the target disagreed, and the words say why the round ended."""

import dataclasses
import subprocess
import sys
from pathlib import Path

from engine.core.events import RoundVerified, TokenStatus
from fakes import fake_detail
from gui.sessions.round_tree import GREEDY_RULE, NOT_RECORDED, SAMPLED_RULE, round_tree, walk
from gui.sessions.rounds import RoundRecord

ROOT = Path(__file__).resolve().parents[3]


def record(n_drafted=4, n_accepted=2, detail=True, greedy=True) -> RoundRecord:
    ids = tuple(100 + i for i in range(n_drafted))
    pieces = tuple(f" d{i}" for i in range(n_drafted))
    status = TokenStatus.BONUS if n_accepted == n_drafted else TokenStatus.SUBSTITUTED
    event = RoundVerified(
        index=3, drafter="draft-model", draft_ids=ids, draft_pieces=pieces, n_accepted=n_accepted, target_id=200,
        target_status=status, target_piece=" T", p_target=tuple(0.9 - 0.2 * i for i in range(n_drafted)),
        p_draft=(0.8,) * n_drafted, p_target_of_target_id=0.6, committed_ids=ids[:n_accepted] + (200,),
        committed_pieces=pieces[:n_accepted] + (" T",), draft_seconds=0.002, verify_seconds=0.01,
        elapsed_seconds=1.0, n_committed_total=10)
    if detail:
        event = dataclasses.replace(event, detail=fake_detail(event, greedy))
    return RoundRecord(1, event, ())


def test_the_model_imports_no_qt():
    code = "import sys, gui.sessions.round_tree; assert 'PySide6' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_a_rejection_forks_the_turned_down_drafts_off_the_committed_path():
    tree = round_tree(record())
    committed, branch = tree.paths
    assert [node.piece for node in committed.nodes] == [" d0", " d1", " T"] and committed.kind == "committed"
    assert [node.piece for node in branch.nodes] == [" d2", " d3"] and branch.kind == "discarded"
    assert branch.fork == 2 and committed.nodes[-1].status is TokenStatus.SUBSTITUTED
    order = [node.piece for _, node in walk(tree.paths)]
    assert order == [" d0", " d1", " d2", " d3", " T"]  # the branch is drawn before the node it forks at
    assert tree.rule == GREEDY_RULE and not tree.note
    assert "disagreed at draft position 3 of 4" in tree.reason and "2 kept" in tree.reason
    assert tree.times[0] == ("draft", 0.002)


def test_all_kept_is_one_path_and_an_unrecorded_round_says_so():
    tree = round_tree(record(n_accepted=4, detail=False))
    (path,) = tree.paths
    assert len(path.nodes) == 5 and path.nodes[-1].status is TokenStatus.BONUS
    assert tree.reason.startswith("All kept") and tree.note == NOT_RECORDED and tree.rule == ""
    assert round_tree(None) is None
    assert round_tree(record(greedy=False)).rule == SAMPLED_RULE
