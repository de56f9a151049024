"""The round's tree: one round of a reply as the target saw it. A header (the round, its drafter, drafted and kept,
where its time went, and in words why it ended), then the round's paths drawn top to bottom as nodes on a line:
each drafted token in its status colour with p_target, p_draft, the acceptance probability min(1, p/q) and, when
sampling, the draw u that decided it; at each position the target's top-5 alternatives as bars (the token the
round took there marked) and its entropy; at a sampled substitution the top of the residual norm(max(0, p − q))
the target's token was drawn from; the target's own token (substituted, bonus or plain) at the end of the path.

The shape is a list of paths (`RoundTree.paths`): paths[0] is what the round wrote (the kept drafts, then the
target's token); every further path is a branch that leaves it before its node `fork`. Today a round has at most
one branch: the drafted tokens the target turned down, from the first rejection on. A method that drafts several
candidates (a tree of drafts) is one more path per candidate, each with its fork; the drawing already lays out any
number of them (`_Sketch.paths`), so it needs no change, only the data.

`round_tree(record)` builds what is shown (pure, no Qt: the tests read it, `RoundTreeView.rows()` is its text);
`RoundTreeView` paints it (reused by the live dock's `RoundTreePanel` and the token popover,
gui.views.chat.token_popover). The panel is a live panel (gui.views.live.panel.LivePanel) that takes part in the
round focus: it shows the picked round, else the reply's latest, and steps to the neighbouring rounds.

May touch: QtWidgets / QtGui / QtCore, gui.theme, gui.sessions.rounds (read), engine events, engine.core.sampling's
acceptance_probability and engine.core.methods' labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QToolButton, QVBoxLayout,
                               QWidget)

from engine.core.errors import ConfigError
from engine.core.events import Alternatives, TokenStatus
from engine.core.methods import method_spec
from engine.core.sampling import acceptance_probability
from gui import theme
from gui.sessions.rounds import RoundRecord
from gui.views.live.panel import LiveSnapshot

NOT_RECORDED = "Alternatives were not recorded for this round (Settings: record each round's tree)."
EMPTY_TEXT = "No round yet. Send a message, then pick a round on the timeline or click a token to see its tree."
GREEDY_RULE = ("Greedy: a drafted token is kept iff it is the target's most likely token (its argmax); at the first "
               "one that is not, the target writes its argmax instead.")
SAMPLED_RULE = ("Sampled: drafted token x is kept iff a uniform draw u < min(1, p(x)/q(x)) (p: the target, q: the "
                "drafter); at the first rejection the target's token is drawn from norm(max(0, p − q)).")
RESIDUAL_CAPTION = "drawn from max(0, p − q)"
TOP_CAPTION = "target's top-5"
ROOT_TEXT = "the text so far"


# ---------------------------------------------------------------------- what is shown (pure)
@dataclass(frozen=True, slots=True)
class Choice:
    """One of the target's alternatives at a position (or of the residual's)."""

    piece: str
    prob: float
    token_id: int
    mark: str = ""  # "chosen": the token the round took here; "drafted": the draft the target turned down; ""


@dataclass(frozen=True, slots=True)
class TreeNode:
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


@dataclass(frozen=True, slots=True)
class TreePath:
    nodes: tuple[TreeNode, ...]
    kind: str  # "committed": what the round wrote; "discarded": drafted tokens thrown away
    fork: int = 0  # a branch leaves the committed path just before its node `fork` (paths[0]: 0)


@dataclass(frozen=True, slots=True)
class RoundTree:
    title: str
    times: tuple[tuple[str, float], ...]  # (what, seconds): draft, verify, rollback
    reason: str  # why the round ended, in words
    rule: str  # the acceptance rule it ran under ("" where unknown)
    note: str  # "" or why alternatives are missing
    paths: tuple[TreePath, ...]  # paths[0]: the committed path (see the module docstring)

    def lines(self) -> list[str]:
        """Everything the view shows, as text, in the order it is drawn."""
        out = [self.title, " · ".join(f"{what} {ms_text(seconds)}" for what, seconds in self.times)]
        out += [line for line in (self.reason, self.rule, self.note) if line]
        for path, node in walk(self.paths):
            indent = "    " if path.kind == "discarded" else ""
            out.append(indent + node_text(node))
            if node.alternatives:
                out.append(indent + f"  {TOP_CAPTION}: " + choices_text(node.alternatives))
            if node.residual:
                out.append(indent + f"  {RESIDUAL_CAPTION}: " + choices_text(node.residual))
        return out


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
    return "plain step" if node.position is None else f"position {node.position + 1}"


def figures(node: TreeNode) -> list[str]:
    """A node's figures, one per line as drawn."""
    out = [f"p_target {prob_text(node.p_target)}"]
    if node.drafted:
        out.append("p_draft 1 (one-hot, n-gram)" if node.p_draft is None else f"p_draft {prob_text(node.p_draft)}")
        out.append(f"min(1, p/q) {prob_text(node.acceptance)}")
    if node.verdict:
        out.append(node.verdict)
    if node.entropy_bits is not None:
        out.append(f"entropy {node.entropy_bits:.2f} bits")
    return out


