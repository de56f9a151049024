"""A tree round's branches as data (pure, no Qt): the paths of gui.sessions.round_tree for a round whose event
drafted a token tree (RoundVerified.tree_parents): the kept path, then one path per leaf it does not end on.

paths[0] is what the round wrote: the kept path (its n_accepted nodes, root to tip) then the target's own token,
which sits one level below the tip. Every other leaf gives one more path: the nodes on its way from the root that
no earlier path holds, hanging off node `TreePath.parent` (−1: the text so far). Leaves come depth first, the kept
child of a node before its siblings, so the nodes the target turned down at the tip stand next to its own token.

`tree_branches` gives them as node indices (a Branch each); gui.sessions.round_tree makes them TreePaths. Each
path says why it ended (`TreePath.ending`): a leaf kept whole (→ the target's bonus), children turned down
under the tip (→ its correction), a branch turned down at a node, or one whose sibling was kept; and where its
drafting stopped (`TreePath.cut`): at the tree's deepest level or, shallower, where the node budget ran out.

May touch: engine events and engine.core.tree_shape (read), engine.core.sampling's acceptance_probability,
gui.sessions.rounds. Never Qt, never a widget.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.sampling import acceptance_probability
from engine.core.tree_shape import children_of, ghost_line, leaves
from gui.sessions.rounds import RoundRecord

CUT_DEPTH = "cut at the tree's depth"
CUT_BUDGET = "cut by the node budget"
TURNED_DOWN = "✗ turned down"
SIBLING_KEPT = "✗ sibling kept"
UNCHECKED = "not checked: below a node not kept"


def tip_of(record: RoundRecord) -> int:
    """The kept path's last node (−1: nothing kept, the text so far)."""
    return record.n_accepted - 1


def node_verdict(record: RoundRecord, i: int, greedy: bool | None) -> str:
    """Why drafted node i was kept, turned down, or never checked."""
    parents, n = record.event.tree_parents, record.n_accepted
    if i < n:
        return "✓ kept: the target's argmax" if greedy else "✓ kept"
    if parents[i] >= n:
        return UNCHECKED
    if parents[i] == tip_of(record):
        return TURNED_DOWN + (": not the target's argmax" if greedy else "")
    return SIBLING_KEPT


def branch_order(record: RoundRecord) -> list[int]:
    """The leaves, depth first, each node's kept child before its other children (module docstring)."""
    parents, n = record.event.tree_parents, record.n_accepted
    children = children_of(parents)
    is_leaf = set(leaves(parents))
    out: list[int] = []
    stack = [-1]
    while stack:
        node = stack.pop()
        if node in is_leaf:
            out.append(node)
        kids = sorted(children.get(node, ()), key=lambda c: (c >= n, c))
        stack.extend(reversed(kids))
    return out


def way_to(parents, leaf: int) -> list[int]:
    """The nodes from the root to `leaf`, root first."""
    way = []
    while leaf >= 0:
        way.append(leaf)
        leaf = parents[leaf]
    return way[::-1]


def leaf_cut(record: RoundRecord, leaf: int) -> str:
    """Where the drafter stopped growing this leaf's branch."""
    depths = record.event.depths
    return CUT_DEPTH if depths[leaf] == max(depths) else CUT_BUDGET


def branch_ending(record: RoundRecord, way: list[int]) -> str:
    """Why a branch (its nodes root to leaf) ended, in words: at its first node not kept, or kept whole."""
    event = record.event
    first = next((i for i in way if i >= record.n_accepted), None)
    if first is None:
        return f"✓ every node kept to this leaf → the target's bonus “{event.target_piece}”"
    verdict = node_verdict(record, first, None)
    return f"{verdict} at “{event.draft_pieces[first]}” (depth {event.depths[first] + 1})"


def tree_title_words(record: RoundRecord) -> str:
    """'tree of 12 nodes, depth 4, 5 branches, kept 3' (the round tree's title)."""
    event = record.event
    depth = max(event.depths) + 1 if event.draft_ids else 0
    return (f"tree of {len(event.draft_ids)} nodes, depth {depth}, {len(leaves(event.tree_parents))} branches, "
            f"kept {record.n_accepted}")


