"""The compare window's widgets, built once: the prompt and sampling rows, the side-by-side page (settings,
run panes, summary table, diff) and the k sweep page, the status bar and the File menu. Each builder sets the
window's view attributes and connects their signals to the window's slots; none keeps state.

May touch: QtWidgets, the compare parts (gui.views.compare.parts), the chat's legend.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDoubleSpinBox, QHBoxLayout, QHeaderView, QLabel,
                               QPlainTextEdit, QProgressBar, QPushButton, QSizePolicy, QSpinBox, QSplitter,
                               QTableWidget, QTabWidget, QTextEdit, QVBoxLayout, QWidget)

from engine.core.config import SpecConfig
from engine.measure.fastest import sweep_methods
from gui import theme
from gui.views.chat.transcript import LegendBar
from gui.views.compare.parts import MAX_SWEEP_K, SettingRow, SweepPlot
from gui.views.compare.results import COLUMN_TIPS, COLUMNS, CROSS
from gui.views.main.screen_fit import ContentScroll

MAX_SETTINGS = 4
SEQUENTIAL_NOTE = ("Runs go one after another on the same device, never at the same time: concurrent runs "
                   "would distort each other's timing. Plain decoding always runs first, as the reference.")


def build(window) -> None:
    """Every widget of the compare window, set as its attributes."""
    central = QWidget()
    column = QVBoxLayout(central)
    column.setContentsMargins(10, 8, 10, 8)
    column.setSpacing(6)
    column.addLayout(build_prompt_row(window))
    window.prompt = QPlainTextEdit()
    window.prompt.setObjectName("message_box")
    window.prompt.setPlaceholderText("Type a prompt, or pick a preset above")
    window.prompt.setFixedHeight(window.prompt.fontMetrics().lineSpacing() * 3 + 16)
    window.prompt.textChanged.connect(window.update_actions)
    column.addWidget(window.prompt)
    column.addLayout(build_sampling_row(window))
    window.tabs = QTabWidget()
    window.tabs.addTab(build_compare_page(window, window.palette_), "Side by side")
    window.tabs.addTab(build_sweep_page(window, window.palette_), "k sweep")
    column.addWidget(window.tabs, 1)
    window.setCentralWidget(ContentScroll(central))  # four settings with many parameters: scrolled, never cut off
    for spec in (SpecConfig(method=m.name, k=4) for m in sweep_methods()[:2]):  # the first two the sweep tries
        window.add_setting(spec)
    build_status_bar(window)
    QShortcut(QKeySequence(Qt.Key.Key_Escape), window, activated=window.stop)
    build_menu(window)


def build_prompt_row(window) -> QHBoxLayout:
    """Presets or a Spec-Bench file, with a category filter."""
    row = QHBoxLayout()
    row.setSpacing(6)
    row.addWidget(QLabel("Prompt"))
    window.category = QComboBox()
    window.category.setToolTip("Only prompts of this kind")
    window.category.setMinimumWidth(150)
    window.category.currentIndexChanged.connect(window.fill_presets)
    window.preset = QComboBox()
    window.preset.setToolTip("A prompt preset: pick one to put it in the box below (you can edit it)")
    window.preset.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
    window.preset.activated.connect(window.preset_chosen)
    window.load_button = QPushButton("Load prompts…")
    window.load_button.setToolTip("A Spec-Bench JSON lines file (question_id, category, turns: the first "
                                  "turn is used) or a presets file")
    window.load_button.clicked.connect(window.browse_prompts)
    window.source_label = QLabel("")
    window.source_label.setObjectName("dim")
    row.addWidget(window.category)
    row.addWidget(window.preset, 1)
    row.addWidget(window.load_button)
    row.addWidget(window.source_label)
    return row


def build_sampling_row(window) -> QHBoxLayout:
    row = QHBoxLayout()
    row.setSpacing(6)
    window.temperature = QDoubleSpinBox()
    window.temperature.setRange(0.0, 5.0)
    window.temperature.setSingleStep(0.1)
    window.temperature.setSpecialValueText("0 (greedy)")
    window.temperature.setToolTip("Applies to plain decoding and every setting alike. Greedy (0) lets the "
                                  "outputs be checked against plain decoding, token for token.")
    window.seed = QSpinBox()
    window.seed.setRange(-1, 2**31 - 1)
    window.seed.setValue(0)
    window.seed.setSpecialValueText("random")
    window.seed.setToolTip("Sampling seed, the same for every run")
    window.max_new_tokens = QSpinBox()
    window.max_new_tokens.setRange(1, 100_000)
    window.max_new_tokens.setValue(128)
    window.max_new_tokens.setSingleStep(32)
    for caption, widget in (("Temperature", window.temperature), ("Seed", window.seed),
                            ("Max new tokens", window.max_new_tokens)):
        row.addWidget(QLabel(caption))
        row.addWidget(widget)
    row.addSpacing(12)
    window.note = QLabel(SEQUENTIAL_NOTE)
    window.note.setObjectName("dim")
    window.note.setWordWrap(True)
    row.addWidget(window.note, 1)
    return row


def build_status_bar(window) -> None:
    window.status_label = QLabel("Choose settings and a prompt, then Run.")
    window.progress = QProgressBar()
    window.progress.setMaximumWidth(180)
    window.progress.setMaximumHeight(14)
    window.progress.setTextVisible(False)
    window.progress.hide()
    window.statusBar().addWidget(window.status_label, 1)
    window.statusBar().addPermanentWidget(window.progress)


def build_menu(window) -> None:
    file_menu = window.menuBar().addMenu("&File")
    for text, kind in (("Export summary as &CSV…", "csv"), ("Export summary as &JSON…", "json"),
                       ("Save comparison as &PNG…", "png"), ("Export sweep as CSV…", "sweep-csv"),
                       ("Export sweep as JSON…", "sweep-json"), ("Save sweep graph as PNG…", "sweep-png")):
        file_menu.addAction(QAction(text, window, triggered=lambda _=False, k=kind: window.export(k)))
    file_menu.addSeparator()
    file_menu.addAction(QAction("&Close", window, shortcut=QKeySequence.StandardKey.Close, triggered=window.close))


def build_compare_page(window, p: theme.Palette) -> QWidget:
    page = QWidget()
    layout = QVBoxLayout(page)
    layout.setContentsMargins(6, 6, 6, 6)
    layout.setSpacing(6)
    layout.addLayout(build_settings_area(window))
    window.legend = LegendBar(p)
    window.legend.show_rejected_toggled.connect(window.set_show_rejected)
    layout.addWidget(window.legend)
    splitter = QSplitter(Qt.Orientation.Vertical)
    window.pane_splitter = QSplitter(Qt.Orientation.Horizontal)
    window.pane_splitter.setChildrenCollapsible(False)
    splitter.addWidget(window.pane_splitter)
    splitter.addWidget(build_results(window))
    splitter.setStretchFactor(0, 3)
    splitter.setStretchFactor(1, 1)
    splitter.setSizes([480, 260])
    layout.addWidget(splitter, 1)
    return page


def build_settings_area(window) -> QHBoxLayout:
    """The compared settings' rows, and Add / Run / Stop."""
    top = QHBoxLayout()
    top.setSpacing(10)
    window.settings_box = QVBoxLayout()
    window.settings_box.setSpacing(4)
    window.setting_rows: list[SettingRow] = []
    top.addLayout(window.settings_box, 3)
    side = QVBoxLayout()
    side.setSpacing(4)
    window.add_button = QPushButton("+ Add setting")
    window.add_button.setToolTip(f"Compare up to {MAX_SETTINGS} settings (plain decoding always runs too)")
    window.add_button.clicked.connect(lambda: window.add_setting())
    window.run_button = QPushButton("Run comparison")
    window.run_button.setObjectName("send_button")
    window.run_button.clicked.connect(window.run_comparison)
    window.stop_button = QPushButton("Stop")
    window.stop_button.setToolTip("Stop at the next round; runs that finished stay in the table (Esc)")
    window.stop_button.clicked.connect(window.stop)
    window.strict_button = QPushButton("Prove it in float32")
    window.strict_button.setToolTip("Run the same comparison again in float32 on the CPU with the transformers "
                                    "backend, where greedy output must be identical to plain decoding: a check "
                                    "of the algorithm itself, free of bf16/fp16/quantization rounding")
    window.strict_button.clicked.connect(window.run_strict_comparison)
    row = QHBoxLayout()
    row.addWidget(window.add_button)
    row.addWidget(window.run_button)
    row.addWidget(window.stop_button)
    side.addLayout(row)
    side.addWidget(window.strict_button)
    side.addStretch(1)
    top.addLayout(side, 2)
    return top


