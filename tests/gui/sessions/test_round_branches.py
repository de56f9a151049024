"""A tree round's branches as data (gui.sessions.round_branches through gui.sessions.round_tree, no Qt): the kept
path first, ending on the target's token, then one path per leaf it does not end on, each hanging off the node it
leaves and saying why it ended; a tooltip's words for a token of a tree round; a chain round keeps its two paths."""

from engine.core.events import TokenStatus
from engine.core.tree_shape import leaves
from fakes import fake_detail
from gui.sessions.round_branches import CUT_BUDGET, CUT_DEPTH, UNCHECKED, branch_words, ghost_in_place
from gui.sessions.round_tree import round_tree
from gui.sessions.rounds import RoundRecord
from test_rounds_tree import record as chain_record
from tree_events import tree_event


def tree_record(bonus=False, recorded=True) -> RoundRecord:
    return RoundRecord(1, tree_event(bonus, record=(lambda e: fake_detail(e, True)) if recorded else None), ())


def test_a_tree_round_has_one_path_per_leaf_the_kept_path_first():
    record = tree_record()
    tree = round_tree(record)
    # the kept path ends inside the tree (its tip's children were turned down): then one more path per leaf
    assert tree.is_tree and len(tree.paths[1:]) == len(leaves(record.event.tree_parents)) == 5
    kept = tree.paths[0]
    assert [n.piece for n in kept.nodes] == [" a", " d", " T"] and kept.kind == "committed"
    assert [n.status for n in kept.nodes] == [TokenStatus.ACCEPTED] * 2 + [TokenStatus.SUBSTITUTED]
    assert [n.depth for n in kept.nodes] == [0, 1, 2]
    # the children turned down under the tip stand next to the target's token, then the rest depth first
    branches = [([n.piece for n in p.nodes], p.parent) for p in tree.paths[1:]]
    assert branches == [([" g"], 1), ([" h"], 1), ([" e", " i"], 0), ([" b", " f"], -1), ([" c"], -1)]
    drawn = sorted(n.position for p in tree.paths for n in p.nodes if n.drafted)
    assert drawn == list(range(len(record.event.draft_ids)))  # every node once
    assert "correction" in kept.ending and not kept.cut
    g, e, b = tree.paths[1], tree.paths[3], tree.paths[4]
    assert g.ending.startswith("✗ turned down at “ g” (depth 3)") and g.cut == CUT_DEPTH
    assert "sibling kept at “ e” (depth 2)" in e.ending and e.nodes[1].verdict == UNCHECKED
    assert b.cut == CUT_BUDGET  # a leaf shallower than the tree's deepest: the budget went elsewhere
    assert tree.title.endswith("tree of 9 nodes, depth 3, 5 branches, kept 2")
    assert "turned down 2 drafted children (“ g”, “ h”)" in tree.reason


def test_each_node_carries_its_figures_and_the_kept_ones_their_alternatives():
    record = tree_record()
    tree = round_tree(record)
    event = record.event
    for path in tree.paths:
        for node in (n for n in path.nodes if n.drafted):
            i = node.position
            assert (node.p_target, node.p_draft) == (event.p_target[i], event.p_draft[i])
            assert node.acceptance == min(1.0, event.p_target[i] / event.p_draft[i])
            assert bool(node.alternatives) == (i < event.n_accepted)


def test_a_leaf_kept_whole_ends_on_the_bonus():
    tree = round_tree(tree_record(bonus=True, recorded=False))
    kept = tree.paths[0]
    assert [n.piece for n in kept.nodes] == [" a", " d", " g", " T"] and kept.nodes[-1].status is TokenStatus.BONUS
    assert "bonus" in kept.ending and kept.cut == CUT_DEPTH and tree.reason.startswith("All kept to a leaf")
    assert len(tree.paths) == 5 == len(leaves(tree_record(bonus=True).event.tree_parents))  # one of them is kept
    assert tree.rule == "" and tree.note  # not recorded: said, no rule guessed


def test_a_tooltip_says_which_branch_a_token_came_from():
    record = tree_record()
    assert branch_words(record, 1, True) == "kept path, depth 2 of 3; 1 sibling drafted beside it"
    assert branch_words(record, 6, True).startswith("a branch off the kept path, depth 3 of 3; 1 sibling")
    assert "2 drafted children tried here" in branch_words(record, 2, False)
    assert branch_words(chain_record(), 1, True) is None and branch_words(record, None, False) is None


def test_only_the_line_below_the_tip_stands_where_the_reply_goes_on():
    record = tree_record()  # d's children g (listed first) and h: g, a leaf, is the line the drafter put first
    in_place = [i for i in range(len(record.event.draft_ids)) if ghost_in_place(record, i)]
    assert [record.event.draft_pieces[i] for i in in_place] == [" g"]
    assert all(ghost_in_place(chain_record(), i) for i in range(4))


def test_a_chain_round_is_drawn_as_before():
    tree = round_tree(chain_record())
    assert not tree.is_tree and [p.parent for p in tree.paths] == [None, None]
    assert all(n.depth is None for p in tree.paths for n in p.nodes)
