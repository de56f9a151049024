"""The round's tree as data (pure, no Qt): one round of a reply as the target saw it, built from its RoundRecord.

`round_tree(record)` gives a `RoundTree`: a title, where the round's time went, in words why it ended, the
acceptance rule it ran under, and its paths. The shape is a list of paths (`RoundTree.paths`): paths[0] is what
the round wrote (the kept drafts, then the target's token); every further path is a branch that leaves it before
its node `fork`. A chain round has at most one branch: the drafted tokens the target turned down, from the first
rejection on. A tree round (RoundVerified.tree_parents) has one path per leaf, each hanging off a drafted node
(`TreePath.parent`) and saying why it ended: gui.sessions.round_branches builds them; the drawing puts them side by
side (gui.views.live.tree_grid).

Each node holds a drafted token's p_target, p_draft, the acceptance probability min(1, p/q) and, when sampling,
the draw u that decided it; the target's top-5 alternatives at its position and its entropy; at a sampled
substitution the top of the residual norm(max(0, p − q)). The words the views show of it (verdicts, rules,
captions, figures) are written here once.

May touch: gui.sessions.rounds (read), engine events, engine.core.sampling's acceptance_probability and
engine.core.methods' labels. Never Qt, never a widget.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.core.errors import ConfigError
from engine.core.events import Alternatives, TokenStatus
from engine.core.methods import method_spec
from engine.core.sampling import acceptance_probability
from engine.core.tree_shape import children_of
from gui.sessions.round_branches import (node_verdict, tree_branches, tree_node_figures, tree_reason,
                                         tree_title_words)
from gui.sessions.rounds import UNNAMED_GHOST, RoundRecord, is_server_step

NOT_RECORDED = "Alternatives were not recorded for this round (Settings: record each round's tree)."
SERVER_STEP_NOTE = "A server's step: the target's alternatives and the drafter's probabilities stay on the server."
GREEDY_RULE = ("Greedy: a drafted token is kept iff it is the target's most likely token (its argmax); at the first "
               "one that is not, the target writes its argmax instead.")
SAMPLED_RULE = ("Sampled: drafted token x is kept iff a uniform draw u < min(1, p(x)/q(x)) (p: the target, q: the "
                "drafter); at the first rejection the target's token is drawn from norm(max(0, p − q)).")
RESIDUAL_CAPTION = "drawn from max(0, p − q)"
TOP_CAPTION = "target's top-5"
ROOT_TEXT = "the text so far"


@dataclass(frozen=True, slots=True)
class Choice:
    """One of the target's alternatives at a position (or of the residual's)."""

    piece: str
    prob: float
    token_id: int
    mark: str = ""  # "chosen": the token the round took here; "drafted": the draft the target turned down; ""


@dataclass(frozen=True, slots=True)
class TreeNode:
    """A token on a path: drafted (kept or turned down) or the target's own, with its figures and the verdict."""

    position: int | None  # the display tokens' position (engine.core.tokens): draft index, n_drafted for a bonus
    piece: str
    status: TokenStatus
    drafted: bool  # a drafted token (else the target's own)
    p_target: float | None
    p_draft: float | None  # None: one-hot (n-gram) for a drafted token, not drafted for the target's own
    acceptance: float | None  # min(1, p_target/p_draft) of a drafted token
    draw: float | None  # sampling: the uniform u that decided it
    verdict: str  # in words: why it was kept, turned down or written
    entropy_bits: float | None
    alternatives: tuple[Choice, ...] = ()  # the target's top-5 here
    residual: tuple[Choice, ...] = ()  # at a sampled substitution: the top of norm(max(0, p − q))
    depth: int | None = None  # a tree round's node: its depth (0: a child of the text so far); None in a chain
    by_server: bool = False  # drafted by a server's own drafter: its p_draft (and so min(1, p/q)) is not said