def build_results(window) -> QWidget:
    """The summary table with its exports, and the diff against plain decoding."""
    bottom = QWidget()
    bottom_layout = QHBoxLayout(bottom)
    bottom_layout.setContentsMargins(0, 0, 0, 0)
    bottom_layout.setSpacing(8)
    table_column = QVBoxLayout()
    table_column.setContentsMargins(0, 0, 0, 0)
    window.table = QTableWidget(0, len(COLUMNS))
    window.table.setHorizontalHeaderLabels(COLUMNS)
    window.table.setColumnHidden(CROSS, True)  # shown by show_rows where plain decoding ran on several backends
    for c, tip in enumerate(COLUMN_TIPS):
        window.table.horizontalHeaderItem(c).setToolTip(tip)
    window.table.verticalHeader().hide()
    window.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    window.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    window.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    window.table.setWordWrap(False)
    header = window.table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(True)
    window.table.itemSelectionChanged.connect(window.show_selected_diff)
    # room for plain + 4 settings without scrolling
    window.table.setMinimumHeight(window.table.verticalHeader().defaultSectionSize() * (MAX_SETTINGS + 1)
                                  + window.table.horizontalHeader().sizeHint().height() + 6)
    table_column.addWidget(window.table, 1)
    export_row = QHBoxLayout()
    export_row.addStretch(1)
    for text, kind in (("Export CSV…", "csv"), ("Export JSON…", "json"), ("Save PNG…", "png")):
        button = QPushButton(text)
        button.clicked.connect(lambda _=False, k=kind: window.export(k))
        export_row.addWidget(button)
    table_column.addLayout(export_row)
    table_holder = QWidget()
    table_holder.setLayout(table_column)
    bottom_layout.addWidget(table_holder, 5)
    window.diff_view = QTextEdit()
    window.diff_view.setObjectName("transcript")
    window.diff_view.setReadOnly(True)
    window.diff_view.setPlaceholderText("The difference from plain decoding shows here.")
    bottom_layout.addWidget(window.diff_view, 2)
    return bottom