def node_text(node: TreeNode) -> str:
    return (f"{position_words(node)} {piece_text(node.piece)} {theme.STATUS_LABELS[node.status]}: "
            + " · ".join(figures(node)))


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
    kept = i < n_accepted
    return TreeNode(i, event.draft_pieces[i] if i < len(event.draft_pieces) else "",
                    TokenStatus.ACCEPTED if kept else TokenStatus.REJECTED, True, p_target, p_draft, ratio, draw,
                    verdict, at.entropy_bits if kept and at is not None else None,
                    _choices(at.target, event.draft_ids[i] if i < len(event.draft_ids) else None)
                    if kept and at is not None else ())


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
    greedy = None if detail is None or not m else all(d is None for d in draws)
    target = _target_node(record, greedy)
    kept = tuple(_drafted_node(record, i, greedy) for i in range(record.n_accepted))
    paths = [TreePath(kept + (target,), "committed")]
    turned_down = tuple(_drafted_node(record, i, greedy) for i in range(record.n_accepted, m))
    if turned_down:
        paths.append(TreePath(turned_down, "discarded", fork=len(kept)))
    title = (f"Round {record.index}" + (" (prefill)" if record.index == 0 else "")
             + f" · {drafter_label(record.drafter)}" + (f" · drafted {m}, kept {record.n_accepted}" if m else ""))
    times = (("draft", record.draft_seconds), ("verify", record.verify_seconds),
             ("rollback", record.rollback_seconds))
    rule = "" if greedy is None else GREEDY_RULE if greedy else SAMPLED_RULE
    reason = _reason(record, target, turned_down[0] if turned_down else None, greedy)
    return RoundTree(title, times, reason, rule, "" if detail is not None else NOT_RECORDED, tuple(paths))


# ---------------------------------------------------------------------- drawing
PAD = 8  # px around the content
SPINE_X = 14  # px: the committed path's line
BRANCH_X = 34  # px: a branch's line
NODE_X = 26  # px: where a committed node's text starts (a branch's: BRANCH_X + 12)
DOT_RADIUS = 5
WIDE = 380  # px of width from which a node's alternatives stand beside its figures (else under them)


def strong_colour(palette: theme.Palette, status: TokenStatus) -> str:
    """A status's saturated colour: its node's dot and its chosen bar."""
    style = palette.status(status)
    if status is TokenStatus.ACCEPTED:
        return palette.series_bars
    if status is TokenStatus.REJECTED:
        return style.foreground or palette.text_dim
    return style.underline_color or palette.text_dim


