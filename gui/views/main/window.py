"""The main window: chat in the middle, settings on the left, live stats and graphs on the right.

It wires three things and holds no state of its own: the chat session (gui.sessions.chat: which model, the
request in flight, the baseline, the history writes), the worker thread (gui.worker: the engine) and the
views (gui.views.*: rendering). Events arrive once per round through queued signals; the session folds them,
the transcript appends each round at once, while graphs and the stats strip are redrawn from a 20 Hz timer,
and only when something changed.

May touch: gui.sessions.chat, gui.worker (signals and request types), gui.persistence.recorder / gui.persistence.store (opening saved
chats), gui.persistence.settings (QSettings), the views' public methods. Never the engine's objects.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (QApplication, QDockWidget, QHBoxLayout, QLabel, QMainWindow, QMenu, QMessageBox,
                               QProgressBar, QPushButton, QScrollArea, QSizePolicy, QVBoxLayout, QWidget)

from engine.core.config import BACKENDS, SpecConfig, method_info
from engine.core.errors import ConfigError
from gui import theme
from gui.sessions.chat import CHAT, ChatSession, Settings, baseline_key
from gui.persistence.recorder import HistoryRecorder, turns_from_conversation
from gui.persistence.replay import apply_values, saved_run, settings_words
from gui.persistence.settings import AppSettings
from gui.persistence.store import HistoryError, HistoryStore
from gui.views.chat.controls import ControlsPanel
from gui.views.main.dialogs import ask_yes_no
from gui.views.chat.history_panel import HistoryPanel
from gui.views.chat.message_box import MessageBox
from gui.views.live.plots import PANELS, LivePlots
from gui.views.live.stats import StatsStrip
from gui.views.live.cost_curve import CostCurveView
from gui.views.dialogs.training import TrainingFront
from gui.views.chat.transcript import LegendBar, TranscriptView
from gui.worker import REMOTE_CODE, EngineLoader, GenerationRequest, LoadOptions, ModelInfo, WorkerThread

REFRESH_MS = 50  # graphs and stats strip: at most 20 redraws a second


def spec_words(spec: SpecConfig) -> str:
    """A setting as the user reads it: the method table's label, then k and the draft or layers."""
    if not spec.speculative:
        return spec.info.label
    extra = [f"k={spec.k}"] + ([f"draft {spec.draft}"] if spec.draft else []) + (
        [f"{spec.layers} layers"] if spec.layers else [])
    return f"{spec.info.label}, {', '.join(extra)}"


ABOUT = ("<b>SpecScope</b><br>Speculative decoding, running locally, that you can watch.<br><br>"
         "Each round a drafter proposes k tokens and the target model checks them in one pass: accepted tokens "
         "are kept, the first disagreement is replaced by the target's own token, and a fully accepted draft "
         "earns a bonus token.")


COST_CURVE_TOKENS = 9  # the verify-cost curve up to k = 8 drafted tokens plus the target's own

