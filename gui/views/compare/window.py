"""The compare window: 2–4 settings side by side on one prompt, and the k sweep.

Runs go through the chat window's worker thread (the one that holds the model), one after another: plain
decoding first, then each setting. Each run gets a pane that draws its tokens with the chat's own
transcript view; the summary table, the diff against plain and the sweep graph render what
`gui.sessions.compare` holds (its `CompareState` is the window's state: the request in flight, the last
comparison and sweep), which takes its figures from `engine.measure.compare`.

May touch: gui.sessions.compare, gui.worker (signals and request types), engine.core.config (the method table),
the views' public pieces (transcript, stats). Never the engine's objects.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDoubleSpinBox, QFileDialog, QHBoxLayout,
                               QHeaderView, QLabel, QMainWindow, QPlainTextEdit, QProgressBar, QPushButton,
                               QSizePolicy, QSpinBox, QSplitter, QTableWidget, QTableWidgetItem, QTabWidget,
                               QTextEdit, QVBoxLayout, QWidget)

from engine.measure.compare import ComparisonRow, SweepSummary
from engine.core.config import MAX_K, SamplingConfig, SpecConfig, method_info
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished, GenerationStarted, TokenStatus
from engine.measure.prompts import Prompt
from gui import theme
from gui.sessions.compare import (COMPARE, CannotStart, ComparisonSession, CompareState, categories, load_prompt_choices,
                                 export_name, word_diff, write_rows_csv, write_rows_json, write_sweep_csv,
                                 write_sweep_json)
from gui.persistence.settings import export_folder
from gui.resources import asset_path
from gui.views.compare.parts import (MAX_SWEEP_K, RunPane, SettingRow, SweepPlot, identical_text, row_title,
                                    times_text)
from gui.views.live.stats import DASH
from gui.views.chat.transcript import LegendBar
from gui.worker import ComparisonRequest

MAX_SETTINGS = 4
REFRESH_MS = 100
SEQUENTIAL_NOTE = ("Runs go one after another on the same device, never at the same time: concurrent runs "
                   "would distort each other's timing. Plain decoding always runs first, as the reference.")
COLUMNS = ("setting", "tok/s", "speed-up", "acceptance", "mean acc. length", "theory", "efficiency",
           "draft / verify time", "identical to plain")
COLUMN_TIPS = ("SPEC of the setting", "committed tokens per second after the first",
               "tok/s / tok/s of plain decoding on this prompt, this session",
               "accepted drafted tokens / drafted tokens", "mean accepted length: committed tokens per target pass",
               "theoretical speed-up from α, k and the cost ratio (Leviathan et al. 2023, eq. 1)",
               "measured speed-up / theoretical speed-up", "seconds drafting / seconds verifying",
               "greedy: whether the output is plain decoding's, token for token")


# ------------------------------------------------------------------ the window

class CompareWindow(QMainWindow):
    # what happened (tests and the scripted mode wait on these)
    comparison_finished = Signal(object)  # ComparisonSession (after Stop too)
    sweep_finished = Signal(object)  # ComparisonSession
    comparison_failed = Signal(str)
    running_changed = Signal(bool)
    # asks, queued to the worker thread
    comparison_requested = Signal(object)  # ComparisonRequest

    def __init__(self, worker_thread, palette: theme.Palette | None = None, *,
                 model_name: Callable[[], str] = lambda: "default",
                 chat_busy: Callable[[], str | None] = lambda: None,
                 apply_to_chat: Callable[[SpecConfig], None] | None = None, parent=None) -> None:
        super().__init__(parent)
        if parent is not None:
            self.setWindowFlag(Qt.WindowType.Window, True)
        self.setWindowTitle("SpecScope — compare settings")
        self.palette_ = palette or theme.LIGHT
        self.worker_thread = worker_thread
        self._model_name = model_name
        self._chat_busy = chat_busy
        self._apply_to_chat = apply_to_chat
        self.state = CompareState(make_request=ComparisonRequest)
        self.choices: list[Prompt] = []
        self.panes: list[RunPane] = []
        self._closed = False

        self._build()
        worker = worker_thread.worker
        self.comparison_requested.connect(worker.compare)
        worker.comparison_advanced.connect(self._on_advanced)
        worker.comparison_finished.connect(self._on_finished)
        worker.comparison_failed.connect(self._on_failed)
        worker.load_failed.connect(self._on_load_failed)

        self.refresh_timer = QTimer(self)
        self.refresh_timer.setInterval(REFRESH_MS)
        self.refresh_timer.timeout.connect(self._refresh_tick)
        try:
            self.load_prompt_file(asset_path("presets.json"))
        except ConfigError as exc:
            self._set_status(f"No presets: {exc}")
        self._update_actions()

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(10, 8, 10, 8)
        column.setSpacing(6)
        column.addLayout(self._build_prompt_row())
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("message_box")
        self.prompt.setPlaceholderText("Type a prompt, or pick a preset above")
        self.prompt.setFixedHeight(self.prompt.fontMetrics().lineSpacing() * 3 + 16)
        self.prompt.textChanged.connect(self._update_actions)
        column.addWidget(self.prompt)
        column.addLayout(self._build_sampling_row())
        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_compare_page(self.palette_), "Side by side")
        self.tabs.addTab(self._build_sweep_page(self.palette_), "k sweep")
        column.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        for spec in (SpecConfig(method="prompt-lookup", k=4), SpecConfig(method="early-exit", k=4)):
            self.add_setting(spec)
        self._build_status_bar()
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self.stop)
        self._build_menu()

    def _build_prompt_row(self) -> QHBoxLayout:
        """Presets or a Spec-Bench file, with a category filter."""
        row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(QLabel("Prompt"))
        self.category = QComboBox()
        self.category.setToolTip("Only prompts of this kind")
        self.category.setMinimumWidth(150)
        self.category.currentIndexChanged.connect(self._fill_presets)
        self.preset = QComboBox()
        self.preset.setToolTip("A prompt preset: pick one to put it in the box below (you can edit it)")
        self.preset.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.preset.activated.connect(self._preset_chosen)
        self.load_button = QPushButton("Load prompts…")
        self.load_button.setToolTip("A Spec-Bench JSON lines file (question_id, category, turns: the first "
                                    "turn is used) or a presets file")
        self.load_button.clicked.connect(self._browse_prompts)
        self.source_label = QLabel("")
        self.source_label.setObjectName("dim")
        row.addWidget(self.category)
        row.addWidget(self.preset, 1)
        row.addWidget(self.load_button)
        row.addWidget(self.source_label)
        return row

    def _build_sampling_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setSpacing(6)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 5.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setSpecialValueText("0 (greedy)")
        self.temperature.setToolTip("Applies to plain decoding and every setting alike. Greedy (0) lets the "
                                    "outputs be checked against plain decoding, token for token.")
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setValue(0)
        self.seed.setSpecialValueText("random")
        self.seed.setToolTip("Sampling seed, the same for every run")
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(1, 100_000)
        self.max_new_tokens.setValue(128)
        self.max_new_tokens.setSingleStep(32)
        for caption, widget in (("Temperature", self.temperature), ("Seed", self.seed),
                                ("Max new tokens", self.max_new_tokens)):
            row.addWidget(QLabel(caption))
            row.addWidget(widget)
        row.addSpacing(12)
        self.note = QLabel(SEQUENTIAL_NOTE)
        self.note.setObjectName("dim")
        self.note.setWordWrap(True)
        row.addWidget(self.note, 1)
        return row

    def _build_status_bar(self) -> None:
        self.status_label = QLabel("Choose settings and a prompt, then Run.")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.progress)

    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        for text, kind in (("Export summary as &CSV…", "csv"), ("Export summary as &JSON…", "json"),
                           ("Save comparison as &PNG…", "png"), ("Export sweep as CSV…", "sweep-csv"),
                           ("Export sweep as JSON…", "sweep-json"), ("Save sweep graph as PNG…", "sweep-png")):
            file_menu.addAction(QAction(text, self, triggered=lambda _=False, k=kind: self._export(k)))
        file_menu.addSeparator()
        file_menu.addAction(QAction("&Close", self, shortcut=QKeySequence.StandardKey.Close, triggered=self.close))

    def _build_compare_page(self, p: theme.Palette) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(6)
        layout.addLayout(self._build_settings_area())
        self.legend = LegendBar(p)
        self.legend.show_rejected_toggled.connect(self.set_show_rejected)
        layout.addWidget(self.legend)
        splitter = QSplitter(Qt.Orientation.Vertical)
        self.pane_splitter = QSplitter(Qt.Orientation.Horizontal)
        self.pane_splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.pane_splitter)
        splitter.addWidget(self._build_results())
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([480, 260])
        layout.addWidget(splitter, 1)
        return page

    def _build_settings_area(self) -> QHBoxLayout:
        """The compared settings' rows, and Add / Run / Stop."""
        top = QHBoxLayout()
        top.setSpacing(10)
        self.settings_box = QVBoxLayout()
        self.settings_box.setSpacing(4)
        self.setting_rows: list[SettingRow] = []
        top.addLayout(self.settings_box, 3)
        side = QVBoxLayout()
        side.setSpacing(4)
        self.add_button = QPushButton("+ Add setting")
        self.add_button.setToolTip(f"Compare up to {MAX_SETTINGS} settings (plain decoding always runs too)")
        self.add_button.clicked.connect(lambda: self.add_setting())
        self.run_button = QPushButton("Run comparison")
        self.run_button.setObjectName("send_button")
        self.run_button.clicked.connect(self.run_comparison)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop at the next round; runs that finished stay in the table (Esc)")
        self.stop_button.clicked.connect(self.stop)
        self.strict_button = QPushButton("Prove it in float32")
        self.strict_button.setToolTip("Run the same comparison again in float32 on the CPU with the transformers "
                                      "backend, where greedy output must be identical to plain decoding: a check "
                                      "of the algorithm itself, free of bf16/fp16/quantization rounding")
        self.strict_button.clicked.connect(self.run_strict_comparison)
        row = QHBoxLayout()
        row.addWidget(self.add_button)
        row.addWidget(self.run_button)
        row.addWidget(self.stop_button)
        side.addLayout(row)
        side.addWidget(self.strict_button)
        side.addStretch(1)
        top.addLayout(side, 2)
        return top

    def _build_results(self) -> QWidget:
        """The summary table with its exports, and the diff against plain decoding."""
        bottom = QWidget()
        bottom_layout = QHBoxLayout(bottom)
        bottom_layout.setContentsMargins(0, 0, 0, 0)
        bottom_layout.setSpacing(8)
        table_column = QVBoxLayout()
        table_column.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for c, tip in enumerate(COLUMN_TIPS):
            self.table.horizontalHeaderItem(c).setToolTip(tip)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._show_selected_diff)
        # room for plain + 4 settings without scrolling
        self.table.setMinimumHeight(self.table.verticalHeader().defaultSectionSize() * (MAX_SETTINGS + 1)
                                    + self.table.horizontalHeader().sizeHint().height() + 6)
        table_column.addWidget(self.table, 1)
        export_row = QHBoxLayout()
        export_row.addStretch(1)
        for text, kind in (("Export CSV…", "csv"), ("Export JSON…", "json"), ("Save PNG…", "png")):
            button = QPushButton(text)
            button.clicked.connect(lambda _=False, k=kind: self._export(k))
            export_row.addWidget(button)
        table_column.addLayout(export_row)
        table_holder = QWidget()
        table_holder.setLayout(table_column)
        bottom_layout.addWidget(table_holder, 5)
        self.diff_view = QTextEdit()
        self.diff_view.setObjectName("transcript")
        self.diff_view.setReadOnly(True)
        self.diff_view.setPlaceholderText("The difference from plain decoding shows here.")
        bottom_layout.addWidget(self.diff_view, 2)
        return bottom

    def _build_sweep_page(self, p: theme.Palette) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(6)
        row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(QLabel("Method"))
        self.sweep_setting = SettingRow(SpecConfig(method="prompt-lookup", k=4), removable=False,
                                        max_k=MAX_SWEEP_K)
        self.sweep_setting.k.hide()  # the sweep sets k
        row.addWidget(self.sweep_setting, 2)
        row.addWidget(QLabel("k from 1 to"))
        self.sweep_max_k = QSpinBox()
        self.sweep_max_k.setRange(2, MAX_SWEEP_K)
        self.sweep_max_k.setValue(8)
        self.sweep_max_k.setToolTip(f"Runs plain decoding once, then the method for k = 1…K (K ≤ {MAX_SWEEP_K})")
        row.addWidget(self.sweep_max_k)
        self.sweep_button = QPushButton("Run sweep")
        self.sweep_button.setObjectName("send_button")
        self.sweep_button.clicked.connect(self.run_sweep)
        self.sweep_stop = QPushButton("Stop")
        self.sweep_stop.clicked.connect(self.stop)
        row.addWidget(self.sweep_button)
        row.addWidget(self.sweep_stop)
        row.addStretch(1)
        layout.addLayout(row)

        body = QHBoxLayout()
        self.sweep_plot = SweepPlot(p)
        body.addWidget(self.sweep_plot, 3)
        side = QVBoxLayout()
        self.best_label = QLabel("Run a sweep to find the fastest k for this prompt.")
        self.best_label.setObjectName("pane_title")
        self.best_label.setWordWrap(True)
        side.addWidget(self.best_label)
        self.apply_button = QPushButton("Use this k in the chat")
        self.apply_button.setToolTip("Set the chat's method and k to the best setting found")
        self.apply_button.clicked.connect(self.apply_best_to_chat)
        side.addWidget(self.apply_button)
        self.sweep_table = QTableWidget(0, 5)
        self.sweep_table.setHorizontalHeaderLabels(("k", "speed-up", "theory", "acceptance", "cost ratio c"))
        self.sweep_table.verticalHeader().hide()
        self.sweep_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.sweep_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # no header is clipped
        header.setStretchLastSection(True)
        self.sweep_table.setMinimumWidth(header.length() + 4)
        side.addWidget(self.sweep_table, 1)
        self.sweep_note = QLabel("The theoretical curve uses α (acceptance) and c (draft cost per token / verify "
                                 "cost per pass) pooled over the sweep (Leviathan et al. 2023, eq. 1). Each k runs "
                                 "once here, so a close best k may be noise: Tools ▸ Which setting is fastest "
                                 "here? repeats every setting and gives the median and its range.")
        self.sweep_note.setObjectName("dim")
        self.sweep_note.setWordWrap(True)
        side.addWidget(self.sweep_note)
        exports = QHBoxLayout()
        for text, kind in (("CSV…", "sweep-csv"), ("JSON…", "sweep-json"), ("Graph PNG…", "sweep-png")):
            button = QPushButton(text)
            button.clicked.connect(lambda _=False, k=kind: self._export(k))
            exports.addWidget(button)
        side.addLayout(exports)
        holder = QWidget()
        holder.setLayout(side)
        holder.setMaximumWidth(380)
        body.addWidget(holder, 2)
        layout.addLayout(body, 1)
        return page

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1440, 900)

    # ------------------------------------------------------------------ settings and prompts
    def add_setting(self, spec: SpecConfig | None = None) -> SettingRow | None:
        if len(self.setting_rows) >= MAX_SETTINGS:
            return None
        if spec is None:  # a sensible next one: the last setting with a larger k
            last = self.setting_rows[-1].spec() if self.setting_rows else SpecConfig(method="prompt-lookup", k=2)
            spec = last.with_k(min(MAX_K, last.k * 2))
        row = SettingRow(spec)
        row.remove_requested.connect(self.remove_setting)
        row.changed.connect(self._update_actions)
        self.setting_rows.append(row)
        self.settings_box.addWidget(row)
        self._update_actions()
        return row

    def remove_setting(self, row: SettingRow) -> None:
        if len(self.setting_rows) <= 1 or row not in self.setting_rows:
            return
        self.setting_rows.remove(row)
        row.setParent(None)
        row.deleteLater()
        self._update_actions()

    def set_specs(self, specs: list[SpecConfig]) -> None:
        """Replace the settings (the scripted mode and tests); 1…4 speculative specs."""
        if not 1 <= len(specs) <= MAX_SETTINGS:
            raise ConfigError(f"compare 1 to {MAX_SETTINGS} settings, got {len(specs)}")
        for row in list(self.setting_rows):
            self.setting_rows.remove(row)
            row.setParent(None)
            row.deleteLater()
        for spec in specs:
            self.add_setting(spec)

    def specs(self) -> list[SpecConfig]:
        return [row.spec() for row in self.setting_rows]

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=round(self.temperature.value(), 4),
                              seed=None if self.seed.value() < 0 else self.seed.value())

    def load_prompt_file(self, path) -> int:
        """Presets or a Spec-Bench JSON lines file into the preset list; returns how many prompts."""
        choices = load_prompt_choices(path)
        self.choices = choices
        self.category.blockSignals(True)
        self.category.clear()
        self.category.addItem(f"all kinds ({len(choices)})", None)
        for category in categories(choices):
            n = sum(c.category == category for c in choices)
            self.category.addItem(f"{category} ({n})", category)
        self.category.blockSignals(False)
        self.source_label.setText(str(path).rsplit("/", 1)[-1])
        self._fill_presets()
        return len(choices)

    def set_category(self, category: str | None) -> None:
        index = self.category.findData(category)
        if index >= 0:
            self.category.setCurrentIndex(index)

    def visible_choices(self) -> list[Prompt]:
        category = self.category.currentData()
        return [c for c in self.choices if category is None or c.category == category]

    def choose_preset(self, index: int) -> None:
        """Put the index-th visible preset in the prompt box."""
        self.preset.setCurrentIndex(index + 1)
        self._preset_chosen(index + 1)

    def _fill_presets(self, *_args) -> None:
        self.preset.clear()
        self.preset.addItem("— choose a preset —", None)
        for choice in self.visible_choices():
            self.preset.addItem(f"{choice.category} · {choice.title}", choice.id)
            self.preset.setItemData(self.preset.count() - 1, choice.text[:600], Qt.ItemDataRole.ToolTipRole)

    def _preset_chosen(self, index: int) -> None:
        wanted = self.preset.itemData(index)
        choice = next((c for c in self.visible_choices() if c.id == wanted), None)
        if choice is not None:
            self.prompt.setPlainText(choice.text)

    def _browse_prompts(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load prompts", "", "Prompts (*.jsonl *.json);;All files (*)")
        if not path:
            return
        try:
            n = self.load_prompt_file(path)
        except ConfigError as exc:
            self._set_status(f"Could not load prompts: {exc}")
            return
        self._set_status(f"{n} prompts loaded from {path}")

    # ------------------------------------------------------------------ running
    @property
    def running(self) -> bool:
        return self.state.running

    @property
    def session(self) -> ComparisonSession | None:
        """The last side-by-side comparison."""
        return self.state.comparison

    @property
    def sweep_session(self) -> ComparisonSession | None:
        return self.state.sweep

    @property
    def sweep_summary(self) -> SweepSummary | None:
        return self.state.sweep_summary

    def run_comparison(self, strict: bool = False) -> bool:
        """Run plain decoding and every setting on the prompt (`strict`: in float32 on the CPU with
        transformers); returns whether it started."""
        session = self._start(lambda **kw: self.state.start(self.specs(), COMPARE, strict=strict, **kw))
        if session is None:
            return False
        self._build_panes(session)
        self.table.setRowCount(0)
        self.diff_view.clear()
        return True

    def run_strict_comparison(self) -> bool:
        """"Prove it in float32": the same comparison where equality must be exact."""
        started = self.run_comparison(strict=True)
        if started:
            self._set_status("Strict check: plain decoding in float32 on the CPU (transformers)…")
        return started

    def run_sweep(self) -> bool:
        """Plain decoding once, then the sweep's method for k = 1…K."""
        session = self._start(lambda **kw: self.state.start_sweep(self.sweep_setting.spec(),
                                                                   self.sweep_max_k.value(), **kw))
        if session is None:
            return False
        self.show_sweep_summary(None)
        return True

    def stop(self) -> None:
        if self.state.running:
            self.worker_thread.stop_generation()
            self._set_status("Stopping at the next round…")

    def _start(self, start) -> ComparisonSession | None:
        """Start a session through `start(prompt=, sampling=, max_new_tokens=, model=, busy=)` and send its
        request; None (and the reason in the status line) when it cannot start."""
        try:
            session, request = start(prompt=self.prompt.toPlainText(), sampling=self.sampling(),
                                     max_new_tokens=self.max_new_tokens.value(), model=self._model_name(),
                                     busy=None if self.state.running else self._chat_busy())
        except CannotStart as exc:
            self._set_status(str(exc))
            return None
        except ConfigError as exc:
            self._set_status(f"Refused: {exc}")
            return None
        self.progress.setRange(0, len(session.runs))
        self.progress.setValue(0)
        self.progress.show()
        self._set_status(f"Run 1 of {len(session.runs)}: plain decoding…")
        self._update_actions()
        self.running_changed.emit(True)
        self.refresh_timer.start()
        self.comparison_requested.emit(request)
        return session

    def _build_panes(self, session: ComparisonSession) -> None:
        for pane in self.panes:
            pane.setParent(None)
            pane.deleteLater()
        self.panes = []
        for run in session.runs:
            pane = RunPane(run, self.palette_)
            pane.transcript.show_rejected = self.legend.show_rejected.isChecked()
            self.pane_splitter.addWidget(pane)
            self.panes.append(pane)
        self.pane_splitter.setSizes([1000] * len(self.panes))

    # ------------------------------------------------------------------ worker signals
    def _on_advanced(self, request_id: int, index: int, event) -> None:
        tokens = self.state.advanced(request_id, index, event)
        if tokens is None:
            return
        session = self.state.active
        run = session.runs[index]
        pane = self.panes[index] if session.kind == COMPARE and index < len(self.panes) else None
        if isinstance(event, GenerationStarted):
            self._set_status(f"Run {index + 1} of {len(session.runs)}: {run.label}…")
            if pane is not None:
                pane.transcript.begin_assistant(run.turn)
                pane.set_state("running…")
        elif tokens:
            if pane is not None:
                pane.transcript.append_tokens(tokens)
        elif isinstance(event, GenerationFinished):
            self.progress.setValue(index + 1)
            if pane is not None and run.turn is not None:
                pane.transcript.end_assistant(run.turn)
            self._show_session(session)

    def _show_session(self, session: ComparisonSession) -> None:
        if session.kind == COMPARE:
            self._show_rows(session)
            self._update_panes(session)
        else:
            self.show_sweep_summary(self.state.sweep_summary)

    def _on_finished(self, request_id: int) -> None:
        session = self.state.finished(request_id)
        if session is None:
            return
        self._end_active()
        self._show_session(session)
        if session.kind == COMPARE:
            self._select_first_difference()
        self._set_status(self.state.status(session))
        (self.comparison_finished if session.kind == COMPARE else self.sweep_finished).emit(session)

    def _on_failed(self, request_id: int, message: str) -> None:
        session = self.state.failed(request_id, message)
        if session is None:
            return
        self._end_active()
        if session.kind == COMPARE:
            self._show_rows(session)
            self._update_panes(session)
        self._set_status(f"Refused: {message}")
        self.comparison_failed.emit(message)

    def _on_load_failed(self, name: str, message: str) -> None:
        if self.state.running:
            self._on_failed(self.state.active_id, f"could not load {name}: {message}")

    def _end_active(self) -> None:
        self.refresh_timer.stop()
        self._refresh_tick()
        self.progress.hide()
        self._update_actions()
        self.running_changed.emit(False)

    def _refresh_tick(self) -> None:
        """The running pane's figures, at most 10 times a second."""
        for pane in self.panes:
            if pane.run.state == "running":
                pane.refresh()

    def _update_panes(self, session: ComparisonSession) -> None:
        """Every pane's state and figures, once a run has ended."""
        rows = {row.label: row for row in session.rows()}
        for pane in self.panes:
            row = rows.get(pane.run.spec.label()) if pane.run.state == "done" else None
            pane.refresh(row)
            pane.set_state(self._state_text(pane.run, row))

    @staticmethod
    def _state_text(run, row: ComparisonRow | None) -> str:
        if run.state == "done" and row is not None and run.index:
            return identical_text(row)
        if run.state == "done" and run.index == 0:
            return "reference"
        return {"waiting": "waiting", "running": "running…", "stopped": "stopped", "failed": "failed",
                "done": "done"}[run.state]

    # ------------------------------------------------------------------ table and diff
    def _show_rows(self, session: ComparisonSession) -> None:
        rows = session.rows()
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            cells = (
                row_title(row),
                f"{row.tok_per_s:.1f}",
                DASH if row.speedup is None else f"{row.speedup:.2f}×",
                DASH if not row.spec.speculative and not row.stats.drafted_tokens else f"{row.acceptance_rate:.0%}",
                f"{row.mean_accepted_length:.2f}",
                f"{row.theoretical_speedup:.2f}×",
                DASH if row.efficiency is None or not row.spec.speculative else f"{row.efficiency:.0%}",
                times_text(row),
                "reference" if row_title(row) == "plain decoding" else identical_text(row),
            )
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if 0 < c < 8:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if c == 8 and row.identical_to_plain is False:
                    near_tie = row.equality == "near-tie"
                    item.setForeground(QColor(self.palette_.warning if near_tie else self.palette_.error))
                    item.setToolTip(row.divergence.explanation() if row.divergence is not None else
                                    "Greedy output differs from plain decoding; select the row to see the diff")
                item.setData(Qt.ItemDataRole.UserRole, r)
                self.table.setItem(r, c, item)

    def _select_first_difference(self) -> None:
        rows = self.session.rows() if self.session else []
        differing = next((i for i, row in enumerate(rows) if row.identical_to_plain is False), None)
        if differing is not None:
            self.table.selectRow(differing)
        self._show_selected_diff()

    def selected_row(self) -> ComparisonRow | None:
        rows = self.session.rows() if self.session else []
        selected = self.table.selectionModel().selectedRows()
        index = selected[0].row() if selected else None
        return rows[index] if index is not None and index < len(rows) else None

    def _show_selected_diff(self) -> None:
        session = self.session
        if session is None or self.running:
            return
        rows = session.rows()
        if not rows:
            self.diff_view.clear()
            return
        row = self.selected_row()
        if row is None or not row.spec.speculative:
            row = next((r for r in rows if r.identical_to_plain is False), None)
        self.render_diff(rows[0], row, rows)

    def render_diff(self, plain: ComparisonRow, row: ComparisonRow | None, rows: list[ComparisonRow]) -> None:
        p = self.palette_
        view = self.diff_view
        view.clear()
        cursor = QTextCursor(view.document())
        if row is None:
            if self.session is not None and not self.session.greedy:
                cursor.insertText("Sampling (temperature > 0): outputs are not expected to match plain "
                                  "decoding token for token, so they are not compared.",
                                  theme.text_format(p, dim=True))
            elif len(rows) > 1:
                where = " in float32 on the CPU (strict check)" if self.session and self.session.strict else ""
                cursor.insertText(f"✓ All {len(rows) - 1} settings: output identical to plain decoding{where}, "
                                  "token for token. Speculation changed nothing.", theme.text_format(p, bold=True))
            return
        if row.identical_to_plain:
            cursor.insertText(f"✓ {row.label}: identical to plain decoding, token for token "
                              f"({row.stats.committed_tokens} tokens).", theme.text_format(p, bold=True))
            return
        if row.identical_to_plain is None:
            cursor.insertText(f"{row.label}: sampled output (not compared with plain decoding).",
                              theme.text_format(p, dim=True))
            return
        near_tie = row.equality == "near-tie"
        cursor.insertText(f"{'≈' if near_tie else '✗'} {row.label} differs from plain decoding at token "
                          f"{row.first_difference} (of {len(plain.output_ids)} / {len(row.output_ids)}).",
                          theme.text_format(p, bold=True, color=p.warning if near_tie else p.error))
        cursor.insertBlock()
        if row.divergence is not None:
            self._insert_divergence(cursor, row.divergence)
        cursor.insertText("struck through: only in plain · underlined: only in this setting",
                          theme.text_format(p, small=True, dim=True))
        cursor.insertBlock()
        cursor.insertBlock()
        only_plain = theme.token_format(p, TokenStatus.REJECTED)
        only_plain.setForeground(QColor(p.error))
        only_other = theme.token_format(p, TokenStatus.SUBSTITUTED)
        for op, text in word_diff(plain.text, row.text):
            fmt = {"equal": theme.text_format(p), "plain": only_plain, "other": only_other}[op]
            cursor.insertText(text, fmt)
        view.moveCursor(QTextCursor.MoveOperation.Start)

    def _insert_divergence(self, cursor: QTextCursor, divergence) -> None:
        """A near-tie in one sentence; a mismatch loudly, with what is needed to report it."""
        p = self.palette_
        if divergence.is_near_tie:
            cursor.insertText(divergence.explanation() + " “Prove it in float32” checks the algorithm itself.",
                              theme.text_format(p))
        else:
            cursor.insertText(divergence.explanation(), theme.text_format(p, bold=True, color=p.error))
        cursor.insertBlock()

    def diff_text(self) -> str:
        return self.diff_view.toPlainText()

    # ------------------------------------------------------------------ sweep
    def show_sweep_summary(self, summary: SweepSummary | None) -> None:
        """Draw a sweep (from a run, or canned points in tests)."""
        self.state.sweep_summary = summary
        self.sweep_plot.show_summary(summary)
        points = list(summary.points) if summary else []
        self.sweep_table.setRowCount(len(points))
        for r, (point, theory) in enumerate(zip(points, summary.theory if summary else ())):
            best = summary.best is not None and point.k == summary.best.k
            for c, text in enumerate((("★ " if best else "") + str(point.k), f"{point.speedup:.2f}×",
                                      f"{theory:.2f}×", f"{point.acceptance_rate:.0%}", f"{point.cost_ratio:.3f}")):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if best:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.sweep_table.setItem(r, c, item)
        best = summary.best if summary else None
        if best is not None:
            label = method_info(summary.method).label
            verdict = ("faster than plain decoding" if best.speedup > 1.0
                       else "no k beat plain decoding on this prompt")
            self.best_label.setText(f"Best k for {label}: {best.k} — {best.speedup:.2f}× ({verdict}). "
                                    f"Pooled α = {summary.alpha:.0%}, c = {summary.cost_ratio:.3f}.")
            self.apply_button.setText(f"Use k = {best.k} in the chat")
        elif summary is None or not points:
            self.best_label.setText("Run a sweep to find the fastest k for this prompt.")
            self.apply_button.setText("Use this k in the chat")
        self._update_actions()

    def best_spec(self) -> SpecConfig | None:
        return self.state.best_spec(fallback=self.sweep_setting.spec())

    def apply_best_to_chat(self) -> None:
        spec = self.best_spec()
        if spec is None or self._apply_to_chat is None:
            return
        self._apply_to_chat(spec)
        self._set_status(f"The chat now uses {spec.label()} (from the next message).")

    # ------------------------------------------------------------------ export
    def export_csv(self, path) -> None:
        write_rows_csv(self.session.rows() if self.session else [], path, self.session)

    def export_json(self, path) -> None:
        if self.session is not None:
            write_rows_json(self.session, path)

    def save_png(self, path) -> bool:
        """The compare view (prompt, panes, table, diff) as an image."""
        return self.grab().save(str(path))

    def save_sweep_png(self, path) -> bool:
        return self.sweep_plot.grab().save(str(path))

    def _export(self, kind: str) -> None:
        filters = {"csv": "CSV (*.csv)", "json": "JSON (*.json)", "png": "PNG image (*.png)",
                   "sweep-csv": "CSV (*.csv)", "sweep-json": "JSON (*.json)", "sweep-png": "PNG image (*.png)"}
        if kind.startswith("sweep") and self.sweep_summary is None:
            self._set_status("Run a sweep first.")
            return
        if kind in ("csv", "json") and (self.session is None or not self.session.rows()):
            self._set_status("Run a comparison first.")
            return
        suffix = kind.rsplit("-", 1)[-1]
        session = self.sweep_session if kind.startswith("sweep") else self.session
        suggested = export_folder() / export_name(kind, session, suffix)  # one folder for every export
        path, _ = QFileDialog.getSaveFileName(self, "Export", str(suggested), filters[kind])
        if not path:
            return
        try:
            {"csv": self.export_csv, "json": self.export_json, "png": self.save_png,
             "sweep-csv": lambda p: write_sweep_csv(self.sweep_summary, p, self.sweep_session),
             "sweep-json": lambda p: write_sweep_json(self.sweep_summary, self.sweep_session, p),
             "sweep-png": self.save_sweep_png}[kind](path)
        except OSError as exc:
            self._set_status(f"Could not write {path}: {exc.strerror or exc}")
            return
        self._set_status(f"Saved {path}")

    # ------------------------------------------------------------------ look
    def set_show_rejected(self, show: bool) -> None:
        for pane in self.panes:
            if pane.transcript.show_rejected != show:
                pane.transcript.show_rejected = show
                pane.rerender()

    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_ = palette
        self.legend.set_palette(palette)
        for pane in self.panes:
            pane.set_palette(palette)
        self.sweep_plot.set_palette(palette)
        if self.session is not None and not self.running:
            self._show_rows(self.session)
            self._show_selected_diff()

    def _update_actions(self) -> None:
        idle = not self.state.running
        has_prompt = bool(self.prompt.toPlainText().strip())
        self.run_button.setEnabled(idle and has_prompt and bool(self.setting_rows))
        self.strict_button.setEnabled(idle and has_prompt and bool(self.setting_rows))
        self.sweep_button.setEnabled(idle and has_prompt)
        self.stop_button.setEnabled(not idle)
        self.sweep_stop.setEnabled(not idle)
        self.add_button.setEnabled(idle and len(self.setting_rows) < MAX_SETTINGS)
        for row in self.setting_rows:
            row.remove.setEnabled(idle and len(self.setting_rows) > 1)
            row.setEnabled(idle)
        self.apply_button.setEnabled(self._apply_to_chat is not None and self.best_spec() is not None)

    def _set_status(self, text: str) -> None:
        self.status_label.setText(text)

    # ------------------------------------------------------------------ closing
    def closeEvent(self, event) -> None:  # noqa: N802
        """Closing stops a comparison at the next round; the worker (the chat's) carries on."""
        self.stop()
        super().closeEvent(event)

