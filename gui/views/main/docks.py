"""What frames the main window's chat column: its three docks (the chats list and the settings on the left, the
live panels on the right) and the status line at the bottom.

`place_docks` puts widgets the window made into docks and returns them; `StatusLine` makes and keeps the status
text and the busy bar. None sets anything on the window. May touch: QtWidgets / QtCore, the window's dock API.
"""

from __future__ import annotations

from typing import NamedTuple

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import (QDockWidget, QLabel, QMainWindow, QProgressBar, QScrollArea, QSizePolicy, QStatusBar,
                               QWidget)


class Docks(NamedTuple):
    history: QDockWidget
    controls: QDockWidget
    live: QDockWidget


def add_dock(window: QMainWindow, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
    dock = QDockWidget(title, window)
    dock.setObjectName(name)
    dock.setWidget(widget)
    dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                     | QDockWidget.DockWidgetFeature.DockWidgetClosable)
    window.addDockWidget(area, dock)
    return dock


def place_docks(window: QMainWindow, history: QWidget, controls: QWidget, live: QWidget) -> Docks:
    """The chats list above the settings (scrolled, never sideways) on the left, the live panels on the right."""
    left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
    controls_dock = add_dock(window, "Settings", "settings_dock", WidthFollowingScroll(controls), left)
    history_dock = add_dock(window, "Chats", "chats_dock", history, left)
    window.splitDockWidget(history_dock, controls_dock, Qt.Orientation.Vertical)
    window.resizeDocks([history_dock, controls_dock], [340, 520], Qt.Orientation.Vertical)
    live_dock = add_dock(window, "Speculation", "speculation_dock", live, right)
    window.resizeDocks([controls_dock, live_dock], [290, 470], Qt.Orientation.Horizontal)
    return Docks(history_dock, controls_dock, live_dock)


def history_notice(*problems: str | None) -> str:
    """Why nothing is kept (the history's and the settings' problems), as one line; "" when all is kept."""
    return " ".join(f"{text.rstrip('.')}." for text in problems if text)


class WidthFollowingScroll(QScrollArea):
    """Scrolls its widget up and down, never sideways: its minimum width follows the widget's minimum, so rows that
    appear later (a method's parameters with long labels) widen the dock instead of being cut off at the right."""

    def __init__(self, widget: QWidget) -> None:
        super().__init__()
        self.setWidget(widget)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        widget.installEventFilter(self)
        self.follow()

    def follow(self) -> None:
        needed = self.widget().minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() + 4
        if needed != self.minimumWidth():
            self.setMinimumWidth(needed)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.follow()
        return super().eventFilter(watched, event)


class StatusLine:
    """The status bar's text (`label`) and busy bar (`progress`: shown while a model loads or a reply runs)."""

    def __init__(self, bar: QStatusBar) -> None:
        self.label = QLabel("Starting…")
        # a long status line is clipped, never widens the window (a QLabel's minimum width is its text's)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.label.setMinimumWidth(120)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        bar.addWidget(self.label, 1)
        bar.addPermanentWidget(self.progress)
        self.progress.hide()

    def say(self, text: str) -> None:
        self.label.setText(text)

    def set_busy(self, busy: bool) -> None:
        self.progress.setVisible(busy)
