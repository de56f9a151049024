"""A token tree's round event for the GUI tests, made as the engine makes one (engine.core.tree_shape's path_first
and renumbered): nine drafted nodes, depth 3, five leaves.

    text so far ─ a ─ d ─ g          the drafter's tree (original order a b c d e f g h i)
               │    │   └ h
               │    └ e ─ i
               ├ b ─ f
               └ c

`tree_event()` keeps a, d and writes the target's correction “T” (g and h turned down under d); `tree_event(bonus
=True)` keeps a, d, g, a leaf, and adds the bonus “T”.
"""

from __future__ import annotations

import dataclasses

from engine.core.events import RoundVerified, TokenStatus
from engine.core.tree_shape import path_first, renumbered

PIECES = ("a", "b", "c", "d", "e", "f", "g", "h", "i")
PARENTS = (-1, -1, -1, 0, 0, 1, 3, 3, 4)


def tree_event(bonus: bool = False, index: int = 4, record=None) -> RoundVerified:
    """The tree round (module docstring); `record`: a function event → RoundDetail, else none recorded."""
    path = [0, 3, 6] if bonus else [0, 3]
    order = path_first(PARENTS, path)
    pieces = tuple(f" {PIECES[i]}" for i in order)
    ids = tuple(100 + i for i in order)
    n = len(path)
    event = RoundVerified(
        index=index, drafter="draft-model", draft_ids=ids, draft_pieces=pieces, n_accepted=n, target_id=200,
        target_status=TokenStatus.BONUS if bonus else TokenStatus.SUBSTITUTED, target_piece=" T",
        p_target=tuple(0.9 - 0.05 * j if j < n else 0.04 + 0.01 * j for j in range(len(order))),
        p_draft=tuple(0.7 - 0.03 * j for j in range(len(order))), p_target_of_target_id=0.55,
        committed_ids=ids[:n] + (200,), committed_pieces=pieces[:n] + (" T",), draft_seconds=0.004,
        verify_seconds=0.021, elapsed_seconds=1.0, n_committed_total=20, rollback_seconds=0.0005,
        tree_parents=renumbered(PARENTS, order))
    return event if record is None else dataclasses.replace(event, detail=record(event))
