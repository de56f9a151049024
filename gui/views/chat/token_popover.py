"""The token popover: a token's round's tree (gui.views.live.round_tree.RoundTreeView) in a frameless popup by the
token, its position highlighted, so a click on a token answers why its round ended, what the target wanted
instead and where the time went without leaving the transcript. It closes on Esc or a click outside, and always
fits on the screen it opens on.

May touch: QtWidgets / QtGui / QtCore, gui.theme, gui.views.live.round_tree (its view), gui.sessions.rounds (read).
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QVBoxLayout

from gui import theme
from gui.sessions.rounds import RoundRecord
from gui.views.live.round_tree import RoundTreeView

POPOVER_WIDTH = 460  # px: as wide as the live dock's tree
MAX_HEIGHT = 560  # px at most; a taller tree scrolls
OFFSET = 14  # px below (or above) the point it opens at, off the token's line
MIN_HEIGHT = 220  # px: shorter than this on both sides of the point, it may cover the point


def popover_rect(size_wanted: tuple[int, int], point: QPoint, screen: QRect) -> QRect:
    """Where a popover of `size_wanted` opens for `point`: below it, else above it, else on the roomier side
    shrunk to fit there (the tree scrolls), never over the point unless neither side has MIN_HEIGHT; always inside
    `screen` (its available geometry). Pure geometry."""
    width, height = min(size_wanted[0], screen.width()), min(size_wanted[1], screen.height())
    x = min(max(point.x() - 24, screen.left()), screen.right() + 1 - width)
    below_top, above_bottom = point.y() + OFFSET, point.y() - OFFSET
    room_below, room_above = screen.bottom() + 1 - below_top, above_bottom - screen.top()
    if height <= room_below or (room_below >= room_above and room_below >= MIN_HEIGHT):
        height = min(height, room_below) if room_below >= MIN_HEIGHT else height
        y = below_top
    elif height <= room_above or room_above >= MIN_HEIGHT:
        height = min(height, room_above)
        y = above_bottom - height
    else:
        y = screen.bottom() + 1 - height
    y = min(max(y, screen.top()), screen.bottom() + 1 - height)
    return QRect(x, y, width, height)


class TokenPopover(QFrame):
    """A popup holding one round's tree: `show_for(record, position, global_point)`."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent, Qt.WindowType.Popup | Qt.WindowType.FramelessWindowHint)
        self.setObjectName("token_popover")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.view = RoundTreeView(palette)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(1, 1, 1, 1)
        layout.addWidget(self.view)
        self.set_palette(palette)

    def show_for(self, record: RoundRecord, position: int | None, global_point: QPoint) -> None:
        """Open by `global_point` with `record`'s tree, the token at `position` highlighted."""
        self.view.show_round(record, position)
        screen = QGuiApplication.screenAt(global_point) or QGuiApplication.primaryScreen()
        available = screen.availableGeometry()
        margins = self.layout().contentsMargins()
        height = self.view.content_height(POPOVER_WIDTH - margins.left() - margins.right()) + margins.top() \
            + margins.bottom()
        self.setGeometry(popover_rect((POPOVER_WIDTH, min(height, MAX_HEIGHT)), global_point, available))
        self.show()
        self.raise_()
        self.view.show_round(record, position)  # at its final width: scroll the focus into view

    def set_palette(self, palette: theme.Palette) -> None:
        self.view.set_palette(palette)
        self.setStyleSheet(f"QFrame#token_popover {{ background: {palette.surface}; "
                           f"border: 1px solid {palette.border}; border-radius: 6px; }}")

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.close()
            return
        super().keyPressEvent(event)