@dataclass(frozen=True, slots=True)
class TreePath:
    """A line of nodes: the committed path, or a branch off it (the module docstring)."""

    nodes: tuple[TreeNode, ...]
    kind: str  # "committed": what the round wrote; "discarded": drafted tokens thrown away
    fork: int = 0  # a branch leaves the committed path just before its node `fork` (paths[0]: 0)
    parent: int | None = None  # a tree round's path: the drafted node it hangs off (−1: the text so far); None: chain
    ending: str = ""  # a tree round's path: why it ended (gui.sessions.round_branches)
    cut: str = ""  # a tree round's path: where its drafting stopped ("" for the committed path of a correction)


@dataclass(frozen=True, slots=True)
class RoundTree:
    """Everything the round's tree shows of one round."""

    title: str
    times: tuple[tuple[str, float], ...]  # (what, seconds): draft, verify, rollback
    reason: str  # why the round ended, in words
    rule: str  # the acceptance rule it ran under ("" where unknown)
    note: str  # "" or why alternatives are missing
    paths: tuple[TreePath, ...]  # paths[0]: the committed path (see the module docstring)
    is_tree: bool = False  # a tree round: one path per leaf (gui.sessions.round_branches), drawn side by side


def walk(paths: tuple[TreePath, ...]):
    """(path, node) in drawing order: the committed path's nodes, each preceded by the branches that fork before
    it; branches forking after its last node at the end."""
    if not paths:
        return
    main, branches = paths[0], paths[1:]
    for j in range(len(main.nodes) + 1):
        for branch in branches:
            if branch.fork == j or (j == len(main.nodes) and branch.fork > j):
                yield from ((branch, node) for node in branch.nodes)
        if j < len(main.nodes):
            yield main, main.nodes[j]


