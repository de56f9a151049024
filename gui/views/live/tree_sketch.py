"""The drawing of a round's tree (gui.sessions.round_tree.RoundTree) at one width: `TreeSketch` lays it out top to
bottom into a display list of typed items (gui.views.live.tree_painter), measuring its text, and keeps the height
it took and the focused node's rectangle. The header (the round, its times, why it ended) and the body (the rule,
the note, then the paths down a spine, each branch indented and dashed off it) are laid out apart, so a view may
keep the header in sight above the scrolling paths.

May touch: QtGui / QtCore (fonts, metrics, geometry), gui.theme, gui.sessions.round_tree (read). Never a widget.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF

from engine.core.events import TokenStatus
from gui import theme
from gui.sessions.round_tree import (RESIDUAL_CAPTION, ROOT_TEXT, TOP_CAPTION, Choice, RoundTree, TreeNode, figures,
                                     ms_text, piece_text, position_words, prob_text, walk)
from gui.views.live.tree_painter import DotItem, LineItem, RectItem, TextItem, TokenItem, TreeItem

PAD = 8  # px around the content
SPINE_X = 14  # px: the committed path's line
BRANCH_X = 34  # px: a branch's line
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


class TreeSketch:
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
        self.items: list[TreeItem] = []
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
        self.items.append(TextItem(QRectF(x, y, width, height), text, colour, font, flags))
        return height

    def rect(self, rect: QRectF, fill: str | QColor | None, pen: str | None = None, radius: float = 3.0) -> None:
        self.items.append(RectItem(rect, fill, pen, radius))

    def line(self, x1: float, y1: float, x2: float, y2: float, colour: str, dashed: bool = False) -> None:
        self.items.append(LineItem(QPointF(x1, y1), QPointF(x2, y2), colour, dashed))

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
        if not times:
            return
        p = self.palette
        by_part = {"draft": p.series_draft_time, "network": p.series_network_time, "verify": p.series_verify_time,
                   "rollback": p.error}  # as the timeline's bars
        colours = [by_part.get(what, p.text_dim) for what, _ in times]
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
        self.items.append(DotItem(root, p.text_dim, p.surface, True, DOT_RADIUS - 2))
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
            self.items.append(DotItem(centre, strong_colour(p, node.status), p.surface,
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
        self.items.append(TokenItem(box.adjusted(5, 0, -5, 0), label, style.foreground or p.text, self.bold,
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
            self.items.insert(0, RectItem(self.focus_rect, self.focus_fill(), p.accent, 6))
        return top + box_h / 2

    def focus_fill(self) -> QColor:
        """The focused node's background: the accent, faint."""
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
