"""A token tree's shape: ids with each node's parent (`parents[i]`: the index of node i's parent, −1 for a
child of the last committed token; parents come before their children). A chain is −1, 0, 1, ….
engine.core.tree verifies trees; this module is plain Python (events and the GUI read it without torch).
"""

from __future__ import annotations


def node_depths(parents) -> list[int]:
    """Each node's depth (0: a child of the last committed token)."""
    depths: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}'s parent {parent} does not come before it")
        depths.append(0 if parent < 0 else depths[parent] + 1)
    return depths


def children_of(parents) -> dict[int, list[int]]:
    """The children of every node that has some, in index order (the drafter's order of preference); −1: the
    root's."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    return children


def renumbered(parents, nodes: list[int]) -> tuple[int, ...]:
    """The parents of the tree made of `nodes` (old indices, each node's parent among them and before it) in
    their new numbering."""
    new_index = {old: new for new, old in enumerate(nodes)}
    new_index[-1] = -1
    try:
        return tuple(new_index[parents[old]] for old in nodes)
    except KeyError:
        raise ValueError("a node's parent was left out of the tree") from None


def path_first(parents, path: list[int]) -> list[int]:
    """Every node, the kept path first (root to tip), then the others in their order: the order a round event
    lists a tree in, so that its first n_accepted drafted ids are the ones kept."""
    on_path = set(path)
    return list(path) + [i for i in range(len(parents)) if i not in on_path]


def leaves(parents) -> list[int]:
    """The nodes with no child, in index order."""
    has_child = {parent for parent in parents if parent >= 0}
    return [i for i in range(len(parents)) if i not in has_child]


def ghost_line(parents, n_accepted: int) -> list[int]:
    """A round's drafted line below its kept path's tip (the path listed first: nodes 0 … n_accepted − 1): the
    tip's first child, that one's first child, … — what a reply shows as rejected after the kept tokens, as a
    chain's rejected tail.

    >>> ghost_line((-1, 0, 1, 1, -1, 2), 2)
    [2, 5]
    """
    children = children_of(parents)
    line, node = [], n_accepted - 1
    while children.get(node):
        node = children[node][0]
        line.append(node)
    return line