class _Sketch:
    """The drawing of a RoundTree at one width: a list of items to paint, its height and the focus's rectangle."""

    def __init__(self, palette: theme.Palette, font: QFont, width: float) -> None:
        self.palette, self.width = palette, width
        self.font = QFont(font)
        self.bold = QFont(font)
        self.bold.setWeight(QFont.Weight.DemiBold)
        self.small = QFont(font)
        if font.pointSizeF() > 0:
            self.small.setPointSizeF(max(7.0, font.pointSizeF() * 0.9))
        else:
            self.small.setPixelSize(max(9, round(font.pixelSize() * 0.9)))
        self.title_font = QFont(self.bold)
        self.items: list[tuple] = []
        self.y = PAD
        self.focus_rect: QRectF | None = None

    # -- primitives
    def text(self, x: float, y: float, width: float, text: str, colour: str, font: QFont, wrap: bool = False,
             align=Qt.AlignmentFlag.AlignLeft) -> float:
        """Adds a text; returns its height."""
        metrics = QFontMetricsF(font)
        if wrap:
            height = metrics.boundingRect(QRectF(0, 0, width, 1e6), int(Qt.TextFlag.TextWordWrap), text).height()
            flags = int(Qt.TextFlag.TextWordWrap) | int(align)
        else:
            text = metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)
            height = metrics.height()
            flags = int(align) | int(Qt.AlignmentFlag.AlignVCenter)
        self.items.append(("text", QRectF(x, y, width, height), text, colour, font, flags))
        return height

    def rect(self, rect: QRectF, fill: str | QColor | None, pen: str | None = None, radius: float = 3.0) -> None:
        self.items.append(("rect", rect, fill, pen, radius))

    def line(self, x1: float, y1: float, x2: float, y2: float, colour: str, dashed: bool = False) -> None:
        self.items.append(("line", QPointF(x1, y1), QPointF(x2, y2), colour, dashed))

    # -- parts
    def empty(self, text: str) -> None:
        self.y += self.text(PAD, self.y, self.width - 2 * PAD, text, self.palette.text_dim, self.font, wrap=True) + PAD

    def header(self, tree: RoundTree) -> None:
        """The round, its times and why it ended (the view keeps it in sight above the scrolling paths)."""
        p, w = self.palette, self.width - 2 * PAD
        self.y += self.text(PAD, self.y, w, tree.title, p.text, self.title_font, wrap=True) + 3
        self._times(tree.times)
        self.y += self.text(PAD, self.y, w, tree.reason, p.text, self.font, wrap=True) + 6

    def rules(self, tree: RoundTree) -> None:
        """The acceptance rule and the not-recorded note, above the paths."""
        for line in (tree.rule, tree.note):
            if line:
                self.y += self.text(PAD, self.y, self.width - 2 * PAD, line, self.palette.text_dim, self.small,
                                    wrap=True) + 3
        self.y += 4

    def _times(self, times) -> None:
        """The round's time, each part with its swatch, then one bar split by the parts."""
        p = self.palette
        colours = (p.series_draft_time, p.series_verify_time, p.error)  # as the timeline's bars
        metrics, x = QFontMetricsF(self.small), float(PAD)
        for (what, seconds), colour in zip(times, colours):
            label = f"{what} {ms_text(seconds)}"
            self.rect(QRectF(x, self.y + metrics.height() / 2 - 4, 8, 8), colour, None, 1.5)
            x += 12
            self.text(x, self.y, metrics.horizontalAdvance(label) + 2, label, p.text_dim, self.small)
            x += metrics.horizontalAdvance(label) + 12
        self.y += metrics.height() + 2
        total = sum(seconds for _, seconds in times)
        bar, x = self.width - 2 * PAD, float(PAD)
        self.rect(QRectF(PAD, self.y, bar, 6), p.surface_alt, None, 2)
        for (_, seconds), colour in zip(times, colours):
            if total > 0 and seconds > 0:
                self.rect(QRectF(x, self.y, bar * seconds / total, 6), colour, None, 0)
                x += bar * seconds / total
        self.y += 12

    def paths(self, tree: RoundTree, focus: int | None) -> None:
        """Every path from the text so far: the committed one down the spine, each branch indented, leaving the
        spine at its first node (module docstring)."""
        p = self.palette
        root = QPointF(SPINE_X, self.y + QFontMetricsF(self.small).height() / 2)
        self.y += self.text(SPINE_X + 12, self.y, self.width - SPINE_X - 12 - PAD, ROOT_TEXT, p.text_dim,
                            self.small) + 6
        self.items.append(("dot", root, p.text_dim, p.surface, True, DOT_RADIUS - 2))
        previous: dict[int, QPointF] = {id(tree.paths[0]): root}
        for path, node in walk(tree.paths):
            branch = path is not tree.paths[0]
            x_line = BRANCH_X if branch else SPINE_X
            centre = QPointF(x_line, self.node(node, x_line + 12, focus))
            start = previous.get(id(path))
            if start is not None:
                self.line(start.x(), start.y(), centre.x(), centre.y(), p.text_dim, branch)
            else:  # a branch's first node: off the spine at its height
                self.line(SPINE_X, centre.y(), centre.x(), centre.y(), p.text_dim, True)
            previous[id(path)] = centre
            self.items.append(("dot", centre, strong_colour(p, node.status), p.surface,
                               node.status is TokenStatus.REJECTED, DOT_RADIUS))
        self.y += PAD

    def node(self, node: TreeNode, x: float, focus: int | None) -> float:
        """One node at the cursor: its token, figures and alternatives; returns its dot's y."""
        p, top = self.palette, self.y
        right = self.width - PAD
        style = p.status(node.status)
        label = piece_text(node.piece)
        metrics = QFontMetricsF(self.bold)
        box_w = min(metrics.horizontalAdvance(label) + 10, (right - x) * 0.6)
        box_h = metrics.height() + 4
        box = QRectF(x, top, box_w, box_h)
        self.rect(box, style.background or p.surface_alt, p.border if style.background is None else None)
        self.items.append(("token", box.adjusted(5, 0, -5, 0), label, style.foreground or p.text, self.bold,
                           style.strike, style.underline, style.underline_color))
        self.text(x + box_w + 8, top + 2, right - x - box_w - 8,
                  f"{theme.STATUS_LABELS[node.status]} · {position_words(node)}", p.text_dim, self.small)
        y = top + box_h + 3
        wide = self.width >= WIDE and bool(node.alternatives or node.residual)
        column = (right - x) * 0.44 if wide else right - x
        numbers = [line for line in figures(node) if line != node.verdict]
        if not wide:  # the figures as one paragraph, the verdict under it
            numbers = [" · ".join(numbers)]
        left_y = y
        for line in numbers:
            left_y += self.text(x, left_y, column, line, p.text_dim, self.small, wrap=not wide) + 1
        if node.verdict:
            left_y += self.text(x, left_y, column, node.verdict, p.text, self.small, wrap=True) + 1
        bars_x = x + column + 10 if wide else x
        bars_y = y if wide else left_y + 3
        bars_y = self.bars(bars_x, bars_y, right - bars_x, TOP_CAPTION, node.alternatives, node.status)
        bars_y = self.bars(bars_x, bars_y + (4 if node.residual else 0), right - bars_x, RESIDUAL_CAPTION,
                           node.residual, TokenStatus.SUBSTITUTED)
        self.y = max(left_y, bars_y) + 8
        if focus is not None and node.position == focus:
            self.focus_rect = QRectF(x - 24, top - 4, right - x + 28, self.y - top)
            self.items.insert(0, ("rect", self.focus_rect, self._focus_fill(), p.accent, 6))
        return top + box_h / 2

    def _focus_fill(self) -> QColor:
        colour = QColor(self.palette.accent)
        colour.setAlpha(28 if not self.palette.dark else 40)
        return colour

    def bars(self, x: float, y: float, width: float, caption: str, choices: tuple[Choice, ...],
             status: TokenStatus) -> float:
        """A caption and one bar per choice, by probability (of 1); returns the y under them."""
        if not choices:
            return y
        p = self.palette
        y += self.text(x, y, width, caption, p.text_dim, self.small) + 1
        row = QFontMetricsF(self.small).height() + 1
        piece_w, prob_w = min(width * 0.36, 96.0), 40.0
        bar_w = max(20.0, width - piece_w - prob_w - 8)
        for choice in choices:
            marked = choice.mark == "chosen"
            mark = "● " if marked else "✗ " if choice.mark == "drafted" else ""
            colour = p.text if marked else p.text_dim
            self.text(x, y, piece_w, mark + piece_text(choice.piece), colour, self.bold if marked else self.small)
            bar_x = x + piece_w + 4
            self.rect(QRectF(bar_x, y + row / 2 - 3, bar_w, 6), p.surface_alt, None, 2)
            fill = QColor(strong_colour(p, status) if marked else p.text_dim)
            if not marked:
                fill.setAlpha(150)
            self.rect(QRectF(bar_x, y + row / 2 - 3, max(1.5, bar_w * min(1.0, choice.prob)), 6), fill, None, 2)
            self.text(bar_x + bar_w + 4, y, prob_w, prob_text(choice.prob), colour, self.small,
                      align=Qt.AlignmentFlag.AlignRight)
            y += row
        return y