def ms_text(seconds: float) -> str:
    ms = 1000 * seconds
    return f"{ms:.2f} ms" if ms < 1 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def prob_text(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if value >= 0.001 or value == 0 else f"{value:.1e}"


def piece_text(piece: str) -> str:
    """A token's text, quoted, with its line breaks and tabs visible."""
    return "“" + piece.replace("\n", "⏎").replace("\t", "⇥") + "”"


def position_words(node: TreeNode) -> str:
    if node.depth is not None:
        return f"depth {node.depth + 1}"
    return "plain step" if node.position is None else f"position {node.position + 1}"


def figures(node: TreeNode) -> list[str]:
    """A node's figures, one per line as drawn."""
    out = [f"p_target {prob_text(node.p_target)}"]
    if node.drafted and node.by_server:
        out.append("p_draft — (the server does not say)")
    elif node.drafted:
        out.append("p_draft 1 (one-hot, n-gram)" if node.p_draft is None else f"p_draft {prob_text(node.p_draft)}")
        out.append(f"min(1, p/q) {prob_text(node.acceptance)}")
    if node.verdict:
        out.append(node.verdict)
    if node.entropy_bits is not None:
        out.append(f"entropy {node.entropy_bits:.2f} bits")
    return out


def choices_text(choices: tuple[Choice, ...]) -> str:
    return ", ".join(f"{piece_text(c.piece)} {prob_text(c.prob)}" + (f" ({c.mark})" if c.mark else "")
                     for c in choices)


def drafter_label(name: str) -> str:
    try:
        return method_spec(name).label
    except ConfigError:
        return "the target alone" if name == "target" else name


def _choices(alternatives: Alternatives | None, chosen: int | None, drafted: int | None = None) -> tuple[Choice, ...]:
    if alternatives is None:
        return ()
    return tuple(Choice(piece, prob, token_id, "chosen" if token_id == chosen else
                        "drafted" if token_id == drafted else "")
                 for token_id, prob, piece in zip(alternatives.ids, alternatives.probs, alternatives.pieces))


def _drafted_node(record: RoundRecord, i: int, greedy: bool | None) -> TreeNode:
    """Drafted token i: kept, the first turned down, or one thrown away with it."""
    event, n_accepted = record.event, record.n_accepted
    p_target = event.p_target[i] if i < len(event.p_target) else None
    p_draft = event.p_draft[i] if i < len(event.p_draft) else None
    ratio = acceptance_probability(p_target, p_draft)
    at = record.position_detail(i)
    draw = None if at is None else at.draw
    if i > n_accepted:
        verdict = f"thrown away with position {n_accepted + 1}"
    elif draw is not None:
        verdict = (f"u {prob_text(draw)} < {prob_text(ratio)} ✓ kept" if i < n_accepted
                   else f"u {prob_text(draw)} ≥ {prob_text(ratio)} ✗ turned down")
    elif greedy:
        wanted = at.target.pieces[0] if at is not None and at.target.pieces else event.target_piece
        verdict = ("✓ kept: the target's argmax" if i < n_accepted
                   else f"✗ not the target's argmax ({piece_text(wanted)})")
    else:
        verdict = "✓ kept" if i < n_accepted else "✗ turned down"
    kept, server = i < n_accepted, is_server_step(record)
    piece = event.draft_pieces[i] if i < len(event.draft_pieces) else ""
    unnamed = server and not piece and i < len(event.draft_ids) and event.draft_ids[i] == -1
    return TreeNode(i, UNNAMED_GHOST if unnamed else piece,
                    TokenStatus.ACCEPTED if kept else TokenStatus.REJECTED, True, p_target, p_draft,
                    None if server else ratio, draw, "not named by the server" if unnamed and i == n_accepted
                    else verdict, at.entropy_bits if kept and at is not None else None,
                    _choices(at.target, event.draft_ids[i] if i < len(event.draft_ids) else None)
                    if kept and at is not None else (), by_server=server)


def _target_node(record: RoundRecord, greedy: bool | None) -> TreeNode:
    """The target's own token: the correction, the bonus or the plain step, with its position's alternatives."""
    event, n_accepted = record.event, record.n_accepted
    status = event.target_status
    at = record.position_detail(n_accepted)
    drafted = event.draft_ids[n_accepted] if status is TokenStatus.SUBSTITUTED else None
    if status is TokenStatus.SUBSTITUTED:
        verdict = ("drawn from max(0, p − q)" if at is not None and at.residual is not None
                   else "the target's argmax" if greedy else "the target's correction")
    elif status is TokenStatus.BONUS:
        verdict = ("the target's argmax" if greedy else "drawn from p" if greedy is False
                   else "the target's extra token")
    else:
        verdict = "the target's own step"
    return TreeNode(None if status is TokenStatus.PLAIN else n_accepted, event.target_piece, status, False,
                    event.p_target_of_target_id, None, None, None, verdict,
                    None if at is None else at.entropy_bits,
                    () if at is None else _choices(at.target, event.target_id, drafted),
                    () if at is None else _choices(at.residual, event.target_id))


def _reason(record: RoundRecord, target: TreeNode, rejected: TreeNode | None, greedy: bool | None) -> str:
    """Why the round ended, in words: a plain step, all kept, or where and why the target disagreed."""
    n, m = record.n_accepted, record.n_drafted
    if not m:
        reason = ("Plain step: the prefill round reads the prompt and the target writes the first token."
                  if record.index == 0 else "Plain step: nothing was drafted, so the target wrote one token alone.")
    elif rejected is None:
        reason = (f"All kept: the target agreed with all {m} drafted tokens and added a bonus token "
                  f"{piece_text(target.piece)}.")
    elif is_server_step(record):  # the server names the tokens it kept, not those it turned down
        reason = (f"A server step: its drafter proposed {m} tokens and the server kept {n}"
                  + (f", then wrote {piece_text(target.piece)} of its own" if record.n_committed > n else "")
                  + "; it does not say which tokens it turned down.")
    else:
        why = (f"u {prob_text(rejected.draw)} ≥ min(1, p/q) {prob_text(rejected.acceptance)}"
               if rejected.draw is not None else "not its argmax" if greedy else
               f"p_target {prob_text(rejected.p_target)}")
        wanted = f" (p {prob_text(target.p_target)})" if target.p_target is not None else ""
        reason = (f"The target disagreed at draft position {n + 1} of {m}: the drafter wrote "
                  f"{piece_text(rejected.piece)} ({why}), the target wanted {piece_text(target.piece)}{wanted} "
                  f"instead; " + ("nothing was kept." if n == 0 else f"{n} kept."))
    if record.n_committed < n + 1:
        reason += f" A stop ended the reply inside this round: it wrote {record.n_committed} of its tokens."
    return reason


def round_tree(record: RoundRecord | None) -> RoundTree | None:
    """What the view shows of a round (None: no round)."""
    if record is None:
        return None
    m = record.n_drafted
    detail = record.detail
    draws = [record.position_detail(i).draw for i in range(m) if record.position_detail(i) is not None]
    # a tree round's record keeps no draws (engine.core.loop.verify_tree_pass): greedy or sampled is not told
    greedy = None if detail is None or not m or record.event.is_tree else all(d is None for d in draws)
    target = _target_node(record, greedy)
    server = is_server_step(record)
    network = (("network", record.network_seconds),) if record.network_seconds else ()
    # a server's step has no times of its own to split (the timeline shows its wall time)
    times = () if server else (("draft", record.draft_seconds), *network, ("verify", record.verify_seconds),
                               ("rollback", record.rollback_seconds))
    rule = "" if greedy is None else GREEDY_RULE if greedy else SAMPLED_RULE
    note = "" if detail is not None else SERVER_STEP_NOTE if server else NOT_RECORDED
    head = (f"Round {record.index}" + (" (prefill)" if record.index == 0 else "")
            + f" · {drafter_label(record.drafter)}")
    if record.event.is_tree:
        return RoundTree(f"{head} · {tree_title_words(record)}", times, tree_reason(record, target.piece), rule,
                         note, _tree_paths(record, _tree_target(record, target), greedy), is_tree=True)
    kept = tuple(_drafted_node(record, i, greedy) for i in range(record.n_accepted))
    unwritten = server and record.event.target_id == -1  # a stop cut the step before its own token: not known
    paths = [TreePath(kept + (() if unwritten else (target,)), "committed")]
    turned_down = tuple(_drafted_node(record, i, greedy) for i in range(record.n_accepted, m))
    if turned_down:
        paths.append(TreePath(turned_down, "discarded", fork=len(kept)))
    title = head + (f" · drafted {m}, kept {record.n_accepted}" if m else "")
    reason = _reason(record, target, turned_down[0] if turned_down else None, greedy)
    return RoundTree(title, times, reason, rule, note, tuple(paths))


def _tree_paths(record: RoundRecord, target: TreeNode, greedy: bool | None) -> tuple[TreePath, ...]:
    """A tree round's paths (gui.sessions.round_branches.tree_branches): the kept path ending on `target`, the
    target's token, then each other branch."""
    nodes = [_tree_node(record, i, greedy) for i in range(record.n_drafted)]
    return tuple(TreePath(tuple(nodes[i] for i in branch.nodes) + ((target,) if j == 0 else ()),
                          "discarded" if j else "committed", parent=branch.parent, ending=branch.ending,
                          cut=branch.cut)
                 for j, branch in enumerate(tree_branches(record)))


def _tree_node(record: RoundRecord, i: int, greedy: bool | None) -> TreeNode:
    """Drafted node i of a tree round: its figures, its verdict and, kept, its position's alternatives."""
    event = record.event
    p_target, p_draft, ratio = tree_node_figures(record, i)
    kept = i < record.n_accepted
    at = record.position_detail(i) if kept else None
    return TreeNode(i, event.draft_pieces[i] if i < len(event.draft_pieces) else "",
                    TokenStatus.ACCEPTED if kept else TokenStatus.REJECTED, True, p_target, p_draft, ratio, None,
                    node_verdict(record, i, greedy), None if at is None else at.entropy_bits,
                    () if at is None else _choices(at.target, event.draft_ids[i]), depth=event.depths[i])


def _tree_target(record: RoundRecord, target: TreeNode) -> TreeNode:
    """The target's own token of a tree round, its alternatives marking the first child it turned down."""
    event = record.event
    at = record.position_detail(record.n_accepted)
    turned = children_of(event.tree_parents).get(record.n_accepted - 1, [])
    drafted = event.draft_ids[turned[0]] if turned else None
    verdict = ("the target's correction" if turned else "the target's extra token after a leaf")
    return dataclasses.replace(target, verdict=verdict, depth=record.n_accepted,
                               alternatives=() if at is None else _choices(at.target, event.target_id, drafted))
