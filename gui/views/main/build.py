"""The main window's widgets, built once: the chat column in the middle, the chats list and the settings on the
left, the live dock on the right, the status bar. Each builder sets the window's view attributes and connects the
views' signals to the window's (or its helpers') slots; none keeps state.

May touch: the views' constructors and signals, QtWidgets.
"""

from __future__ import annotations

from functools import partial

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (QDockWidget, QHBoxLayout, QLabel, QProgressBar, QPushButton, QScrollArea, QSizePolicy,
                               QVBoxLayout, QWidget)

from gui.views.chat.controls import ControlsPanel
from gui.views.chat.history_panel import HistoryPanel
from gui.views.chat.message_box import ComposeNotice, MessageBox
from gui.views.chat.token_popover import TokenPopover
from gui.views.chat.transcript import LegendBar, TranscriptView
from gui.views.live.cost_curve import CostCurveView
from gui.views.live.plots import LivePlots
from gui.views.live.stats import StatsStrip
from gui.views.main.live_dock import LiveDock


def build_views(window, model: str) -> None:
    window.setCentralWidget(build_chat_column(window))
    build_settings_dock(window, model)
    build_history_dock(window)
    build_live_dock(window)
    build_status_bar(window)
    QShortcut(QKeySequence(Qt.Key.Key_Escape), window, activated=window.replies.escape)


def token_at(session, serial: int):
    """The chat's token `serial` (the transcript's tooltips), or None."""
    tokens = session.tokens
    return tokens[serial] if 0 <= serial < len(tokens) else None


def build_chat_column(window) -> QWidget:
    central = QWidget()
    column = QVBoxLayout(central)
    column.setContentsMargins(10, 8, 10, 10)
    column.setSpacing(6)
    window.legend = LegendBar(window.palette_, colour_by=True)
    window.legend.show_rejected_toggled.connect(window.set_show_rejected)
    window.legend.colouring_changed.connect(window.set_colouring)
    column.addWidget(window.legend)
    window.transcript = TranscriptView(partial(token_at, window.session), window.palette_, actions=True,
                                       round_of=window.session.round_of)
    window.transcript.action_requested.connect(window.replies.run)
    window.transcript.code_copied.connect(lambda text: window.set_status(f"Copied the code ({len(text)} characters)"))
    window.transcript.setPlaceholderText("Loading the model…")
    column.addWidget(window.transcript, 1)
    window.compose_notice = ComposeNotice()  # a chat another window writes: read-only here, and what sending does
    column.addWidget(window.compose_notice)
    input_row = QHBoxLayout()
    input_row.setSpacing(6)
    window.message_box = MessageBox()
    window.message_box.setPlaceholderText("Loading the model… (you can type already)")
    window.message_box.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
    window.message_box.send_requested.connect(window.send)
    window.message_box.edit_last_requested.connect(window.replies.edit_message)
    input_row.addWidget(window.message_box, 1)
    input_row.addLayout(_build_chat_buttons(window))
    column.addLayout(input_row)
    return central


def _build_chat_buttons(window) -> QVBoxLayout:
    buttons = QVBoxLayout()
    buttons.setSpacing(4)
    window.send_button = QPushButton("Send")
    window.send_button.setObjectName("send_button")
    window.send_button.setToolTip("Send the message (Enter; Shift+Enter for a new line)")
    window.send_button.clicked.connect(window.send)
    window.stop_button = QPushButton("Stop")
    window.stop_button.setToolTip("Stop at the next round and keep what was written (Esc)")
    window.stop_button.clicked.connect(window.stop)
    window.new_chat_button = QPushButton("New chat")
    window.new_chat_button.setToolTip("Start over (Ctrl+N); the settings and the plain-speed figure stay")
    window.new_chat_button.clicked.connect(window.new_chat)
    for button in (window.send_button, window.stop_button, window.new_chat_button):
        buttons.addWidget(button)
    buttons.addStretch(1)
    return buttons