class MainWindow(QMainWindow):
    # what happened (tests and the scripted mode wait on these)
    reply_finished = Signal(object)  # Turn
    request_failed = Signal(str)
    model_ready = Signal(object)  # ModelInfo
    baseline_measured = Signal(float)
    draft_choices_shown = Signal(object)  # gui.views.dialogs.models.DraftChoices
    conversation_opened = Signal(int)
    consent_answered = Signal(str, str, bool)  # model, kind (remote-code | pickle), answer
    # asks, queued to the worker thread
    load_requested = Signal(str)
    cost_requested = Signal(int)  # measure (or read) the loaded target's verify-cost curve up to n tokens
    generation_requested = Signal(object)

    def __init__(self, loader: EngineLoader | None = None, palette: theme.Palette | None = None,
                 model: str | None = None, *, persist: bool = False, settings: AppSettings | None = None,
                 store: HistoryStore | None = None) -> None:
        """`persist`: keep the chat history (SQLite, gui/persistence/store.py) and restore/save the settings and window
        layout (QSettings, gui/persistence/settings.py). Off for scripted runs, benchmarks and most tests. The device, dtype,
        added models and safety answers always come from (and go to) `settings`."""
        super().__init__()
        self.setWindowTitle("SpecScope")
        self.palette_ = palette or theme.LIGHT
        self.persist = persist
        self.settings = settings if settings is not None else AppSettings()
        self.history_problem: str | None = None
        if store is None and persist:
            try:
                store = HistoryStore()
            except HistoryError as exc:
                self.history_problem = f"Chat history is off: {exc}"
        self.store = store
        self.session = ChatSession(HistoryRecorder(store), make_request=GenerationRequest)
        # replaceable: the yes/no question of the safety checks (tests answer it without a modal dialog)
        self.confirm = lambda title, text: ask_yes_no(self, title, text)
        self.model_manager = self.settings_dialog = self.compare_window = None  # made on first use
        self.fastest_dialog = None
        self.training = TrainingFront(self)  # "Train a drafter…" and the offer to train an eagle head
        self.draft_jobs = None  # the draft list's catalog look-ups (gui.jobs), made on first use
        self._draft_job = None
        self._own_job = None  # the loaded target's catalog entry, for its own drafter (controls.set_own_drafter)
        self._draft_target: str | None = None  # the target the draft list was made for
        self._pending_pair: tuple[str, str | None] | None = None  # the Models window's choice, until it loads
        self.geometry_restored = False
        self._drawn_version = -1
        self._drawn = dict.fromkeys(PANELS, -1)
        self._next_panel = 0
        self._closed = False
        self.editing: int | None = None  # the turn index of the message being edited (Edit), if any

        self._build_views(model or "default")
        self._build_menu()
        self.controls.method_picked.connect(self.training.method_picked)
        self.request_failed.connect(self.training.generation_failed)
        if persist:
            self.restore_settings(model_given=model is not None)
        self.worker_thread = WorkerThread(loader)
        self._sync_load_options()
        self._connect_worker(self.worker_thread.worker)
        self.refresh_timer = QTimer(self)
        self.refresh_timer.setInterval(REFRESH_MS)
        self.refresh_timer.timeout.connect(self._refresh_tick)
        self._update_actions()

    def _connect_worker(self, worker) -> None:
        self.load_requested.connect(worker.load)
        self.generation_requested.connect(worker.generate)
        worker.consent_needed.connect(self._on_consent_needed)
        worker.draft_consent_needed.connect(self._on_draft_consent_needed)
        worker.model_load_started.connect(self._on_load_started)
        worker.model_load_progressed.connect(self._set_status)
        worker.status_reported.connect(self._set_status)  # "Loading draft model…" and the like
        worker.model_loaded.connect(self._on_model_loaded)
        self.cost_requested.connect(worker.measure_cost)
        worker.model_loaded.connect(lambda _info: self.cost_requested.emit(COST_CURVE_TOKENS))
        worker.cost_measured.connect(self.cost_curve.show_curve)
        worker.cost_failed.connect(self.cost_curve.show_failure)
        worker.load_failed.connect(self._on_load_failed)
        worker.generation_started.connect(self._on_generation_started)
        worker.round_verified.connect(self._on_round_verified)
        worker.generation_finished.connect(self._on_generation_finished)
        worker.generation_failed.connect(self._on_generation_failed)

    # ------------------------------------------------------------------ construction, one panel each
    def _build_views(self, model: str) -> None:
        self.setCentralWidget(self._build_chat_column())
        self._build_settings_dock(model)
        self._build_history_dock()
        self._build_live_dock()
        self._build_status_bar()
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self._on_escape)
        self.stats_strip.show_figures(self.session.figures())

    def _build_chat_column(self) -> QWidget:
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(10, 8, 10, 10)
        column.setSpacing(6)
        self.legend = LegendBar(self.palette_)
        self.legend.show_rejected_toggled.connect(self.set_show_rejected)
        column.addWidget(self.legend)
        self.transcript = TranscriptView(self._token, self.palette_, actions=True)
        self.transcript.action_requested.connect(self._on_transcript_action)
        self.transcript.code_copied.connect(lambda text: self._set_status(f"Copied the code ({len(text)} characters)"))
        self.transcript.setPlaceholderText("Loading the model…")
        column.addWidget(self.transcript, 1)
        input_row = QHBoxLayout()
        input_row.setSpacing(6)
        self.message_box = MessageBox()
        self.message_box.setPlaceholderText("Loading the model… (you can type already)")
        self.message_box.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.message_box.send_requested.connect(self.send)
        self.message_box.edit_last_requested.connect(self.edit_message)
        input_row.addWidget(self.message_box, 1)
        buttons = QVBoxLayout()
        buttons.setSpacing(4)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("send_button")
        self.send_button.setToolTip("Send the message (Enter; Shift+Enter for a new line)")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop at the next round and keep what was written (Esc)")
        self.stop_button.clicked.connect(self.stop)
        self.new_chat_button = QPushButton("New chat")
        self.new_chat_button.setToolTip("Start over (Ctrl+N); the settings and the plain-speed figure stay")
        self.new_chat_button.clicked.connect(self.new_chat)
        for button in (self.send_button, self.stop_button, self.new_chat_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        input_row.addLayout(buttons)
        column.addLayout(input_row)
        return central

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.addDockWidget(area, dock)
        return dock

    def _build_settings_dock(self, model: str) -> None:
        self.controls = ControlsPanel()
        self.controls.apply(model=model)
        self.controls.settings_changed.connect(self._on_settings_changed)
        self.controls.model_change_requested.connect(self.load_model)
        self.controls.backend_change_requested.connect(self._on_backend_changed)
        self.controls.models_requested.connect(self.open_models)
        self.controls.download_requested.connect(self._download_suggested)
        self.controls.saved_settings_requested.connect(self.apply_saved_settings)
        scroll = QScrollArea()
        scroll.setWidget(self.controls)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(self.controls.minimumSizeHint().width() + 24)
        self.controls_dock = self._dock("Settings", "settings_dock", scroll, Qt.DockWidgetArea.LeftDockWidgetArea)

    def _build_history_dock(self) -> None:
        """The chats list, above the settings."""
        self.history_panel = HistoryPanel(self.store, self.palette_)
        if self.history_problem:
            self.history_panel.show_notice(self.history_problem)
        self.history_panel.conversation_opened.connect(self.open_conversation)
        self.history_panel.conversation_deleted.connect(self._on_conversation_deleted)
        self.history_dock = self._dock("Chats", "chats_dock", self.history_panel,
                                       Qt.DockWidgetArea.LeftDockWidgetArea)
        self.splitDockWidget(self.history_dock, self.controls_dock, Qt.Orientation.Vertical)
        self.resizeDocks([self.history_dock, self.controls_dock], [340, 520], Qt.Orientation.Vertical)

    def _build_live_dock(self) -> None:
        """The stats strip and the graphs, on the right."""
        live = QWidget()
        live_layout = QVBoxLayout(live)
        live_layout.setContentsMargins(6, 0, 6, 6)
        live_layout.setSpacing(6)
        self.stats_strip = StatsStrip(self.palette_)
        self.stats_strip.baseline_requested.connect(self.measure_baseline)
        live_layout.addWidget(self.stats_strip)
        self.cost_curve = CostCurveView()  # why speculation pays or doesn't here (engine.measure.verify_cost)
        live_layout.addWidget(self.cost_curve)
        self.plots = LivePlots(self.palette_)
        live_layout.addWidget(self.plots, 1)
        # a short screen scrolls the panel instead of raising the window's minimum height; a narrow dock
        # reflows the tiles (StatsStrip) instead of raising its minimum width
        self.live_scroll = scroll = QScrollArea()
        scroll.setWidget(live)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(self.stats_strip.minimumWidth() + 12 + scroll.verticalScrollBar().sizeHint().width())
        self.live_dock = self._dock("Speculation", "speculation_dock", scroll, Qt.DockWidgetArea.RightDockWidgetArea)
        self.resizeDocks([self.controls_dock, self.live_dock], [290, 470], Qt.Orientation.Horizontal)

    def _build_status_bar(self) -> None:
        self.status_label = QLabel("Starting…")
        # a long status line is clipped, never widens the window (a QLabel's minimum width is its text's)
        self.status_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status_label.setMinimumWidth(120)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.progress)
        self.progress.hide()

    def _build_menu(self) -> None:
        chat = self.menuBar().addMenu("&Chat")
        chat.addActions([QAction("&New chat", self, shortcut=QKeySequence.StandardKey.New, triggered=self.new_chat),
                         QAction("&Stop", self, triggered=self.stop)])
        chat.addSeparator()
        self._build_reply_actions(chat)
        chat.addSeparator()
        chat.addAction(QAction("Export chat as &Markdown…", self,
                               triggered=lambda: self._export_current("markdown")))
        chat.addAction(QAction("Export chat as &JSON…", self, triggered=lambda: self._export_current("json")))
        chat.addSeparator()
        chat.addAction(QAction("&Quit", self, shortcut=QKeySequence.StandardKey.Quit, triggered=self.close))
        view = self.menuBar().addMenu("&View")
        self.rejected_action = QAction("Show &rejected drafts", self, checkable=True, checked=True)
        self.rejected_action.toggled.connect(self.legend.show_rejected.setChecked)
        view.addAction(self.rejected_action)
        view.addSeparator()
        for dock in (self.history_dock, self.controls_dock, self.live_dock):
            view.addAction(dock.toggleViewAction())
        view.addSeparator()
        self.theme_actions = QActionGroup(self)  # the active theme is checked
        for name in ("light", "dark"):
            action = QAction(f"{name.title()} theme", self, checkable=True,
                             checked=theme.THEMES[name] == self.palette_,
                             triggered=lambda _=False, n=name: self.set_theme(n))
            action.setData(name)
            self.theme_actions.addAction(action)
            view.addAction(action)
        tools = self.menuBar().addMenu("&Tools")
        tools.addAction(QAction("&Models…", self, shortcut=QKeySequence("Ctrl+M"), triggered=self.open_models))
        settings = QKeySequence.keyBindings(QKeySequence.StandardKey.Preferences) or [QKeySequence("Ctrl+,")]
        tools.addAction(QAction("&Settings…", self, shortcut=settings[0], triggered=self.open_settings))
        tools.addAction(QAction("&Compare settings and k…", self, shortcut=QKeySequence("Ctrl+Shift+K"),
                                triggered=self.open_compare))
        tools.addAction(QAction("Which setting is &fastest here?…", self, shortcut=QKeySequence("Ctrl+Shift+F"),
                                triggered=self.open_fastest))
        self._build_help_menu()

    def _build_help_menu(self) -> None:
        help_ = self.menuBar().addMenu("&Help")
        help_.addAction(QAction("&What am I looking at?", self, shortcut=QKeySequence(QKeySequence.StandardKey.HelpContents),
                                triggered=lambda: self.open_help("guide")))
        help_.addAction(QAction("&Keyboard shortcuts", self, shortcut=QKeySequence("Ctrl+/"),
                                triggered=lambda: self.open_help("shortcuts")))
        help_.addSeparator()
        help_.addAction(QAction("&About SpecScope", self,
                                triggered=lambda: QMessageBox.about(self, "About SpecScope", ABOUT)))

    def open_help(self, page: str):
        """A Help page: "guide" (the colours and figures) or "shortcuts" (read from the menus' actions)."""
        from gui.views.dialogs.help import HelpPage, guide_html, shortcuts_html

        if page == "guide":
            dialog = HelpPage("What am I looking at?", guide_html(self.palette_), self)
        else:
            actions = [a for menu in self.menuBar().findChildren(QMenu) for a in menu.actions()]
            dialog = HelpPage("Keyboard shortcuts", shortcuts_html(list(dict.fromkeys(actions))), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose, True)
        self._show_window(dialog)
        return dialog

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1440, 900)

    # ------------------------------------------------------------------ public actions
    @property
    def model_info(self) -> ModelInfo | None:
        return self.session.model_info

    @property
    def generating(self) -> bool:
        return self.session.generating

    def start(self) -> None:
        """Load the model chosen in the settings (in the background)."""
        self.load_model(self.controls.model_name())

    def load_model(self, name: str, force: bool = False) -> None:
        """Load `name` in the background. `force`: also when it is the loaded one (the device or dtype
        changed, a safety question was answered)."""
        name = self.session.wants_load(name, force)
        if name is not None:
            self._update_actions()
            self.load_requested.emit(name)

    def send(self, text: str | None = None, settings: Settings | None = None) -> bool:
        """Send the message box's text (or `text`) with the settings panel's settings (or `settings`); returns
        whether a request went out. A message being edited (edit_message) forks the chat first."""
        if not self.session.ready or self.session.generating or self._comparing():
            return False
        text = (text if text is not None else self.message_box.toPlainText()).strip()
        if not text:
            return False
        try:
            settings = settings if settings is not None else self.controls.read()
        except ConfigError as exc:
            self.controls.revalidate()
            self._set_status(f"Refused: {exc}")
            return False
        self.controls.show_runtime_problem(None)
        if self.editing is not None:  # the chat goes on from before the edited message; the history keeps both
            self.session.fork_before(self.editing)
            self.editing = None
            self.transcript.render_turns(self.session.turns)
        request = self.session.send(text, settings, self.controls.model_name())
        self.history_panel.refresh()  # a new chat is in the sidebar from its first message
        self.history_panel.set_current(self.session.conversation_id)
        self.transcript.append_user(self.session.turns[-1])
        self.message_box.clear()
        self._begin(request, f"Generating · {spec_words(settings.spec)}…")
        return True

    def stop(self) -> None:
        """Stop at the next round boundary; what was committed stays."""
        if self.session.generating:
            self.worker_thread.stop_generation()
            self._set_status("Stopping at the next round…")

    def new_chat(self) -> None:
        if self.session.generating:
            self.worker_thread.stop_generation()
            self.session.abandon("cancelled")  # what it wrote is kept, marked as stopped
            self._end_active()
        self.session.new_chat()
        self.editing = None  # a message being edited belonged to the chat shown before
        self.controls.show_saved_settings(None)
        self.history_panel.set_current(None)
        self.history_panel.refresh()
        self.transcript.render_turns([])
        self.plots.clear()
        self.refresh_live_views()
        info = self.session.model_info
        self._set_status("New chat" + (f" · {info.describe()} · {self._baseline_words()}" if info else ""))
        self.message_box.setFocus()

    def _baseline_words(self) -> str:
        baseline = self.session.baseline()
        return f"plain speed {baseline.describe()}" if baseline is not None else "plain speed not measured yet"

    def _baseline_changed(self) -> None:
        """The plain speed is remembered (per model, device and dtype) and the Measure button says when it was
        measured."""
        baseline = self.session.baseline()
        if baseline is not None and self.persist and self.session.model_info is not None:
            self.settings.set_baseline(baseline_key(self.session.model_info), baseline.tok_per_s, baseline.measured_at)
        self.stats_strip.speedup.setToolTip(
            "tok/s of this reply / tok/s of plain decoding of this model on this device, in this dtype: "
            + (baseline.describe() if baseline is not None else "not measured yet")
            + " (a plain reply is the reference itself: no figure)")
        measure = self.stats_strip.measure
        measure.setText("Measure plain speed again" if baseline is not None else "Measure plain speed")
        measure.setToolTip((f"Plain speed of this model: {baseline.describe()}; every speed-up uses it. "
                            if baseline is not None else "")
                           + "Run the last message again with plain decoding (hidden) to measure it.")

    def measure_baseline(self) -> None:
        """Re-run the last message with plain decoding, hidden, to measure this model's reference tok/s."""
        if self._comparing():
            return
        try:
            settings = self.controls.read()
        except ConfigError:
            return
        request = self.session.baseline_request(settings.sampling, self.controls.model_name())
        if request is not None:
            self._begin(request, "Measuring plain decoding speed…")

    def set_show_rejected(self, show: bool) -> None:
        if self.transcript.show_rejected == show:
            return
        self.transcript.show_rejected = show
        self.rejected_action.setChecked(show)
        self.transcript.render_turns(self.session.turns, self.session.current)

    def set_theme(self, name_or_palette) -> None:
        palette = theme.resolve(name_or_palette) if isinstance(name_or_palette, str) else name_or_palette
        self.palette_ = palette
        for action in self.theme_actions.actions():
            action.setChecked(theme.THEMES[action.data()] == palette)
        app = QApplication.instance()
        if app is not None:
            theme.apply(app, palette)
        for view in (self.transcript, self.legend, self.plots, self.stats_strip, self.history_panel,
                     self.model_manager, self.compare_window, self.fastest_dialog):
            if view is not None:
                view.set_palette(palette)
        self.training.set_palette(palette)
        self.transcript.render_turns(self.session.turns, self.session.current)
        self.refresh_live_views()

    def refresh_live_views(self) -> None:
        """Redraw every graph and the stats strip now (at the end of a reply, on a theme change)."""
        live = self.session.live
        self.plots.update_from(live, self.session.baseline_tok_per_s())
        self.stats_strip.show_figures(self.session.figures())
        self._drawn = dict.fromkeys(self._drawn, live.version)
        self._drawn_version = live.version

    def _refresh_tick(self) -> None:
        """The 20 Hz timer while generating: the stats strip, and at most one graph per tick (round robin), so
        no tick holds the event loop for long and each graph is redrawn at most 5 times a second."""
        live = self.session.live
        if live.version != self._drawn_version:
            self._drawn_version = live.version
            self.stats_strip.show_figures(self.session.figures())
        for _ in range(len(PANELS)):
            panel = PANELS[self._next_panel]
            self._next_panel = (self._next_panel + 1) % len(PANELS)
            if self._drawn[panel] != live.version:
                self._drawn[panel] = live.version
                if self.live_dock.isVisible():
                    self.plots.update_from(live, self.session.baseline_tok_per_s(), panels=(panel,))
                return
        if not self.session.generating:
            self.refresh_timer.stop()

    # ------------------------------------------------------------------ the request in flight
    def _begin(self, request: GenerationRequest, status: str) -> None:
        self.controls.set_pending_note(None)
        self.progress.show()
        self._set_status(status)
        self._update_actions()
        self.generation_requested.emit(request)

    def _end_active(self) -> None:
        self.progress.setVisible(self.session.loading is not None)
        self.controls.set_pending_note(None)
        self._update_actions()

    def _on_settings_changed(self) -> None:
        if self.session.active is not None and self.session.active.purpose == CHAT:
            self.controls.set_pending_note("Changes apply from the next message.")
        self._refresh_draft_choices()
        self._update_actions()

    def _refresh_draft_choices(self) -> None:
        """The draft list offers the compatible, smaller models installed for the loaded target (looked up on
        a background thread, once per target, when a method needs a draft)."""
        info = self.session.model_info
        if info is None or info.requested == self._draft_target or not method_info(
                self.controls.method_name()).needs_draft:
            return
        from functools import partial

        from gui.views.dialogs.models import draft_choices

        self._draft_target = info.requested
        self._draft_job = self._drafts_thread().submit(partial(draft_choices, info.requested,
                                                               self.settings.added_models()))

    def _look_up_own_drafter(self, info: ModelInfo) -> None:
        """The loaded target's catalog entry, described on the drafts' background thread: a model that drafts
        for itself (MTP layers, a Gemma 4 assistant) has its method offered first (a server's model: none)."""
        self.controls.set_own_drafter(None)
        self._own_job = None
        if info.backend not in BACKENDS:
            return
        from functools import partial

        from engine.models.catalog import describe_name

        self._own_job = self._drafts_thread().submit(partial(describe_name, info.requested))

    def _drafts_thread(self):
        """The background thread of the draft list's and the own drafter's catalog look-ups (made on first
        use)."""
        if self.draft_jobs is None:
            from gui.jobs import BackgroundJobs

            self.draft_jobs = BackgroundJobs("drafts", self)
            self.draft_jobs.finished.connect(self._on_draft_choices)
            self.draft_jobs.finished.connect(self._on_own_drafter)
        return self.draft_jobs

    def _on_own_drafter(self, job_id: int, entry) -> None:
        if job_id == self._own_job:
            self.controls.set_own_drafter(entry)

    def _on_draft_choices(self, job_id: int, choices) -> None:
        if job_id == self._draft_job:
            self.controls.set_draft_choices(list(choices.names), target_aliases=set(choices.target_aliases),
                                            note=choices.note, download=choices.download)
            self.draft_choices_shown.emit(choices)

    def _drafts_may_have_changed(self) -> None:
        """A download finished: the draft list is looked up again."""
        self._draft_target = None
        self._refresh_draft_choices()

    def _download_suggested(self, repo_id: str) -> None:
        """The settings panel's "Download …" button: the Models window downloads it."""
        manager = self.open_models()
        manager.repo.setText(repo_id)
        manager.start_download()

    def _update_actions(self) -> None:
        ready, idle = self.session.ready, not self.session.generating
        self.send_button.setEnabled(ready and idle and not self._comparing() and self.controls.config_problem() is None)
        self.stop_button.setEnabled(not idle)
        self.stats_strip.set_measure_enabled(ready and idle)

    def _set_status(self, text: str) -> None:
        self.status_label.setText(text)

    # ------------------------------------------------------------------ worker signals: loading
    def _on_load_started(self, name: str) -> None:
        self.session.load_started(name)
        self.progress.show()
        self._set_status(f"Loading {name} model…" if name == "default" else f"Loading {name}…")
        self.controls.set_model_state("loading…")
        self.transcript.setPlaceholderText(f"Loading {name}…")
        self._update_actions()

    def _on_model_loaded(self, info: ModelInfo) -> None:
        self.session.model_loaded(info)
        self.progress.setVisible(self.session.generating)
        self.controls.set_model_state(info.describe(), n_layers=info.n_layers, loaded_name=info.requested,
                                      backend=info.backend)
        self.transcript.setPlaceholderText(f"{info.name} is ready. Type a message below and press Enter.")
        self.message_box.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self.message_box.viewport().update()
        self._apply_pending_pair(info.requested)
        self._refresh_draft_choices()
        self._look_up_own_drafter(info)
        if self.persist:
            self.session.remember_baselines(self.settings.baselines())
        self._baseline_changed()
        self._set_status(f"Ready · {info.describe()}")
        self._update_actions()
        self.message_box.setFocus()
        self.model_ready.emit(info)

    def _on_load_failed(self, name: str, message: str) -> None:
        self.session.load_ended()
        self._pending_pair = None  # a model that fails to load never changes the chat's settings
        self.progress.setVisible(self.session.generating)
        text = f"Could not load {name}: {message}"
        self._set_status(text)
        self.controls.revert_model()
        info = self.session.model_info
        self.controls.set_model_state(info.describe() if info else "not loaded")
        self.controls.show_runtime_problem(text)
        if info is None:
            self.transcript.setPlaceholderText(text)
        self.transcript.append_notice(text)
        self._update_actions()
        self.request_failed.emit(text)

    # ------------------------------------------------------------------ worker signals: generation
    def _on_generation_started(self, request_id: int, event) -> None:
        turn = self.session.on_started(request_id, event)
        if turn is None:
            return
        self.transcript.begin_assistant(turn)
        self.plots.clear(event.k if event.method != "none" else 0)
        self.stats_strip.show_figures(self.session.figures())
        self._drawn = dict.fromkeys(self._drawn, self.session.live.version)
        self._drawn_version = self.session.live.version
        self.refresh_timer.start()

    def _on_round_verified(self, request_id: int, event) -> None:
        tokens = self.session.on_round(request_id, event)
        if tokens is not None:
            self.transcript.append_tokens(tokens)

    def _on_generation_finished(self, request_id: int, event) -> None:
        outcome = self.session.on_finished(request_id, event)
        if outcome is None:
            return
        self._end_active()
        self._set_status(outcome.status)
        self._baseline_changed()
        if outcome.purpose != CHAT:
            if outcome.baseline is not None:
                self.refresh_live_views()
                self.baseline_measured.emit(outcome.baseline)
            return
        self.history_panel.refresh()
        if outcome.turn is not None:
            self.transcript.end_assistant(outcome.turn)
        self.refresh_live_views()
        if outcome.turn is not None:
            self.reply_finished.emit(outcome.turn)

    def _on_generation_failed(self, request_id: int, message: str) -> None:
        outcome = self.session.on_failed(request_id, message)
        if outcome is None:
            return
        self._end_active()
        if outcome.purpose == CHAT:
            self.history_panel.refresh()
            if outcome.restored_text is not None:
                self.transcript.render_turns(self.session.turns)
                if not self.message_box.toPlainText().strip():
                    self.message_box.setPlainText(outcome.restored_text)
            elif outcome.turn is not None:
                self.transcript.end_assistant(outcome.turn)
            self.transcript.append_notice(f"Not generated: {message}")
        self.controls.show_runtime_problem(message)
        self._set_status(outcome.status)
        self.refresh_live_views()
        self.request_failed.emit(message)

    # ------------------------------------------------------------------ reply actions: Copy, Regenerate, Edit
    def _build_reply_actions(self, menu) -> None:
        from gui.views.chat.transcript import ACTION_TIPS

        actions = (("&Copy last reply", "Ctrl+Shift+C", ACTION_TIPS["copy"], lambda: self.copy_reply()),
                   ("&Regenerate last reply", "Ctrl+R", ACTION_TIPS["regenerate"], lambda: self.regenerate()),
                   ("Regenerate with the c&urrent settings", "Ctrl+Shift+R",
                    "Write the last reply again with the settings panel's settings, in a new branch of the chat",
                    lambda: self.regenerate(current=True)),
                   ("&Edit last message", "Ctrl+E", ACTION_TIPS["edit"], lambda: self.edit_message()))
        for label, keys, tip, slot in actions:
            action = QAction(label, self, shortcut=QKeySequence(keys), triggered=slot)
            action.setToolTip(tip if keys in tip else f"{tip} ({keys})")
            menu.addAction(action)
        menu.setToolTipsVisible(True)

    def _on_transcript_action(self, action: str, index: int) -> None:
        {"copy": self.copy_reply, "regenerate": self.regenerate, "edit": self.edit_message}[action](index)

    def _last_turn(self, role: str) -> int | None:
        turns = self.session.turns
        return next((i for i in range(len(turns) - 1, -1, -1) if turns[i].role == role), None)

    def copy_reply(self, index: int | None = None) -> str | None:
        """Put a reply's text (the last one's by default) on the clipboard: what the model wrote, no rejected
        drafts, no glyphs. Returns it."""
        index = self._last_turn("assistant") if index is None else index
        if index is None or not self.session.turns[index].text:
            self._set_status("No reply to copy yet")
            return None
        text = self.session.turns[index].text
        QApplication.clipboard().setText(text)
        self._set_status(f"Copied the reply ({len(text)} characters)")
        return text

    def regenerate(self, index: int | None = None, current: bool = False) -> bool:
        """Write a reply (the last one by default) again with the settings it ran with (or, with `current` or
        when they are not known, the settings panel's). The chat forks before the message it answered."""
        index = self._last_turn("assistant") if index is None else index
        if index is None or index == 0:
            self._set_status("No reply to regenerate yet")
            return False
        if self.session.generating or self._comparing() or not self.session.ready:
            self._set_status("Wait for the reply (or the model) first, or stop it")
            return False
        settings = None if current else self.session.settings_of(index)
        if settings is None:
            try:
                settings = self.controls.read()
            except ConfigError as exc:
                self._set_status(f"Refused: {exc}")
                return False
        self.editing = None
        text = self.session.fork_before(index - 1)
        self.transcript.render_turns(self.session.turns)
        return self.send(text, settings)

    def edit_message(self, index: int | None = None) -> bool:
        """Put one of your messages (the last one by default) in the message box; sending it forks the chat
        there (the history keeps both branches). Esc cancels."""
        index = self._last_turn("user") if index is None else index
        if index is None or self.session.generating:
            self._set_status("No message to edit yet" if index is None else "Wait for the reply or stop it first")
            return False
        self.editing = index
        self.message_box.setPlainText(self.session.turns[index].text)
        self.message_box.moveCursor(QTextCursor.MoveOperation.End)
        self.message_box.setFocus()
        self._set_status("Editing a message: Enter sends it as a new branch of this chat (the history keeps both); "
                         "Esc cancels")
        return True

    def _on_escape(self) -> None:
        if self.session.generating:
            self.stop()
        elif self.editing is not None:
            self.editing = None
            self.message_box.clear()
            self._set_status("Edit cancelled")

    # ------------------------------------------------------------------ history
    def open_conversation(self, conversation_id: int) -> bool:
        """Show a saved conversation, coloured as it was made; the next message continues it."""
        if self.store is None:
            return False
        if self.session.generating or self._comparing():
            self._set_status("Stop the reply first, then open another chat")
            self.history_panel.set_current(self.session.conversation_id)
            return False
        try:
            conversation = self.store.load_conversation(conversation_id)
        except HistoryError as exc:
            self._set_status(f"Could not open the chat: {exc}")
            return False
        run = saved_run(conversation)
        self.session.open_saved(conversation_id, *turns_from_conversation(conversation), run=run)
        self.editing = None  # a message being edited belonged to the chat shown before
        self.transcript.render_turns(self.session.turns)
        self.plots.clear(run.k if run is not None else 0)
        self.refresh_live_views()  # its last reply's stats cards and graphs, folded again from its rounds
        self.history_panel.set_current(conversation_id)
        self.controls.show_saved_settings(settings_words(run.settings) if run is not None else None)
        self._set_status(f"Opened “{conversation.title}”")
        self.conversation_opened.emit(conversation_id)
        return True

    def apply_saved_settings(self) -> None:
        """The settings panel takes what the reopened chat's last reply ran with (loading its model if
        another one is loaded)."""
        saved = self.session.saved_settings
        if not saved:
            return
        values = apply_values(saved)
        model = values.pop("model", None)
        try:
            self.controls.apply(**values)
        except ConfigError as exc:
            self._set_status(f"Could not use this chat's settings: {exc}")
            return
        self.controls.show_saved_settings(None)
        self._set_status(f"Settings of this chat: {settings_words(saved)}")
        if model and model != self.session.model_name(model):
            self.controls.apply(model=model)
            self.load_model(model)

    def _on_conversation_deleted(self, conversation_id: int) -> None:
        if self.session.conversation_id == conversation_id:
            self.new_chat()

    def _export_current(self, fmt: str) -> None:
        if self.session.conversation_id is None:
            self._set_status("Nothing to export yet: this chat has no saved message")
            return
        if self.history_panel.export(self.session.conversation_id, fmt=fmt) is not None:
            self._set_status("Chat exported")

    # ------------------------------------------------------------------ settings (QSettings)
    def restore_settings(self, model_given: bool = False) -> None:
        """The last session's settings panel and window layout (the command line's model wins)."""
        settings = self.settings
        values = settings.chat_values()
        if model_given:
            values.pop("model", None)
        try:
            self.controls.apply(**values)
        except ConfigError:  # a method this version does not know: keep the defaults
            pass
        geometry = settings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.geometry_restored = self.restoreGeometry(geometry)
        state = settings.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        show_rejected = settings.value("view/show_rejected", None, bool)
        if show_rejected is not None:
            self.set_show_rejected(show_rejected)

    def save_settings(self) -> None:
        values = self.controls.values()
        values["model"] = self.session.model_name(values["model"])
        self.settings.set_chat_values(values)
        self.settings.set_value("window/geometry", self.saveGeometry())
        self.settings.set_value("window/state", self.saveState())
        self.settings.set_value("view/show_rejected", self.transcript.show_rejected)
        self.settings.sync()

    # ------------------------------------------------------------------ loading options and safety answers
    def load_options(self) -> LoadOptions:
        answers = self.session.consent_answers(self.settings.consent_answers())
        device, dtype = self.session.device_override or (self.settings.device(), self.settings.dtype())
        return LoadOptions(device=device, dtype=dtype, backend=self.controls.backend_name(),
                           remote_code_allowed=answers.remote_code_allowed,
                           remote_code_refused=answers.remote_code_refused, pickle_allowed=answers.pickle_allowed,
                           pickle_refused=answers.pickle_refused)

    def _sync_load_options(self) -> None:
        self.worker_thread.worker.load_options = self.load_options()

    def set_device(self, device: str, dtype: str = "auto", remember: bool = True) -> None:
        """Device and dtype for the next load (the model manager's pickers; --device, for this run only)."""
        if remember:
            self.settings.set_device(device, dtype)
            self.session.device_override = None
        else:
            self.session.device_override = (device, dtype)
        self._sync_load_options()

    def set_backend(self, backend: str) -> None:
        """The backend for the next load (--backend), without loading."""
        self.controls.set_backend(backend)
        self._sync_load_options()

    def _on_backend_changed(self, _backend: str) -> None:
        """The settings panel's backend changed: the target loads again on it (through the worker)."""
        self._sync_load_options()
        if self.model_manager is not None:
            self.model_manager.set_backend(self.controls.backend_name())
        info = self.session.model_info
        self.load_model(info.requested if info is not None else self.controls.model_name(), force=True)

    def consent(self, kind: str, model: str) -> bool | None:
        return self.session.consent(kind, model, self.settings.consent(kind, model))

    def _on_consent_needed(self, model: str, kind: str, question: str) -> None:
        """Asked once per model: the answer is remembered (QSettings) and the load goes on with it."""
        self.session.load_ended()
        self.progress.setVisible(self.session.generating)
        title = "Run this model's own code?" if kind == REMOTE_CODE else "Load pickle checkpoints?"
        answer = bool(self.confirm(title, question))
        self.session.answer_consent(kind, model, answer)
        self.settings.set_consent(kind, model, answer)
        self._sync_load_options()
        self.consent_answered.emit(model, kind, answer)
        if kind == REMOTE_CODE and not answer:
            self._set_status(f"Loading {model} without running its code…")
        self.load_model(model, force=True)

    def _on_draft_consent_needed(self, model: str, kind: str, question: str) -> None:
        """A draft model's safety question (asked when a reply needs the draft): remembered like a target's;
        the reply that needed it failed, so the message is sent again by the user."""
        title = "Run the draft model's own code?" if kind == REMOTE_CODE else "Load the draft's pickle checkpoints?"
        answer = bool(self.confirm(title, question))
        self.session.answer_consent(kind, model, answer)
        self.settings.set_consent(kind, model, answer)
        self._sync_load_options()
        self.consent_answered.emit(model, kind, answer)

    # ------------------------------------------------------------------ dialogs
    def _show_window(self, window) -> None:
        window.show()
        if QApplication.platformName() != "offscreen":  # it has no window stack (and says so on stderr)
            window.raise_()
            window.activateWindow()

    def open_models(self):
        """The model manager (model facts, target/draft pairing, downloads)."""
        if self.model_manager is None:
            from gui.views.dialogs.models import ModelManager

            self.model_manager = ModelManager(self.settings, self.palette_,
                                              target=self.session.model_name(self.controls.model_name()),
                                              draft=self.controls.draft_name(), parent=self)
            self.model_manager.setWindowFlag(Qt.WindowType.Window, True)
            self.model_manager.set_backend(self.controls.backend_name())
            self.model_manager.load_requested.connect(self._load_from_manager)
            self.model_manager.download_finished.connect(lambda _result: self._drafts_may_have_changed())
            self.model_manager.train_requested.connect(self.training.open)
            self.model_manager.resize(self.model_manager.sizeHint())
        self._show_window(self.model_manager)
        return self.model_manager

    def _load_from_manager(self, target: str, draft, device: str, dtype: str) -> None:
        options = self.load_options()
        # the Models window loads on its Backend choice
        backend = self.model_manager.backend_name() if self.model_manager is not None else options.backend
        changed_device = (options.device, options.dtype, options.backend) != (device, dtype, backend)
        self.controls.set_backend(backend)
        self.set_device(device, dtype)
        self._pending_pair = (target, draft)  # applied once the target has loaded (_apply_pending_pair)
        if self.session.model_info is not None and self.session.model_info.requested == target \
                and not changed_device:
            self._apply_pending_pair(target)  # already loaded: nothing to wait for
            return
        self.load_model(target, force=changed_device)

    def _apply_pending_pair(self, loaded: str) -> None:
        """The Models window's target and draft become the chat's settings only once that target loaded."""
        pending, self._pending_pair = self._pending_pair, None
        if pending is None or pending[0] != loaded:
            return
        target, draft = pending
        if draft:
            self.controls.apply(method="draft-model", draft=draft)
        elif method_info(self.controls.method_name()).needs_draft:
            self.controls.apply(method="none")
        self.controls.apply(model=target)

    def open_settings(self):
        from gui.persistence.settings import app_settings
        from gui.views.dialogs.settings import SettingsDialog

        if self.settings_dialog is None:
            self.settings_dialog = SettingsDialog(
                history_path=str(self.store.path) if self.store is not None else "",
                settings_path=self.settings.qsettings.fileName() or app_settings().fileName(), parent=self)
            self.settings_dialog.token_saved.connect(lambda _storage: self._token_changed())
            self.settings_dialog.token_removed.connect(self._token_changed)
        self.settings_dialog.refresh()
        self.settings_dialog.show()
        return self.settings_dialog

    def _token_changed(self) -> None:
        if self.model_manager is not None:
            self.model_manager.update_token_note()

    # ------------------------------------------------------------------ compare window
    def open_compare(self):
        """Show the compare window (settings side by side, k sweep); it runs on this window's worker."""
        if self.compare_window is None:
            from gui.views.compare.window import CompareWindow

            self.compare_window = CompareWindow(
                self.worker_thread, self.palette_,
                model_name=lambda: self.session.model_name(self.controls.model_name()),
                chat_busy=lambda: self.session.busy_reason() or self._fastest_busy(),
                apply_to_chat=self._apply_compared_spec, parent=self)
            self.compare_window.running_changed.connect(lambda _running: self._update_actions())
            self.compare_window.resize(self.compare_window.sizeHint())
        self._show_window(self.compare_window)
        return self.compare_window

    def _comparing(self) -> bool:
        """A comparison or the fastest-setting sweep holds the device."""
        return ((self.compare_window is not None and self.compare_window.running)
                or (self.fastest_dialog is not None and self.fastest_dialog.running))

    def _fastest_busy(self) -> str | None:
        running = self.fastest_dialog is not None and self.fastest_dialog.running
        return "The fastest-setting sweep is running: wait for it or stop it first." if running else None

    def open_fastest(self):
        """"Which setting is fastest here?": a short sweep with repeats on the chat's last prompt."""
        if self.fastest_dialog is None:
            from gui.views.dialogs.fastest import FastestDialog

            compare_busy = lambda: ("A comparison is running: stop it first."  # noqa: E731
                                    if self.compare_window is not None and self.compare_window.running else None)
            self.fastest_dialog = FastestDialog(
                self.worker_thread, self.palette_, prompt=self.session.last_prompt,
                model_name=lambda: self.session.model_name(self.controls.model_name()),
                sampling=lambda: self.controls.read().sampling, draft=self.controls.usable_draft,
                busy=lambda: self.session.busy_reason() or compare_busy(),
                apply_to_chat=self._apply_compared_spec, parent=self)
            self.fastest_dialog.setWindowFlag(Qt.WindowType.Window, True)
            self.fastest_dialog.running_changed.connect(lambda _running: self._update_actions())
            self.fastest_dialog.resize(self.fastest_dialog.sizeHint())
        self._show_window(self.fastest_dialog)
        return self.fastest_dialog

    def _apply_compared_spec(self, spec: SpecConfig) -> None:
        self.controls.apply(method=spec.method, k=spec.k, draft=spec.draft, layers=spec.layers)
        self._set_status(f"Settings applied: {spec.label()}")

    def _token(self, serial: int):
        tokens = self.session.tokens
        return tokens[serial] if 0 <= serial < len(tokens) else None

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Stop the generator at the next round and join the worker thread (and the model manager's); save the
        settings and close the history. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.refresh_timer.stop()
        if self.persist:
            self.save_settings()
        if self.compare_window is not None:
            self.compare_window.close()
        if self.fastest_dialog is not None:
            self.fastest_dialog.close()
        if self.model_manager is not None:
            self.model_manager.shutdown()
        if self.draft_jobs is not None:
            self.draft_jobs.shutdown()
        self.training.shutdown()  # cancels a training run (its checkpoint is kept) and waits for it
        self.worker_thread.shutdown()
        self.session.abandon("closed")  # what it wrote is kept, marked as ended by closing (not an error)
        if self.store is not None:
            if self.session.recorder.close():  # writes a busy database still held back
                print(f"specscope: {self.session.recorder.last_error}", file=sys.stderr)
            self.store.close()

    def closeEvent(self, event) -> None:  # noqa: N802
        self.shutdown()
        super().closeEvent(event)