PAINT_ORDER = {"rect": 0, "line": 1, "dot": 2, "text": 3, "token": 3}  # lines under the dots, text on top


def paint_items(painter: QPainter, items: list[tuple]) -> None:
    for item in sorted(items, key=lambda item: PAINT_ORDER[item[0]]):
        kind = item[0]
        if kind == "rect":
            _, rect, fill, pen, radius = item
            painter.setPen(QPen(QColor(pen), 1) if pen else Qt.PenStyle.NoPen)
            painter.setBrush(QColor(fill) if fill is not None else Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(rect, radius, radius)
        elif kind == "line":
            _, start, end, colour, dashed = item
            pen = QPen(QColor(colour), 1.4)
            pen.setStyle(Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine)
            painter.setPen(pen)
            painter.drawLine(start, end)
        elif kind == "dot":
            _, centre, colour, ring, hollow, radius = item
            painter.setPen(QPen(QColor(colour), 2))
            painter.setBrush(QColor(ring) if hollow else QColor(colour))
            painter.drawEllipse(centre, radius, radius)
        elif kind == "text":
            _, rect, text, colour, font, flags = item
            painter.setFont(font)
            painter.setPen(QColor(colour))
            painter.drawText(rect, flags, text)
        elif kind == "token":
            _paint_token(painter, *item[1:])


def _paint_token(painter, rect, text, colour, font, strike, underline, underline_colour) -> None:
    font = QFont(font)
    font.setStrikeOut(strike)
    painter.setFont(font)
    painter.setPen(QColor(colour))
    metrics = QFontMetricsF(font)
    text = metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, rect.width())
    painter.drawText(rect, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), text)
    if underline is not None:
        pen = QPen(QColor(underline_colour or colour), 1.5)
        pen.setStyle(underline)
        painter.setPen(pen)
        y = rect.bottom() - 2
        painter.drawLine(QPointF(rect.left(), y), QPointF(rect.left() + metrics.horizontalAdvance(text), y))


