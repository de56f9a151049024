"""The round's tree on screen: `RoundTreeView` shows one round (gui.sessions.round_tree.RoundTree) as a header kept in
sight (the round, its drafter, drafted and kept, where its time went, and in words why it ended) above its paths,
which scroll: each drafted token in its status colour with its figures, the target's alternatives as bars, the
target's own token at the end of the path (the drawing: gui.views.live.tree_sketch). It is reused by the live
dock's `RoundTreePanel` and the token popover (gui.views.chat.token_popover); `RoundTreeView.rows()` is what it
shows, as text.

`RoundTreePanel` is a live panel (gui.views.live.panel.LivePanel) that takes part in the round focus (a
RoundFocusPanel): it shows the picked round, else the reply's latest, and steps to the neighbouring rounds.

May touch: QtWidgets / QtGui / QtCore, gui.theme, gui.sessions.rounds and gui.sessions.round_tree (read), the tree's
sketch and painter.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QStyle, QToolButton, QVBoxLayout,
                               QWidget)

from gui import theme
from gui.sessions.round_tree import (RESIDUAL_CAPTION, TOP_CAPTION, RoundTree, TreeNode, choices_text, figures,
                                     ms_text, piece_text, position_words, round_tree, walk, ROOT_TEXT)
from gui.sessions.rounds import RoundRecord
from gui.views.live.panel import LiveSnapshot, RoundFocusPanel
from gui.views.live.tree_painter import paint_items
from gui.views.live.tree_grid import draw_grid, grid_width
from gui.views.live.tree_sketch import TreeSketch

KEPT_PATH_CAPTION = "The kept path, node by node:"
EMPTY_TEXT = "No round yet. Send a message, then pick a round on the timeline or click a token to see its tree."


def node_text(node: TreeNode) -> str:
    return (f"{position_words(node)} {piece_text(node.piece)} {theme.STATUS_LABELS[node.status]}: "
            + " · ".join(figures(node)))


def tree_lines(tree: RoundTree) -> list[str]:
    """Everything the view shows of a tree, as text, in the order it is drawn."""
    out = [tree.title]
    if tree.times:  # a server's step has none of its own
        out.append(" · ".join(f"{what} {ms_text(seconds)}" for what, seconds in tree.times))
    out += [line for line in (tree.reason, tree.rule, tree.note) if line]
    if tree.is_tree:
        return out + branch_lines(tree)
    for path, node in walk(tree.paths):
        indent = "    " if path.kind == "discarded" else ""
        out.append(indent + node_text(node))
        if node.alternatives:
            out.append(indent + f"  {TOP_CAPTION}: " + choices_text(node.alternatives))
        if node.residual:
            out.append(indent + f"  {RESIDUAL_CAPTION}: " + choices_text(node.residual))
    return out


def branch_lines(tree: RoundTree) -> list[str]:
    """A tree round's paths as text: the kept path, then each branch with the node it hangs off and its ending."""
    out = []
    pieces = {node.position: node.piece for path in tree.paths for node in path.nodes if node.drafted}
    for j, path in enumerate(tree.paths):
        off = ROOT_TEXT if path.parent is None or path.parent < 0 else piece_text(pieces.get(path.parent, ""))
        out.append("kept path:" if j == 0 else f"branch {j} (off {off}):")
        for node in path.nodes:
            out.append("    " + node_text(node))
            if node.alternatives:
                out.append(f"      {TOP_CAPTION}: " + choices_text(node.alternatives))
        out.append("  ends: " + path.ending + (f" · {path.cut}" if path.cut else ""))
    return out


