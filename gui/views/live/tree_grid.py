"""A tree round's drawing (gui.sessions.round_tree.RoundTree with is_tree): its branches side by side, one column per
path (the kept path first, on the left, ending on the target's own token), one row per depth, each node a cell with
its token in its status style, p_target, p_draft, min(1, p/q) and its verdict; a line from each node to its parent
(solid and coloured on the kept path, dashed elsewhere), and under every column, in one row, why that branch ended
and where its drafting stopped. `draw_grid` adds it to a TreeSketch (gui.views.live.tree_sketch) at the cursor;
`grid_width` is the width it needs (the view scrolls sideways when narrower).

May touch: QtGui / QtCore geometry and fonts, gui.theme, gui.sessions.round_tree (read), the sketch and painter.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QFontMetricsF

from engine.core.events import TokenStatus
from gui import theme
from gui.sessions.round_tree import ROOT_TEXT, RoundTree, TreeNode, piece_text, prob_text
from gui.views.live.tree_painter import DotItem, TokenItem

PAD = 8  # px around the grid (as the sketch's)
COL_MIN, COL_MAX = 114.0, 190.0  # px of one column
GAP = 20.0  # px between two rows: the lines to a node's children run in it


def grid_width(tree: RoundTree) -> int:
    """The narrowest width that shows every column."""
    return int(2 * PAD + len(tree.paths) * COL_MIN)


def cell_lines(node: TreeNode) -> list[str]:
    """What a node's cell says under its token."""
    if not node.drafted:
        return [f"p_target {prob_text(node.p_target)}", theme.STATUS_LABELS[node.status]]
    p_draft = "1 (one-hot)" if node.p_draft is None else prob_text(node.p_draft)
    return [f"p_target {prob_text(node.p_target)}", f"p_draft {p_draft}",
            f"min(1, p/q) {prob_text(node.acceptance)}", node.verdict.split(":")[0]]


def draw_grid(sketch, tree: RoundTree, focus: int | None) -> None:
    """The tree's columns at the sketch's cursor (module docstring); moves the cursor under them."""
    p, small = sketch.palette, QFontMetricsF(sketch.small)
    col_w = min(COL_MAX, max(COL_MIN, (sketch.width - 2 * PAD) / max(1, len(tree.paths))))
    box_h = QFontMetricsF(sketch.bold).height() + 4
    cell_h = box_h + 3 + 4 * small.height()
    row_h = cell_h + GAP
    top = sketch.y
    root = QPointF(PAD + col_w / 2, top + small.height() / 2)
    sketch.text(root.x() + 9, top, sketch.width - root.x() - 9 - PAD, ROOT_TEXT, p.text_dim, sketch.small)
    sketch.items.append(DotItem(root, p.text_dim, p.surface, True, 3))
    rows_top = top + small.height() + GAP
    anchors: dict[int, QPointF] = {-1: root}
    bottoms = []
    for c, path in enumerate(tree.paths):
        x = PAD + c * col_w
        parent = -1 if path.parent is None else path.parent
        y = rows_top
        for node in path.nodes:
            y = rows_top + (node.depth or 0) * row_h
            _edge(sketch, anchors[parent], QPointF(x + col_w / 2, y), node)
            _cell(sketch, node, x, y, col_w, box_h, focus)
            if node.drafted:  # the target's own token has no children
                parent = node.position
                anchors[parent] = QPointF(x + col_w / 2, y + cell_h - 2)
        bottoms.append(y + cell_h)
    footer = max(bottoms, default=rows_top)
    heights = [_ending(sketch, path, PAD + c * col_w, footer, col_w) for c, path in enumerate(tree.paths)]
    sketch.y = footer + max(heights, default=0) + PAD


def _edge(sketch, start: QPointF, end: QPointF, node: TreeNode) -> None:
    """The line from a parent's cell (or the root) down to a node's token: straight, or along the gap above it."""
    kept = node.status is not TokenStatus.REJECTED
    colour = sketch.palette.series_bars if kept else sketch.palette.text_dim
    if abs(start.x() - end.x()) < 0.5:
        sketch.line(start.x(), start.y(), end.x(), end.y(), colour, not kept)
        return
    middle = end.y() - GAP / 2
    sketch.line(start.x(), start.y(), start.x(), middle, colour, not kept)
    sketch.line(start.x(), middle, end.x(), middle, colour, not kept)
    sketch.line(end.x(), middle, end.x(), end.y(), colour, not kept)


def _cell(sketch, node: TreeNode, x: float, y: float, col_w: float, box_h: float, focus: int | None) -> None:
    """A node's token (centred at the column's middle, its status' style) and its figures under it."""
    p = sketch.palette
    style = p.status(node.status)
    label = piece_text(node.piece)
    box_w = min(QFontMetricsF(sketch.bold).horizontalAdvance(label) + 12, col_w - 10)
    box = QRectF(x + (col_w - box_w) / 2, y, box_w, box_h)
    if focus is not None and node.position == focus:  # the view scrolls it into sight (TreeSketch.focus_rect)
        sketch.focus_rect = QRectF(x + 2, y - 3, col_w - 4, box_h + 6 + 4 * QFontMetricsF(sketch.small).height())
        sketch.rect(sketch.focus_rect, sketch.focus_fill(), p.accent, 5)
    sketch.rect(box, style.background or p.surface_alt, p.border if style.background is None else None)
    sketch.items.append(TokenItem(box.adjusted(6, 0, -6, 0), label, style.foreground or p.text, sketch.bold,
                                  style.strike, style.underline, style.underline_color))
    line_y = y + box_h + 3
    for j, line in enumerate(cell_lines(node)):
        last = j == len(cell_lines(node)) - 1
        line_y += sketch.text(x + 3, line_y, col_w - 6, line, p.text if last else p.text_dim, sketch.small,
                              align=Qt.AlignmentFlag.AlignHCenter)


def _ending(sketch, path, x: float, y: float, col_w: float) -> float:
    """Why a column's branch ended and where its drafting stopped, under the grid; returns the height taken."""
    p = sketch.palette
    sketch.line(x + 6, y + 2, x + col_w - 6, y + 2, p.border)
    ending = path.ending.replace("“ ", "“\u00a0")  # a piece's leading space does not break the line
    height = 6 + sketch.text(x + 4, y + 6, col_w - 8, ending, p.text, sketch.small, wrap=True,
                             align=Qt.AlignmentFlag.AlignHCenter)
    if path.cut:
        height += 2 + sketch.text(x + 4, y + height + 2, col_w - 8, path.cut, p.text_dim, sketch.small, wrap=True,
                                  align=Qt.AlignmentFlag.AlignHCenter)
    return height

