"""Where the main window opens: on the screen it opens on, never bigger than it.

`fit_to_screen` is the arithmetic (pure, on QRect/QSize: testable without a screen); `place_on_screen` applies
it to a window before it is shown: the first window at most `SCREEN_SHARE` of the screen's available area,
centred; a remembered geometry kept where it fits, else shrunk and moved fully onto the current screen (saved
on a larger or a disconnected monitor).

May touch: QtCore geometry, QtGui screens, the window's geometry. Nothing else.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtGui import QGuiApplication

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