class _TreeCanvas(QWidget):
    """Paints its part of a RoundTree at its width, its height following (height for width)."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.palette_ = palette
        self.tree: RoundTree | None = None
        self.focus: int | None = None
        self._sketch: TreeSketch | None = None
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def draw(self, sketch: TreeSketch) -> None:
        """Lay out this part of `self.tree` (None: no round) on the sketch."""
        raise NotImplementedError

    def fit_height(self, height: int) -> None:
        """Take the height the sketch needs at the present width."""
        raise NotImplementedError

    def set_tree(self, tree: RoundTree | None, focus: int | None = None) -> None:
        self.tree, self.focus, self._sketch = tree, focus, None
        self.updateGeometry()
        self.fit_height(self.heightForWidth(self.width()))
        self.update()

    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_, self._sketch = palette, None
        self.update()

    def sketch(self, width: float | None = None) -> TreeSketch:
        width = float(self.width() if width is None else width)
        if self._sketch is not None and self._sketch.width == width:
            return self._sketch
        sketch = TreeSketch(self.palette_, self.font(), max(200.0, width))
        self.draw(sketch)
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
        self.fit_height(self.heightForWidth(self.width()))

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor(self.palette_.surface))
        paint_items(painter, self.sketch().items)
        self.paint_over(painter)
        painter.end()

    def paint_over(self, painter: QPainter) -> None:
        """What this part paints over its items (nothing by default)."""


class TreeHeader(_TreeCanvas):
    """The view's top: the round, its times and why it ended (or the empty text), exactly its text's height."""

    def draw(self, sketch: TreeSketch) -> None:
        if self.tree is None:
            sketch.empty(EMPTY_TEXT)
        else:
            sketch.header(self.tree)

    def fit_height(self, height: int) -> None:
        if self.maximumHeight() != height:
            self.setFixedHeight(height)

    def paint_over(self, painter: QPainter) -> None:
        if self.tree is not None:  # the line the paths scroll under
            painter.setPen(QPen(QColor(self.palette_.border), 1))
            painter.drawLine(QPointF(0, self.height() - 0.5), QPointF(self.width(), self.height() - 0.5))


class TreeBody(_TreeCanvas):
    """The rule, the note and the paths, the focused position highlighted; in a scroll area, which may give it
    more than its height."""

    def draw(self, sketch: TreeSketch) -> None:
        if self.tree is None:
            return
        sketch.rules(self.tree)
        if self.tree.is_tree:  # the branches side by side, then the kept path's nodes in full, as a chain's
            draw_grid(sketch, self.tree, self.focus)
            full_width = sketch.width
            sketch.width = min(full_width, float(self.visible_width()))  # the list fits the view, unscrolled
            sketch.y += sketch.text(8, sketch.y, sketch.width - 16, KEPT_PATH_CAPTION, self.palette_.text_dim,
                                    sketch.small) + 4
            sketch.paths(dataclasses.replace(self.tree, paths=self.tree.paths[:1]), self.focus)
            sketch.width = full_width
        else:
            sketch.paths(self.tree, self.focus)

    def visible_width(self) -> int:
        """The width the scroll area shows of it, less room for its scroll bar (its own where it is in none)."""
        if self.parentWidget() is None:
            return self.width()
        return self.parentWidget().width() - self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)

    def set_tree(self, tree: RoundTree | None, focus: int | None = None) -> None:
        self.setMinimumWidth(grid_width(tree) if tree is not None and tree.is_tree else 0)
        if self.width() < self.minimumWidth():  # now, not at the next layout: the scroll area's range follows
            self.resize(self.minimumWidth(), self.height())
        super().set_tree(tree, focus)

    def fit_height(self, height: int) -> None:
        if self.minimumHeight() != height:
            self.setMinimumHeight(height)


class RoundTreeView(QWidget):
    """A round's tree (module docstring) in a scroll area: `show_round(record, focus_position)`."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.record: RoundRecord | None = None
        self.tree: RoundTree | None = None
        self.focus_position: int | None = None
        self.header = TreeHeader(palette)
        self.canvas = TreeBody(palette)
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.canvas)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)  # a wide tree's columns
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
        self.header.set_tree(self.tree)
        self.canvas.set_tree(self.tree, focus_position)
        self.scroll.verticalScrollBar().setValue(0)
        focus = self.canvas.sketch().focus_rect
        if focus is not None:  # scrolled no further than needed: the header stays in view where it can
            self.scroll.ensureVisible(int(focus.right()), int(focus.bottom()), 8, 8)  # a tree's column too
            self.scroll.ensureVisible(int(focus.left()), int(focus.top()), 8, 8)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.tree is not None and self.tree.is_tree:  # the kept path's list follows the visible width
            self.canvas.set_tree(self.tree, self.focus_position)

    def set_palette(self, palette: theme.Palette) -> None:
        self.header.set_palette(palette)
        self.canvas.set_palette(palette)
        self.scroll.viewport().setStyleSheet(f"background: {palette.surface};")

    def rows(self) -> list[str]:
        """What the view shows, line by line (tree_lines; the empty text without a round)."""
        return [EMPTY_TEXT] if self.tree is None else tree_lines(self.tree)

    def text(self) -> str:
        return "\n".join(self.rows())

    def content_height(self, width: int) -> int:
        """The height that shows the whole tree at `width` (the popover's size)."""
        return self.header.heightForWidth(width) + self.canvas.heightForWidth(width)


class RoundTreePanel(QWidget, RoundFocusPanel):
    """The live dock's round tree: the picked round, else the reply's latest; ◀ ▶ pick the neighbouring round.
    round_hovered: the shown round while the mouse is over the panel; round_selected: the round ◀ ▶ pick."""

    name = "tree"
    stretch = 1

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
