"""Where every top-level window opens: on the screen it opens on, never bigger than it.

`fit_to_screen` is the arithmetic (pure, on QRect/QSize: testable without a screen); `place_on_screen` applies
it to the main window before it is shown: the first window at most `SCREEN_SHARE` of the screen's available
area, centred; a remembered geometry kept where it fits, else shrunk and moved fully onto the current screen
(saved on a larger or a disconnected monitor). `show_window` is the same rule for every other top-level window
(compare, models, training, fastest, settings, help): each is shown through it. A window whose content can be
wider than a small screen holds it in a `ContentScroll`: scrolled there, never cut off.

May touch: QtCore geometry, QtGui screens, the window's geometry and visibility. Nothing else.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QScrollArea, QVBoxLayout, QWidget

SCREEN_SHARE = 0.9  # the most of the screen's available width and height a window is opened at


def fit_to_screen(requested: QRect | QSize, available: QRect, minimum: QSize = QSize(0, 0)) -> QRect:
    """`requested` placed on `available` (a screen's availableGeometry(), whose origin may be non-zero).

    A size (a first window) becomes at most SCREEN_SHARE of `available` in each dimension, centred. A rect (a
    remembered geometry) stays as it is when it lies wholly on `available`; bigger than it, it shrinks to
    SCREEN_SHARE; lying off it, it moves fully onto it (centred when none of it was on it). Never below
    `minimum` (the window's own minimum size wins over the screen)."""
    limit = QSize(int(available.width() * SCREEN_SHARE), int(available.height() * SCREEN_SHARE))
    if isinstance(requested, QSize):
        size = requested.boundedTo(limit).expandedTo(minimum)
        return centred(size, available)
    if available.contains(requested):
        return QRect(requested)
    size = requested.size()
    if size.width() > available.width() or size.height() > available.height():
        size = size.boundedTo(limit)
    size = size.expandedTo(minimum)
    if not available.intersects(requested):
        return centred(size, available)
    left = min(max(requested.left(), available.left()), available.right() + 1 - size.width())
    top = min(max(requested.top(), available.top()), available.bottom() + 1 - size.height())
    return QRect(QPoint(max(left, available.left()), max(top, available.top())), size)


def centred(size: QSize, available: QRect) -> QRect:
    """`size` centred on `available` (its top-left corner kept on it when `size` is the bigger)."""
    left = available.left() + max(0, (available.width() - size.width()) // 2)
    top = available.top() + max(0, (available.height() - size.height()) // 2)
    return QRect(QPoint(left, top), size)


def place_on_screen(window, restored: bool, saved: QRect | None = None) -> None:
    """Size and place `window` (not shown yet) on its screen. Not `restored`: its sizeHint, fitted and centred.
    `restored` (Qt's restoreGeometry, which already keeps a window on some screen, at up to its full size):
    `saved`, the normal geometry as it was saved, else the restored one, clamped to the screen it is on (the
    primary one when that screen is gone). A window restored maximized or full screen is left as it is."""
    if restored and (window.isMaximized() or window.isFullScreen()):
        return
    requested = (saved if saved is not None and saved.isValid() else window.geometry()) if restored \
        else window.sizeHint()
    at = (requested if restored else window.geometry()).center()
    screen = QGuiApplication.screenAt(at) or window.screen() or QGuiApplication.primaryScreen()
    if screen is None:  # no screen to fit to
        if not restored:
            window.resize(requested)
        return
    minimum = window.minimumSizeHint().expandedTo(window.minimumSize())
    placed = fit_to_screen(requested, screen.availableGeometry(), minimum)
    if restored and placed == requested:
        return  # it fits where it was: Qt's restored geometry (frame included) stands
    window.resize(placed.size())
    window.move(placed.topLeft())  # the frame's corner: the title bar is on the screen too


def show_window(window):
    """Show a top-level window within its screen's available area, as the main window opens (`fit_to_screen`):
    the first time at the size its maker gave it (else its sizeHint), fitted and centred on the screen of the
    window it belongs to; shown again, where the user left it unless that no longer lies on the screen. Raised.
    Returns the window."""
    if not window.isVisible():
        fit_before_showing(window)
    window.show()
    if QApplication.platformName() != "offscreen":  # it has no window stack (and says so on stderr)
        window.raise_()
        window.activateWindow()
    return window


def fit_before_showing(window) -> None:
    """`show_window`'s sizing and placing of a window not visible now (the `fit_to_screen` rule)."""
    if window.windowHandle() is None:  # never shown: Qt makes a window's handle on its first show
        requested = window.size() if window.testAttribute(Qt.WidgetAttribute.WA_Resized) else window.sizeHint()
        if window.hasHeightForWidth():  # wrapped text: as tall as that width needs
            requested = requested.expandedTo(QSize(0, window.heightForWidth(requested.width())))
        screen = (window.parentWidget() or window).screen()
    else:
        requested = window.frameGeometry()  # where it was, its title bar included
        screen = QGuiApplication.screenAt(requested.center()) or window.screen()
    screen = screen or QGuiApplication.primaryScreen()
    if screen is None:  # no screen to fit to
        return
    frame = window.frameGeometry().size() - window.size()  # the title bar and borders (none before the first show)
    minimum = window.minimumSizeHint().expandedTo(window.minimumSize())
    placed = fit_to_screen(requested, screen.availableGeometry(), minimum + frame)
    if placed != requested:  # a first window (a size, not a rect) is always placed: centred
        window.resize(placed.size() - frame)
        window.move(placed.topLeft())  # the frame's corner


class ContentScroll(QScrollArea):
    """A top-level window's content, scrolled only where the window is smaller than the content's minimum size (a
    small screen); otherwise it fills the window as if there were no scroll area."""

    def __init__(self, content: QWidget) -> None:
        super().__init__()
        sheet = _SheetByMinimum()
        layout = QVBoxLayout(sheet)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(content)
        holder = QWidget()
        outer = QVBoxLayout(holder)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(sheet)
        self.setWidget(holder)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)


class _SheetByMinimum(QWidget):
    """Tells the scroll area it has no height-for-width: a content with word-wrapped labels is then sized to the
    window down to its minimum height, not kept at its preferred height (which would scroll for nothing)."""

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return False