def tree_reason(record: RoundRecord, target_piece: str) -> str:
    """Why a tree round ended, in words: a leaf kept whole, or where the target turned the children down."""
    event, n = record.event, record.n_accepted
    children = children_of(event.tree_parents).get(tip_of(record), [])
    n_leaves = len(leaves(event.tree_parents))
    turned = ", ".join(f"“{event.draft_pieces[c]}”" for c in children)
    them = f"{len(children)} drafted {'child' if len(children) == 1 else 'children'} ({turned})"
    if not children:
        reason = (f"All kept to a leaf: the target agreed with a whole branch ({n} nodes) and added a bonus token "
                  f"“{target_piece}”; the other {n_leaves - 1} branches were turned down.")
    elif not n:
        reason = (f"The target kept none of the {len(event.draft_ids)} drafted nodes: it turned down all "
                  f"{them} at depth 1 and wrote “{target_piece}” instead.")
    else:
        reason = (f"The target kept {n} of {len(event.draft_ids)} drafted nodes, one path of depth {n}; at depth "
                  f"{n + 1} it turned down {them} and wrote “{target_piece}” instead.")
    if record.n_committed < n + 1:
        reason += f" A stop ended the reply inside this round: it wrote {record.n_committed} of its tokens."
    return reason


@dataclass(frozen=True, slots=True)
class Branch:
    """One path of a tree round (module docstring) as node indices: the kept path (the target's token follows it)
    or a branch's own nodes, root side first."""

    nodes: tuple[int, ...]  # indices in the event's draft_ids
    parent: int  # the node it hangs off (−1: the text so far)
    ending: str  # why it ended
    cut: str  # where its drafting stopped ("" for a kept path whose tip's children were turned down)


def tree_branches(record: RoundRecord) -> list[Branch]:
    """The kept path, then one Branch per leaf it does not end on (module docstring)."""
    event, n = record.event, record.n_accepted
    parents = event.tree_parents
    tip = tip_of(record)
    tip_is_leaf = tip >= 0 and tip in leaves(parents)
    ending = (branch_ending(record, list(range(n))) if tip_is_leaf
              else f"✗ its children turned down → the target's correction “{event.target_piece}”")
    out = [Branch(tuple(range(n)), -1, ending, leaf_cut(record, tip) if tip_is_leaf else "")]
    drawn = set(range(n))
    for leaf in branch_order(record):
        if leaf < n:
            continue
        way = way_to(parents, leaf)
        own = [i for i in way if i not in drawn]
        drawn.update(own)
        out.append(Branch(tuple(own), parents[own[0]], branch_ending(record, way), leaf_cut(record, leaf)))
    return out


def tree_node_figures(record: RoundRecord, i: int) -> tuple[float | None, float | None, float | None]:
    """Node i's p_target, p_draft and min(1, p_target/p_draft)."""
    event = record.event
    p_target = event.p_target[i] if i < len(event.p_target) else None
    p_draft = event.p_draft[i] if i < len(event.p_draft) else None
    return p_target, p_draft, acceptance_probability(p_target, p_draft)


def branch_words(record: RoundRecord, position: int | None, drafted: bool) -> str | None:
    """Where a token of a tree round stood, for its tooltip: 'kept path, depth 2 of 4; 3 siblings tried' (None:
    a chain round, or a plain step). `drafted`: a drafted node (else the target's own token)."""
    event = record.event
    if not event.is_tree or position is None:
        return None
    parents, n = event.tree_parents, record.n_accepted
    depth_of = max(event.depths) + 1
    if not drafted:
        tried = len(children_of(parents).get(tip_of(record), []))
        return (f"the target's own token after the kept path, depth {n + 1} of {depth_of + (tried == 0)}; "
                f"{tried} drafted {'child' if tried == 1 else 'children'} tried here")
    if position >= len(parents):
        return None
    siblings = len(children_of(parents).get(parents[position], [])) - 1
    where = "kept path" if position < n else "a branch off the kept path"
    verdict = "" if position < n else "; " + node_verdict(record, position, None).lstrip("✗ ")
    beside = "no sibling" if not siblings else f"{siblings} {'sibling' if siblings == 1 else 'siblings'}"
    return f"{where}, depth {event.depths[position] + 1} of {depth_of}; {beside} drafted beside it{verdict}"


def ghost_in_place(record: RoundRecord, position: int | None) -> bool:
    """Whether a drafted token the target threw away was proposed where the reply goes on (proposed_in_place)."""
    return proposed_in_place(record.event.tree_parents, record.n_accepted, position)


def proposed_in_place(tree_parents, n_accepted: int, position: int | None) -> bool:
    """Whether the drafted node at `position` that the target threw away was proposed where the reply goes on:
    every one of a chain round (no tree_parents); of a tree round, only the line below the kept path's tip
    (engine.core.tree_shape.ghost_line, the ghosts the fold gives; the others branch off elsewhere: the round's
    tree shows them, the text does not)."""
    if not tree_parents or position is None or position >= len(tree_parents):
        return True
    return position in ghost_line(tree_parents, n_accepted)