def build_sweep_page(window, p: theme.Palette) -> QWidget:
    page = QWidget()
    layout = QVBoxLayout(page)
    layout.setContentsMargins(6, 6, 6, 6)
    layout.setSpacing(6)
    row = QHBoxLayout()
    row.setSpacing(6)
    row.addWidget(QLabel("Method"))
    window.sweep_setting = SettingRow(SpecConfig(method=sweep_methods()[0].name, k=4), removable=False,
                                      max_k=MAX_SWEEP_K)
    window.sweep_setting.k.hide()  # the sweep sets k
    row.addWidget(window.sweep_setting, 2)
    row.addWidget(QLabel("k from 1 to"))
    window.sweep_max_k = QSpinBox()
    window.sweep_max_k.setRange(2, MAX_SWEEP_K)
    window.sweep_max_k.setValue(8)
    window.sweep_max_k.setToolTip(f"Runs plain decoding once, then the method for k = 1…K (K ≤ {MAX_SWEEP_K})")
    row.addWidget(window.sweep_max_k)
    window.sweep_button = QPushButton("Run sweep")
    window.sweep_button.setObjectName("send_button")
    window.sweep_button.clicked.connect(window.run_sweep)
    window.sweep_stop = QPushButton("Stop")
    window.sweep_stop.clicked.connect(window.stop)
    row.addWidget(window.sweep_button)
    row.addWidget(window.sweep_stop)
    row.addStretch(1)
    layout.addLayout(row)

    body = QHBoxLayout()
    window.sweep_plot = SweepPlot(p)
    body.addWidget(window.sweep_plot, 3)
    side = QVBoxLayout()
    window.best_label = QLabel("Run a sweep to find the fastest k for this prompt.")
    window.best_label.setObjectName("pane_title")
    window.best_label.setWordWrap(True)
    side.addWidget(window.best_label)
    window.apply_button = QPushButton("Use this k in the chat")
    window.apply_button.setToolTip("Set the chat's method and k to the best setting found")
    window.apply_button.clicked.connect(window.apply_best_to_chat)
    side.addWidget(window.apply_button)
    window.sweep_table = QTableWidget(0, 5)
    window.sweep_table.setHorizontalHeaderLabels(("k", "speed-up", "theory", "acceptance", "cost ratio c"))
    window.sweep_table.verticalHeader().hide()
    window.sweep_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    header = window.sweep_table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # no header is clipped
    header.setStretchLastSection(True)
    window.sweep_table.setMinimumWidth(header.length() + 4)
    side.addWidget(window.sweep_table, 1)
    window.sweep_note = QLabel("The theoretical curve uses α (acceptance) and c (draft cost per token / verify "
                               "cost per pass) pooled over the sweep (Leviathan et al. 2023, eq. 1). Each k runs "
                               "once here, so a close best k may be noise: Tools ▸ Which setting is fastest "
                               "here? repeats every setting and gives the median and its range.")
    window.sweep_note.setObjectName("dim")
    window.sweep_note.setWordWrap(True)
    side.addWidget(window.sweep_note)
    exports = QHBoxLayout()
    for text, kind in (("CSV…", "sweep-csv"), ("JSON…", "sweep-json"), ("Graph PNG…", "sweep-png")):
        button = QPushButton(text)
        button.clicked.connect(lambda _=False, k=kind: window.export(k))
        exports.addWidget(button)
    side.addLayout(exports)
    holder = QWidget()
    holder.setLayout(side)
    holder.setMaximumWidth(380)
    body.addWidget(holder, 2)
    layout.addLayout(body, 1)
    return page