def add_dock(window, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
    dock = QDockWidget(title, window)
    dock.setObjectName(name)
    dock.setWidget(widget)
    dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                     | QDockWidget.DockWidgetFeature.DockWidgetClosable)
    window.addDockWidget(area, dock)
    return dock


def build_settings_dock(window, model: str) -> None:
    window.controls = controls = ControlsPanel()
    controls.apply(model=model)
    controls.settings_changed.connect(window.settings_changed)
    controls.model_change_requested.connect(window.load_model)
    controls.backend_change_requested.connect(window.loading.backend_changed)
    controls.backend_noted.connect(window.set_status)  # a method that runs on another backend: why, and costs
    controls.models_requested.connect(window.open_models)
    controls.download_requested.connect(window.tools.download_suggested)
    controls.saved_settings_requested.connect(window.conversations.apply_saved_settings)
    scroll = WidthFollowingScroll(controls)
    window.controls_dock = add_dock(window, "Settings", "settings_dock", scroll, Qt.DockWidgetArea.LeftDockWidgetArea)


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

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.follow()
        return super().eventFilter(watched, event)


def build_history_dock(window) -> None:
    """The chats list, above the settings."""
    window.history_panel = HistoryPanel(window.store, window.palette_)
    problems = filter(None, (window.history_problem, window.settings.problem()))  # why nothing is kept
    notice = " ".join(f"{text.rstrip('.')}." for text in problems)
    if notice:
        window.history_panel.show_notice(notice)
    window.history_panel.conversation_opened.connect(window.conversations.open)
    window.history_panel.conversation_deleted.connect(window.conversations.deleted)
    window.history_dock = add_dock(window, "Chats", "chats_dock", window.history_panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea)
    window.splitDockWidget(window.history_dock, window.controls_dock, Qt.Orientation.Vertical)
    window.resizeDocks([window.history_dock, window.controls_dock], [340, 520], Qt.Orientation.Vertical)


def build_live_dock(window) -> None:
    """The live panels (gui.views.main.live_dock.LIVE_PANELS), on the right."""
    window.live = LiveDock(window.palette_, window.session, window)
    window.refresh_timer = window.live.timer
    window.live_scroll = window.live.widget
    window.stats_strip = window.live.panel(StatsStrip)
    window.stats_strip.baseline_requested.connect(window.measure_baseline)
    window.stats_strip.show_figures(window.session.figures())  # the empty chat's
    window.cost_curve = window.live.panel(CostCurveView)  # why speculation pays or doesn't here
    window.plots = window.live.panel(LivePlots)
    window.round_focus = window.live.focus  # the round hovered and the round picked, in the transcript and the panels
    window.round_focus.attach(window.transcript)  # hovering a token highlights its round; a click opens its tree
    window.transcript.token_hovered.connect(window.round_focus.hover_token)
    window.round_focus.popover = window.token_popover = TokenPopover(window.palette_, window)
    window.transcript.token_clicked.connect(window.round_focus.click_token)
    window.live_dock = add_dock(window, "Speculation", "speculation_dock", window.live.widget,
                                Qt.DockWidgetArea.RightDockWidgetArea)
    window.resizeDocks([window.controls_dock, window.live_dock], [290, 470], Qt.Orientation.Horizontal)


def build_status_bar(window) -> None:
    window.status_label = QLabel("Starting…")
    # a long status line is clipped, never widens the window (a QLabel's minimum width is its text's)
    window.status_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    window.status_label.setMinimumWidth(120)
    window.progress = QProgressBar()
    window.progress.setRange(0, 0)
    window.progress.setMaximumWidth(160)
    window.progress.setMaximumHeight(14)
    window.progress.setTextVisible(False)
    window.statusBar().addWidget(window.status_label, 1)
    window.statusBar().addPermanentWidget(window.progress)
    window.progress.hide()