class _TreeCanvas(QWidget):
    """Paints part of a RoundTree at its width, its height following (height for width): the "header" (or the
    empty text), or the "body" (the rule, the note and the paths)."""

    def __init__(self, palette: theme.Palette, part: str, parent=None) -> None:
        super().__init__(parent)
        self.palette_, self.part = palette, part
        self.tree: RoundTree | None = None
        self.focus: int | None = None
        self._sketch: _Sketch | None = None
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def set_tree(self, tree: RoundTree | None, focus: int | None) -> None:
        self.tree, self.focus, self._sketch = tree, focus, None
        self.updateGeometry()
        self._fit_height()
        self.update()

    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_, self._sketch = palette, None
        self.update()

    def sketch(self, width: float | None = None) -> _Sketch:
        width = float(self.width() if width is None else width)
        if self._sketch is not None and self._sketch.width == width:
            return self._sketch
        sketch = _Sketch(self.palette_, self.font(), max(200.0, width))
        if self.tree is None:
            if self.part == "header":
                sketch.empty(EMPTY_TEXT)
        elif self.part == "header":
            sketch.header(self.tree)
        else:
            sketch.rules(self.tree)
            sketch.paths(self.tree, self.focus)
        if width == self.width():
            self._sketch = sketch
        return sketch

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return int(self.sketch(width).y) + 1

    def sizeHint(self) -> QSize:
        return QSize(460, self.heightForWidth(460))

    def minimumSizeHint(self) -> QSize:
        return QSize(200, 40)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._sketch = None
        self._fit_height()

    def _fit_height(self) -> None:
        height = self.heightForWidth(self.width())
        if self.part == "header" and self.maximumHeight() != height:
            self.setFixedHeight(height)  # the view's top: exactly its text
        elif self.part != "header" and self.minimumHeight() != height:
            self.setMinimumHeight(height)  # in the scroll area, which may give it more

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor(self.palette_.surface))
        paint_items(painter, self.sketch().items)
        if self.part == "header" and self.tree is not None:  # the line the paths scroll under
            painter.setPen(QPen(QColor(self.palette_.border), 1))
            painter.drawLine(QPointF(0, self.height() - 0.5), QPointF(self.width(), self.height() - 0.5))
        painter.end()


