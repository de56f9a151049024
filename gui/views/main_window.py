"""The main window: chat in the middle, settings on the left, live stats and graphs on the right.

It wires the session model (state), the worker thread (the engine) and the views (rendering). Events
arrive once per round through queued signals; the transcript appends each round at once, while graphs and
the stats strip are redrawn from a 20 Hz timer, and only when something changed.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (QApplication, QDockWidget, QHBoxLayout, QLabel, QMainWindow, QMessageBox,
                               QProgressBar, QPushButton, QScrollArea, QSizePolicy, QVBoxLayout, QWidget)

from engine.config import SpecConfig
from engine.errors import ConfigError
from gui import theme
from gui.history import HistoryRecorder, turns_from_conversation
from gui.session_model import MIN_BASELINE_TOKENS, SessionModel
from gui.settings import AppSettings
from gui.store import HistoryError, HistoryStore
from gui.views.controls import ControlsPanel
from gui.views.history_panel import HistoryPanel, ask_yes_no
from gui.views.message_box import MessageBox
from gui.views.plots import PANELS, LivePlots
from gui.views.stats import StatsStrip
from gui.views.transcript import LegendBar, TranscriptView
from gui.worker import PICKLE, REMOTE_CODE, EngineLoader, GenerationRequest, LoadOptions, ModelInfo, WorkerThread

REFRESH_MS = 50  # graphs and stats strip: at most 20 redraws a second
SETTINGS_KEYS = ("model", "method", "draft", "k", "layers", "temperature", "top_p", "top_k", "seed",
                 "max_new_tokens", "system_prompt")


class MainWindow(QMainWindow):
    # what happened (tests and the scripted mode wait on these)
    reply_finished = Signal(object)  # Turn
    request_failed = Signal(str)
    model_ready = Signal(object)  # ModelInfo
    baseline_measured = Signal(float)
    conversation_opened = Signal(int)
    consent_answered = Signal(str, str, bool)  # model, kind (remote-code | pickle), answer
    # asks, queued to the worker thread
    load_requested = Signal(str)
    generation_requested = Signal(object)

    def __init__(self, loader: EngineLoader | None = None, palette: theme.Palette | None = None,
                 model: str | None = None, *, persist: bool = False, settings: AppSettings | None = None,
                 store: HistoryStore | None = None) -> None:
        """`persist`: keep the chat history (SQLite, gui/store.py) and restore/save the settings and window
        layout (QSettings, gui/settings.py). Off for scripted runs, benchmarks and most tests. The device, dtype,
        added models and safety answers always come from (and go to) `settings`."""
        super().__init__()
        self.setWindowTitle("SpecScope")
        self.palette_ = palette or theme.LIGHT
        self.persist = persist
        self.settings = settings if settings is not None else AppSettings()
        self.session = SessionModel()
        self.history_problem: str | None = None
        if store is None and persist:
            try:
                store = HistoryStore()
            except HistoryError as exc:
                self.history_problem = f"Chat history is off: {exc}"
        self.store = store
        self.recorder = HistoryRecorder(store)
        self._request_settings: dict = {}
        self._consents: dict[tuple[str, str], bool] = {}
        self._device_override: tuple[str, str] | None = None
        # replaceable: the yes/no question of the safety checks (tests answer it without a modal dialog)
        self.confirm = lambda title, text: ask_yes_no(self, title, text)
        self.model_manager = None
        self.settings_dialog = None
        self.geometry_restored = False
        self.model_info: ModelInfo | None = None
        self._loading: str | None = None
        self._active: GenerationRequest | None = None
        self._next_request_id = 1
        self._drawn_version = -1
        self._drawn = dict.fromkeys(PANELS, -1)
        self._next_panel = 0
        self._pending_changes = False
        self._closed = False
        self._baseline_model = ""
        self.compare_window = None  # gui.views.compare.CompareWindow, made on first use

        self._build_views(model or "default")
        self._build_menu()
        if persist:
            self.restore_settings(model_given=model is not None)

        self.worker_thread = WorkerThread(loader)
        worker = self.worker_thread.worker
        self._sync_load_options()
        self.load_requested.connect(worker.load)
        worker.consent_needed.connect(self._on_consent_needed)
        self.generation_requested.connect(worker.generate)
        worker.model_load_started.connect(self._on_load_started)
        worker.model_load_progressed.connect(self._set_status)
        worker.model_loaded.connect(self._on_model_loaded)
        worker.load_failed.connect(self._on_load_failed)
        worker.generation_started.connect(self._on_generation_started)
        worker.round_verified.connect(self._on_round_verified)
        worker.generation_finished.connect(self._on_generation_finished)
        worker.generation_failed.connect(self._on_generation_failed)

        self.refresh_timer = QTimer(self)
        self.refresh_timer.setInterval(REFRESH_MS)
        self.refresh_timer.timeout.connect(self._refresh_tick)
        self._update_actions()

    # ------------------------------------------------------------------ construction
    def _build_views(self, model: str) -> None:
        p = self.palette_
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(10, 8, 10, 10)
        column.setSpacing(6)
        self.legend = LegendBar(p)
        self.legend.show_rejected_toggled.connect(self.set_show_rejected)
        column.addWidget(self.legend)
        self.transcript = TranscriptView(self._token, p)
        self.transcript.setPlaceholderText("Loading the model…")
        column.addWidget(self.transcript, 1)

        input_row = QHBoxLayout()
        input_row.setSpacing(6)
        self.message_box = MessageBox()
        self.message_box.setPlaceholderText("Loading the model… (you can type already)")
        self.message_box.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.message_box.send_requested.connect(self.send)
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
        self.setCentralWidget(central)

        # settings dock (left)
        self.controls = ControlsPanel()
        self.controls.apply(model=model)
        self.controls.settings_changed.connect(self._on_settings_changed)
        self.controls.model_change_requested.connect(self.load_model)
        scroll = QScrollArea()
        scroll.setWidget(self.controls)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(self.controls.minimumSizeHint().width() + 24)
        self.controls_dock = QDockWidget("Settings", self)
        self.controls_dock.setObjectName("settings_dock")
        self.controls_dock.setWidget(scroll)
        self.controls_dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                                       | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.controls_dock)
        self.controls.models_requested.connect(self.open_models)

        # chats dock (left, above the settings)
        self.history_panel = HistoryPanel(self.store, p)
        if self.history_problem:
            self.history_panel.show_notice(self.history_problem)
        self.history_panel.conversation_opened.connect(self.open_conversation)
        self.history_panel.conversation_deleted.connect(self._on_conversation_deleted)
        self.history_dock = QDockWidget("Chats", self)
        self.history_dock.setObjectName("chats_dock")
        self.history_dock.setWidget(self.history_panel)
        self.history_dock.setFeatures(self.controls_dock.features())
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.history_dock)
        self.splitDockWidget(self.history_dock, self.controls_dock, Qt.Orientation.Vertical)
        self.resizeDocks([self.history_dock, self.controls_dock], [230, 640], Qt.Orientation.Vertical)

        # speculation dock (right): stats strip + graphs
        live = QWidget()
        live_layout = QVBoxLayout(live)
        live_layout.setContentsMargins(6, 0, 6, 6)
        live_layout.setSpacing(6)
        self.stats_strip = StatsStrip(p)
        self.stats_strip.baseline_requested.connect(self.measure_baseline)
        live_layout.addWidget(self.stats_strip)
        self.plots = LivePlots(p)
        live_layout.addWidget(self.plots, 1)
        self.live_dock = QDockWidget("Speculation", self)
        self.live_dock.setObjectName("speculation_dock")
        self.live_dock.setWidget(live)
        self.live_dock.setFeatures(self.controls_dock.features())
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.live_dock)
        self.resizeDocks([self.controls_dock, self.live_dock], [290, 470], Qt.Orientation.Horizontal)

        # status bar
        self.status_label = QLabel("Starting…")
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.progress)
        self.progress.hide()

        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self.stop)
        self.stats_strip.show_figures(self.session.figures())

    def _build_menu(self) -> None:
        chat = self.menuBar().addMenu("&Chat")
        new = QAction("&New chat", self, shortcut=QKeySequence.StandardKey.New, triggered=self.new_chat)
        stop = QAction("&Stop", self, triggered=self.stop)
        quit_ = QAction("&Quit", self, shortcut=QKeySequence.StandardKey.Quit, triggered=self.close)
        chat.addActions([new, stop])
        chat.addSeparator()
        chat.addAction(QAction("Export chat as &Markdown…", self,
                               triggered=lambda: self._export_current("markdown")))
        chat.addAction(QAction("Export chat as &JSON…", self, triggered=lambda: self._export_current("json")))
        chat.addSeparator()
        chat.addAction(quit_)
        view = self.menuBar().addMenu("&View")
        self.rejected_action = QAction("Show &rejected drafts", self, checkable=True, checked=True)
        self.rejected_action.toggled.connect(self.legend.show_rejected.setChecked)
        view.addAction(self.rejected_action)
        view.addSeparator()
        view.addAction(self.history_dock.toggleViewAction())
        view.addAction(self.controls_dock.toggleViewAction())
        view.addAction(self.live_dock.toggleViewAction())
        view.addSeparator()
        for name in ("light", "dark"):
            view.addAction(QAction(f"{name.title()} theme", self, triggered=lambda _=False, n=name: self.set_theme(n)))
        tools = self.menuBar().addMenu("&Tools")
        tools.addAction(QAction("&Models…", self, shortcut=QKeySequence("Ctrl+M"), triggered=self.open_models))
        tools.addAction(QAction("&Settings…", self, shortcut=QKeySequence.StandardKey.Preferences,
                                triggered=self.open_settings))
        tools.addAction(QAction("&Compare settings and k…", self, shortcut=QKeySequence("Ctrl+Shift+C"),
                                triggered=self.open_compare))
        help_ = self.menuBar().addMenu("&Help")
        help_.addAction(QAction("&About SpecScope", self, triggered=self._about))

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1440, 900)

    # ------------------------------------------------------------------ public actions
    def start(self) -> None:
        """Load the model chosen in the settings (in the background)."""
        self.load_model(self.controls.model_name())

    def load_model(self, name: str, force: bool = False) -> None:
        """Load `name` in the background. `force`: also when it is the loaded one (the device or dtype
        changed, a safety question was answered)."""
        name = name.strip() or "default"
        if name == self._loading or (not force and self._loading is None and self.model_info is not None
                                     and name == self.model_info.requested):
            return
        self._loading = name
        self._update_actions()
        self.load_requested.emit(name)

    def send(self, text: str | None = None) -> bool:
        """Send the message box's text (or `text`); returns whether a request went out."""
        if self._active is not None or self._loading is not None or self.model_info is None or self._comparing():
            return False
        text = (text if text is not None else self.message_box.toPlainText()).strip()
        if not text:
            return False
        try:
            settings = self.controls.read()
        except ConfigError as exc:
            self.controls.revalidate()
            self._set_status(f"Refused: {exc}")
            return False
        self.session.system_prompt = settings.system_prompt
        self.controls.show_runtime_problem(None)
        self._request_settings = self._settings_record(settings)
        self.recorder.user_message(text, self._request_settings)
        self.history_panel.set_current(self.recorder.conversation_id)
        turn = self.session.add_user(text)
        self.transcript.append_user(turn)
        self.message_box.clear()
        request = GenerationRequest(request_id=self._take_id(), model=self._loaded_name,
                                    conversation=self.session.conversation(), spec=settings.spec,
                                    sampling=settings.sampling, max_new_tokens=settings.max_new_tokens)
        self._begin(request, f"Generating with {settings.spec.label()}…")
        return True

    def stop(self) -> None:
        """Stop at the next round boundary; what was committed stays."""
        if self._active is not None:
            self.worker_thread.stop_generation()
            self._set_status("Stopping at the next round…")

    def new_chat(self) -> None:
        if self._active is not None:
            self.worker_thread.stop_generation()
            if self._active.purpose == "chat":  # what it wrote is kept, marked as stopped
                self.recorder.reply_failed("stopped: a new chat was started", taken_back=False)
            self._end_active()
        self.session.new_chat()
        self.recorder.new_chat()
        self.history_panel.set_current(None)
        self.history_panel.refresh()
        self.transcript.render_turns([])
        self.plots.clear()
        self.refresh_live_views()
        self._set_status("New chat" + (f" · {self.model_info.describe()}" if self.model_info else ""))
        self.message_box.setFocus()

    def measure_baseline(self) -> None:
        """Re-run the last message with plain decoding, hidden, to measure this model's reference tok/s."""
        if self._active is not None or self.model_info is None or self._loading is not None or self._comparing():
            return
        history = self.session.conversation()
        while history and history[-1]["role"] == "assistant":
            history.pop()
        if not history or history[-1]["role"] != "user":
            history = ([m for m in history if m["role"] == "system"]
                       + [{"role": "user", "content": "Write a short paragraph about the sea."}])
        try:
            settings = self.controls.read()
        except ConfigError:
            return
        last = next((t for t in reversed(self.session.turns) if t.role == "assistant" and t.stats), None)
        budget = max(32, last.stats.committed_tokens) if last is not None else 128
        request = GenerationRequest(request_id=self._take_id(), model=self._loaded_name, conversation=history,
                                    spec=SpecConfig(method="none"), sampling=settings.sampling,
                                    max_new_tokens=budget, purpose="baseline")
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
        app = QApplication.instance()
        if app is not None:
            theme.apply(app, palette)
        self.transcript.set_palette(palette)
        self.legend.set_palette(palette)
        self.plots.set_palette(palette)
        self.stats_strip.set_palette(palette)
        self.history_panel.set_palette(palette)
        if self.model_manager is not None:
            self.model_manager.set_palette(palette)
        self.transcript.render_turns(self.session.turns, self.session.current)
        self.refresh_live_views()
        if self.compare_window is not None:
            self.compare_window.set_palette(palette)

    def refresh_live_views(self) -> None:
        """Redraw every graph and the stats strip now (at the end of a reply, on a theme change)."""
        live = self.session.live
        self.plots.update_from(live, self.session.baselines.get(live.model))
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
                    self.plots.update_from(live, self.session.baselines.get(live.model), panels=(panel,))
                return
        if self._active is None:
            self.refresh_timer.stop()

    @property
    def generating(self) -> bool:
        return self._active is not None

    @property
    def _loaded_name(self) -> str:
        return self.model_info.requested if self.model_info is not None else self.controls.model_name()

    # ------------------------------------------------------------------ worker signals
    def _on_load_started(self, name: str) -> None:
        self._loading = name
        self.progress.show()
        self._set_status(f"Loading {name} model…" if name == "default" else f"Loading {name}…")
        self.controls.set_model_state("loading…")
        self.transcript.setPlaceholderText(f"Loading {name}…")
        self._update_actions()

    def _on_model_loaded(self, info: ModelInfo) -> None:
        self._loading = None
        self.model_info = info
        self.progress.setVisible(self._active is not None)
        self.controls.set_model_state(info.describe(), n_layers=info.n_layers, loaded_name=info.requested)
        self.transcript.setPlaceholderText(f"{info.name} is ready. Type a message below and press Enter.")
        self.message_box.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self._set_status(f"Ready · {info.describe()}")
        self._update_actions()
        self.message_box.setFocus()
        self.model_ready.emit(info)

    def _on_load_failed(self, name: str, message: str) -> None:
        self._loading = None
        self.progress.setVisible(self._active is not None)
        text = f"Could not load {name}: {message}"
        self._set_status(text)
        self.controls.revert_model()
        self.controls.set_model_state(self.model_info.describe() if self.model_info else "not loaded")
        self.controls.show_runtime_problem(text)
        if self.model_info is None:
            self.transcript.setPlaceholderText(text)
        self.transcript.append_notice(text)
        self._update_actions()
        self.request_failed.emit(text)

    def _on_generation_started(self, request_id: int, event) -> None:
        request = self._active
        if request is None or request.request_id != request_id:
            return
        if request.purpose != "chat":
            self._baseline_model = event.model
            return
        turn = self.session.start(event)
        self.recorder.reply_started({**self._request_settings, "spec": event.spec_label, "model_label": event.model,
                                     "device": event.device, "dtype": event.dtype})
        self.transcript.begin_assistant(turn)
        self.plots.clear(event.k if event.method != "none" else 0)
        self.stats_strip.show_figures(self.session.figures())
        self._drawn = dict.fromkeys(self._drawn, self.session.live.version)
        self._drawn_version = self.session.live.version
        self.refresh_timer.start()

    def _on_round_verified(self, request_id: int, event) -> None:
        request = self._active
        if request is None or request.request_id != request_id or request.purpose != "chat":
            return
        tokens = self.session.apply_round(event)
        self.transcript.append_tokens(tokens)
        self.recorder.round_verified(event)  # one short transaction: a kill mid-reply keeps every round so far

    def _on_generation_finished(self, request_id: int, event) -> None:
        request = self._active
        if request is None or request.request_id != request_id:
            return
        self._end_active()
        if request.purpose == "baseline":
            tok_per_s = event.stats.tok_per_s
            if event.stop_reason == "cancelled" or event.stats.committed_tokens < MIN_BASELINE_TOKENS:
                self._set_status("Plain-speed measurement stopped before it had enough tokens")
                return
            self.session.record_baseline(self._baseline_model, tok_per_s)
            self.refresh_live_views()
            self._set_status(f"Plain decoding: {tok_per_s:.1f} tok/s on this machine")
            self.baseline_measured.emit(tok_per_s)
            return
        turn = self.session.finish(event)
        self.recorder.reply_finished(event)
        self.history_panel.refresh()
        if turn is not None:
            self.transcript.end_assistant(turn)
        self.refresh_live_views()
        stats = event.stats
        if event.error:
            self._set_status(f"Reply ended: {event.error}")
        else:
            self._set_status(f"Done · {stats.committed_tokens} tokens · {stats.tok_per_s:.1f} tok/s"
                             + (f" · acceptance {stats.acceptance_rate:.0%}" if stats.drafted_tokens else ""))
        if turn is not None:
            self.reply_finished.emit(turn)

    def _on_generation_failed(self, request_id: int, message: str) -> None:
        request = self._active
        if request is None or request.request_id != request_id:
            return
        self._end_active()
        if request.purpose == "chat":
            restored = self.session.fail(message)
            self.recorder.reply_failed(message, taken_back=restored is not None)
            self.history_panel.refresh()
            if restored is not None:
                self.transcript.render_turns(self.session.turns)
                if not self.message_box.toPlainText().strip():
                    self.message_box.setPlainText(restored)
            else:
                turn = self.session.turns[-1] if self.session.turns else None
                if turn is not None and turn.role == "assistant":
                    self.transcript.end_assistant(turn)
            self.transcript.append_notice(f"Not generated: {message}")
        self.controls.show_runtime_problem(message)
        self._set_status(f"Refused: {message}")
        self.refresh_live_views()
        self.request_failed.emit(message)

    # ------------------------------------------------------------------ internals
    def _take_id(self) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        return request_id

    def _begin(self, request: GenerationRequest, status: str) -> None:
        self._active = request
        self._pending_changes = False
        self.controls.set_pending_note(None)
        self.progress.show()
        self._set_status(status)
        self._update_actions()
        self.generation_requested.emit(request)

    def _end_active(self) -> None:
        self._active = None
        self.progress.setVisible(self._loading is not None)
        self.controls.set_pending_note(None)
        self._update_actions()

    def _on_settings_changed(self) -> None:
        if self._active is not None and self._active.purpose == "chat":
            self.controls.set_pending_note("Changes apply from the next message.")
        self._update_actions()

    def _update_actions(self) -> None:
        ready = self.model_info is not None and self._loading is None
        idle = self._active is None
        self.send_button.setEnabled(ready and idle and not self._comparing() and self.controls.config_problem() is None)
        self.stop_button.setEnabled(not idle)
        self.stats_strip.measure.setEnabled(ready and idle)

    def _set_status(self, text: str) -> None:
        self.status_label.setText(text)

    # ------------------------------------------------------------------ history
    def open_conversation(self, conversation_id: int) -> bool:
        """Show a saved conversation, coloured as it was made; the next message continues it."""
        if self.store is None:
            return False
        if self._active is not None or self._comparing():
            self._set_status("Stop the reply first, then open another chat")
            self.history_panel.set_current(self.recorder.conversation_id)
            return False
        try:
            conversation = self.store.load_conversation(conversation_id)
        except HistoryError as exc:
            self._set_status(f"Could not open the chat: {exc}")
            return False
        turns, tokens = turns_from_conversation(conversation)
        self.session.restore(turns, tokens)
        self.recorder.open(conversation_id)
        self.transcript.render_turns(self.session.turns)
        self.plots.clear()
        self.refresh_live_views()
        self.history_panel.set_current(conversation_id)
        self._set_status(f"Opened “{conversation.title}”")
        self.conversation_opened.emit(conversation_id)
        return True

    def _on_conversation_deleted(self, conversation_id: int) -> None:
        if self.recorder.conversation_id == conversation_id:
            self.new_chat()

    def _export_current(self, fmt: str) -> None:
        if self.recorder.conversation_id is None:
            self._set_status("Nothing to export yet: this chat has no saved message")
            return
        if self.history_panel.export(self.recorder.conversation_id, fmt=fmt) is not None:
            self._set_status("Chat exported")

    def _settings_record(self, settings) -> dict:
        """The settings a message ran with, as stored in the history (JSON-ready)."""
        spec, sampling = settings.spec, settings.sampling
        return {"model": self._loaded_name, "method": spec.method, "k": spec.k, "draft": spec.draft,
                "layers": spec.layers, "max_new_tokens": settings.max_new_tokens,
                "system_prompt": settings.system_prompt or None,
                "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                             "seed": sampling.seed}}

    # ------------------------------------------------------------------ settings (QSettings)
    def restore_settings(self, model_given: bool = False) -> None:
        """The last session's settings panel and window layout (the command line's model wins)."""
        settings = self.settings
        values = {}
        for key, kind in (("model", str), ("method", str), ("draft", str), ("k", int), ("layers", int),
                          ("temperature", float), ("top_p", float), ("top_k", int), ("seed", int),
                          ("max_new_tokens", int), ("system_prompt", str)):
            value = settings.value(f"chat/{key}", None, kind)
            if value is not None:
                values[key] = value
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
        controls = self.controls
        values = {"model": self._loaded_name if self.model_info is not None else controls.model_name(),
                  "method": controls.method.currentData(), "draft": controls.draft.currentText().strip(),
                  "k": controls.k.value(), "layers": controls.layers.value(),
                  "temperature": controls.temperature.value(), "top_p": controls.top_p.value(),
                  "top_k": controls.top_k.value(), "seed": controls.seed.value(),
                  "max_new_tokens": controls.max_new_tokens.value(),
                  "system_prompt": controls.system_prompt.toPlainText()}
        for key, value in values.items():
            self.settings.set_value(f"chat/{key}", value)
        self.settings.set_value("window/geometry", self.saveGeometry())
        self.settings.set_value("window/state", self.saveState())
        self.settings.set_value("view/show_rejected", self.transcript.show_rejected)
        self.settings.sync()

    # ------------------------------------------------------------------ loading options and safety answers
    def load_options(self) -> LoadOptions:
        answers = {(kind, model): answer for (kind, model), answer in self._consents.items()}

        def names(kind: str, answer: bool) -> frozenset[str]:
            stored = self.settings.json_value(f"consent/{kind}", {})
            merged = {**{m: a for m, a in stored.items() if isinstance(a, bool)},
                      **{m: a for (k, m), a in answers.items() if k == kind}}
            return frozenset(m for m, a in merged.items() if a is answer)

        device, dtype = self._device_override or (self.settings.device(), self.settings.dtype())
        return LoadOptions(device=device, dtype=dtype,
                           remote_code_allowed=names(REMOTE_CODE, True), remote_code_refused=names(REMOTE_CODE, False),
                           pickle_allowed=names(PICKLE, True), pickle_refused=names(PICKLE, False))

    def _sync_load_options(self) -> None:
        self.worker_thread.worker.load_options = self.load_options()

    def set_device(self, device: str, dtype: str = "auto", remember: bool = True) -> None:
        """Device and dtype for the next load (the model manager's pickers; --device, for this run only)."""
        if remember:
            self.settings.set_device(device, dtype)
            self._device_override = None
        else:
            self._device_override = (device, dtype)
        self._sync_load_options()

    def consent(self, kind: str, model: str) -> bool | None:
        return self._consents.get((kind, model), self.settings.consent(kind, model))

    def _on_consent_needed(self, model: str, kind: str, question: str) -> None:
        """Asked once per model: the answer is remembered (QSettings) and the load goes on with it."""
        self._loading = None
        self.progress.setVisible(self._active is not None)
        title = "Run this model's own code?" if kind == REMOTE_CODE else "Load pickle checkpoints?"
        answer = bool(self.confirm(title, question))
        self._consents[(kind, model)] = answer
        self.settings.set_consent(kind, model, answer)
        self._sync_load_options()
        self.consent_answered.emit(model, kind, answer)
        if kind == REMOTE_CODE and not answer:
            self._set_status(f"Loading {model} without running its code…")
        self.load_model(model, force=True)

    # ------------------------------------------------------------------ dialogs
    def open_models(self):
        """The model manager (model facts, target/draft pairing, downloads)."""
        if self.model_manager is None:
            from gui.views.model_manager import ModelManager

            draft = self.controls.draft.currentText().strip() if self.controls.method.currentData() == "draft-model" \
                else None
            self.model_manager = ModelManager(self.settings, self.palette_, target=self._loaded_name, draft=draft,
                                              parent=self)
            self.model_manager.setWindowFlag(Qt.WindowType.Window, True)
            self.model_manager.load_requested.connect(self._load_from_manager)
            self.model_manager.resize(self.model_manager.sizeHint())
        self.model_manager.show()
        if QApplication.platformName() != "offscreen":
            self.model_manager.raise_()
            self.model_manager.activateWindow()
        return self.model_manager

    def _load_from_manager(self, target: str, draft, device: str, dtype: str) -> None:
        options = self.load_options()
        changed_device = (options.device, options.dtype) != (device, dtype)
        self.set_device(device, dtype)
        if draft:
            self.controls.apply(method="draft-model", draft=draft)
        elif self.controls.method.currentData() == "draft-model":
            self.controls.apply(method="none")
        self.controls.apply(model=target)
        self.load_model(target, force=changed_device)

    def open_settings(self):
        from gui.settings import app_settings
        from gui.views.settings_dialog import SettingsDialog

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
            self.model_manager._update_token_note()

    # ------------------------------------------------------------------ compare window
    def open_compare(self):
        """Show the compare window (settings side by side, k sweep); it runs on this window's worker."""
        if self.compare_window is None:
            from gui.views.compare import CompareWindow

            self.compare_window = CompareWindow(
                self.worker_thread, self.palette_, model_name=lambda: self._loaded_name,
                chat_busy=self._compare_blocker, apply_to_chat=self._apply_compared_spec, parent=self)
            self.compare_window.running_changed.connect(lambda _running: self._update_actions())
            self.compare_window.resize(self.compare_window.sizeHint())
        self.compare_window.show()
        if QApplication.platformName() != "offscreen":  # it has no window stack (and says so on stderr)
            self.compare_window.raise_()
            self.compare_window.activateWindow()
        return self.compare_window

    def _comparing(self) -> bool:
        return self.compare_window is not None and self.compare_window.running

    def _compare_blocker(self) -> str | None:
        """Why a comparison cannot start now (it would share the device with the chat), or None."""
        if self._loading is not None or self.model_info is None:
            return "The model is still loading."
        if self._active is not None:
            return "The chat is generating: wait for the reply or stop it first."
        return None

    def _apply_compared_spec(self, spec: SpecConfig) -> None:
        self.controls.apply(method=spec.method, k=spec.k, draft=spec.draft, layers=spec.layers)
        self._set_status(f"Settings from the k sweep: {spec.label()}")

    def _token(self, serial: int):
        tokens = self.session.tokens
        return tokens[serial] if 0 <= serial < len(tokens) else None

    def _about(self) -> None:
        QMessageBox.about(self, "About SpecScope",
                          "<b>SpecScope</b><br>Speculative decoding, running locally, that you can watch.<br><br>"
                          "Each round a drafter proposes k tokens and the target model checks them in one pass: "
                          "accepted tokens are kept, the first disagreement is replaced by the target's own "
                          "token, and a fully accepted draft earns a bonus token.")

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
        if self.model_manager is not None:
            self.model_manager.shutdown()
        self.worker_thread.shutdown()
        if self._active is not None and self._active.purpose == "chat":
            self.recorder.reply_failed("stopped: SpecScope was closed", taken_back=False)
        if self.store is not None:
            self.store.close()

    def closeEvent(self, event) -> None:  # noqa: N802
        self.shutdown()
        super().closeEvent(event)
