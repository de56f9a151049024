"""The round tree's display list: what a drawing of a round's tree is made of, as small typed items (a rounded
rectangle, a line, a dot, a text, a token in its status style), each painting itself, and `paint_items`, which
paints a list of them in layers (rectangles under the lines, the lines under the dots, text on top).

gui.views.live.tree_sketch makes the list; the round tree's canvases (gui.views.live.round_tree) paint it.

May touch: QtGui / QtCore painting types. Never a widget, never a session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen


@dataclass(frozen=True, slots=True)
class RectItem:
    """A rounded rectangle: a token's box, a bar, a swatch, the focus's background."""

    layer: ClassVar[int] = 0
    rect: QRectF
    fill: str | QColor | None
    pen: str | None
    radius: float

    def paint(self, painter: QPainter) -> None:
        painter.setPen(QPen(QColor(self.pen), 1) if self.pen else Qt.PenStyle.NoPen)
        painter.setBrush(QColor(self.fill) if self.fill is not None else Qt.BrushStyle.NoBrush)
        painter.drawRoundedRect(self.rect, self.radius, self.radius)


@dataclass(frozen=True, slots=True)
class LineItem:
    """A path's line between two dots (dashed: a branch)."""

    layer: ClassVar[int] = 1
    start: QPointF
    end: QPointF
    colour: str
    dashed: bool

    def paint(self, painter: QPainter) -> None:
        pen = QPen(QColor(self.colour), 1.4)
        pen.setStyle(Qt.PenStyle.DashLine if self.dashed else Qt.PenStyle.SolidLine)
        painter.setPen(pen)
        painter.drawLine(self.start, self.end)


@dataclass(frozen=True, slots=True)
class DotItem:
    """A node's dot on its path (hollow: a rejected draft, the root)."""

    layer: ClassVar[int] = 2
    centre: QPointF
    colour: str
    ring: str  # the hollow dot's inside
    hollow: bool
    radius: float

    def paint(self, painter: QPainter) -> None:
        painter.setPen(QPen(QColor(self.colour), 2))
        painter.setBrush(QColor(self.ring) if self.hollow else QColor(self.colour))
        painter.drawEllipse(self.centre, self.radius, self.radius)


@dataclass(frozen=True, slots=True)
class TextItem:
    """A text in its rectangle, laid out already (wrapped or elided) by the sketch."""

    layer: ClassVar[int] = 3
    rect: QRectF
    text: str
    colour: str
    font: QFont
    flags: int

    def paint(self, painter: QPainter) -> None:
        painter.setFont(self.font)
        painter.setPen(QColor(self.colour))
        painter.drawText(self.rect, self.flags, self.text)


@dataclass(frozen=True, slots=True)
class TokenItem:
    """A token's text in its status style: struck through (rejected), underlined (substituted, bonus)."""

    layer: ClassVar[int] = 3
    rect: QRectF
    text: str
    colour: str
    font: QFont
    strike: bool
    underline: Qt.PenStyle | None
    underline_colour: str | None

    def paint(self, painter: QPainter) -> None:
        font = QFont(self.font)
        font.setStrikeOut(self.strike)
        painter.setFont(font)
        painter.setPen(QColor(self.colour))
        metrics = QFontMetricsF(font)
        text = metrics.elidedText(self.text, Qt.TextElideMode.ElideMiddle, self.rect.width())
        painter.drawText(self.rect, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), text)
        if self.underline is not None:
            pen = QPen(QColor(self.underline_colour or self.colour), 1.5)
            pen.setStyle(self.underline)
            painter.setPen(pen)
            y = self.rect.bottom() - 2
            painter.drawLine(QPointF(self.rect.left(), y),
                             QPointF(self.rect.left() + metrics.horizontalAdvance(text), y))


TreeItem = RectItem | LineItem | DotItem | TextItem | TokenItem


def paint_items(painter: QPainter, items: list[TreeItem]) -> None:
    """Paint the items layer by layer, in their order within a layer."""
    for item in sorted(items, key=lambda item: item.layer):
        item.paint(painter)