class RoundTreeView(QWidget):
    """A round's tree (module docstring) in a scroll area: `show_round(record, focus_position)`."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.record: RoundRecord | None = None
        self.tree: RoundTree | None = None
        self.focus_position: int | None = None
        self.header = _TreeCanvas(palette, "header")
        self.canvas = _TreeCanvas(palette, "body")
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.canvas)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.header)
        layout.addWidget(self.scroll, 1)
        self.set_palette(palette)

    def show_round(self, record: RoundRecord | None, focus_position: int | None = None) -> None:
        """Draw `record`'s tree (None: the empty text); `focus_position` (a token's position) is highlighted and
        scrolled to."""
        self.record, self.focus_position = record, focus_position
        self.tree = round_tree(record)
        self.header.set_tree(self.tree, None)
        self.canvas.set_tree(self.tree, focus_position)
        self.scroll.verticalScrollBar().setValue(0)
        focus = self.canvas.sketch().focus_rect
        if focus is not None:  # scrolled no further than needed: the header stays in view where it can
            self.scroll.ensureVisible(0, int(focus.bottom()), 0, 8)
            self.scroll.ensureVisible(0, int(focus.top()), 0, 8)

    def set_palette(self, palette: theme.Palette) -> None:
        self.header.set_palette(palette)
        self.canvas.set_palette(palette)
        self.scroll.viewport().setStyleSheet(f"background: {palette.surface};")

    def rows(self) -> list[str]:
        """What the view shows, line by line (RoundTree.lines; the empty text without a round)."""
        return [EMPTY_TEXT] if self.tree is None else self.tree.lines()

    def text(self) -> str:
        return "\n".join(self.rows())

    def content_height(self, width: int) -> int:
        """The height that shows the whole tree at `width` (the popover's size)."""
        return self.header.heightForWidth(width) + self.canvas.heightForWidth(width)


class RoundTreePanel(QWidget):
    """The live dock's round tree: the picked round, else the reply's latest; ◀ ▶ pick the neighbouring round."""

    stretch = 1
    round_hovered = Signal(object)  # the shown RoundRecord while the mouse is over the panel, None when it leaves
    round_selected = Signal(object)  # the neighbouring round the ◀ ▶ buttons pick

    def __init__(self, palette: theme.Palette | None = None, parent=None) -> None:
        super().__init__(parent)
        self.rounds: list[RoundRecord] = []  # the reply's (LiveStats.rounds, read only)
        self._count = 0  # how many of them were drawn
        self.selected: RoundRecord | None = None
        self.streaming = False
        self.caption = QLabel()
        self.caption.setObjectName("pane_title")
        self.caption.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.prev_button, self.next_button = QToolButton(), QToolButton()
        for button, arrow, tip, step in ((self.prev_button, Qt.ArrowType.LeftArrow, "The previous round", -1),
                                         (self.next_button, Qt.ArrowType.RightArrow, "The next round", 1)):
            button.setArrowType(arrow)
            button.setToolTip(tip)
            button.setAutoRaise(True)
            button.clicked.connect(lambda _=False, step=step: self.step(step))
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.caption, 1)
        top.addWidget(self.prev_button)
        top.addWidget(self.next_button)
        self.view = RoundTreeView(palette or theme.LIGHT)
        self.view.setMinimumHeight(300)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        self._redraw()

    def shown(self) -> RoundRecord | None:
        """The round on show: the picked one, else the reply's latest."""
        return self.selected if self.selected is not None else (self.rounds[-1] if self.rounds else None)

    def update_from(self, snapshot: LiveSnapshot) -> bool:
        rounds = snapshot.live.rounds
        streaming = snapshot.live.final is None and bool(rounds)
        if rounds is not self.rounds or len(rounds) != self._count or streaming != self.streaming:
            self.rounds, self._count, self.streaming = rounds, len(rounds), streaming
            self._redraw()
        return False

    def show_focus(self, hovered, selected) -> None:
        if selected is not self.selected:
            self.selected = selected
            self._redraw()

    def step(self, step: int) -> None:
        """Pick the round `step` rounds from the one shown (emits round_selected; the focus shows it)."""
        at = self._index()
        if at is None or not 0 <= at + step < len(self.rounds):
            return
        self.round_selected.emit(self.rounds[at + step])

    def set_palette(self, palette: theme.Palette) -> None:
        self.view.set_palette(palette)

    def clear(self) -> None:
        self.rounds, self._count, self.selected, self.streaming = [], 0, None, False
        self._redraw()

    def enterEvent(self, event) -> None:
        super().enterEvent(event)
        if self.shown() is not None:
            self.round_hovered.emit(self.shown())

    def leaveEvent(self, event) -> None:
        super().leaveEvent(event)
        self.round_hovered.emit(None)

    def _index(self) -> int | None:
        record = self.shown()
        return next((i for i, r in enumerate(self.rounds) if r is record), None)

    def _redraw(self) -> None:
        record = self.shown()
        if record is not self.view.record:
            self.view.show_round(record)
        at = self._index()
        self.prev_button.setEnabled(at is not None and at > 0)
        self.next_button.setEnabled(at is not None and at + 1 < len(self.rounds))
        if record is None:
            self.caption.setText("Round tree")
        elif self.selected is not None:
            where = f" of {len(self.rounds)}" if at is not None else " (an earlier reply)"
            self.caption.setText(f"Round tree · round {record.index}{where}")
        else:
            self.caption.setText(f"Round tree · {'latest' if self.streaming else 'last'} round ({record.index})")
