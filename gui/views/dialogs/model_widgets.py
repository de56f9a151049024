"""The model manager's widgets, built once: the device, dtype and backend row, the models table with the buttons
that act on the selected model, the target and draft pickers with the verdict, the download box, and the
Load / Close row. Each builder sets the manager's view attributes and connects their signals to its slots.

May touch: QtWidgets, gui.sessions.models (the device and dtype names), the backends' names.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QHeaderView, QLabel,
                               QLineEdit, QListWidget, QProgressBar, QPushButton, QSizePolicy, QSplitter,
                               QTableWidget, QVBoxLayout, QWidget)

from engine.core.config import BACKENDS
from gui.sessions.models import DTYPES, device_choices, device_label

COLUMNS = ("Model", "Source", "Architecture", "Parameters", "Size on disk", "Stored as", "Tokenizer",
           "Memory needed", "Status")


def build(manager) -> None:
    """Every widget of the model manager, set as its attributes."""
    outer = QVBoxLayout(manager)
    outer.setSpacing(8)
    outer.addLayout(build_device_row(manager))
    splitter = QSplitter(Qt.Orientation.Vertical)
    splitter.setObjectName("model_manager_splitter")
    splitter.setChildrenCollapsible(False)
    splitter.addWidget(build_table_box(manager))
    lower = QWidget()
    lower_layout = QHBoxLayout(lower)
    lower_layout.setContentsMargins(0, 0, 0, 0)
    lower_layout.addWidget(build_pair_box(manager), 3)
    lower_layout.addWidget(build_download_box(manager), 2)
    splitter.addWidget(lower)
    splitter.setStretchFactor(0, 3)
    splitter.setStretchFactor(1, 2)
    outer.addWidget(splitter, 1)
    manager.splitter = splitter
    outer.addLayout(build_buttons(manager))
    manager.update_token_note()
    manager.update_buttons()


def build_device_row(manager) -> QHBoxLayout:
    row = QHBoxLayout()
    row.addWidget(QLabel("Device"))
    manager.device = QComboBox()
    for name in device_choices():
        manager.device.addItem(device_label(name), name)
    manager.device.setCurrentIndex(max(0, manager.device.findData(manager.settings.device())))
    row.addWidget(manager.device)
    row.addSpacing(12)
    row.addWidget(QLabel("dtype"))
    manager.dtype = QComboBox()
    for name in DTYPES:
        manager.dtype.addItem("auto (per device)" if name == "auto" else name, name)
    manager.dtype.setCurrentIndex(max(0, manager.dtype.findData(manager.settings.dtype())))
    manager.dtype.setToolTip("The dtype the weights are loaded in on the transformers backend (GGUF files are "
                             "dequantised to it); on llama.cpp a GGUF stays as quantized")
    row.addWidget(manager.dtype)
    row.addSpacing(12)
    row.addWidget(QLabel("Backend"))
    manager.backend = QComboBox()
    manager.backend.setObjectName("manager_backend")
    for name in ("auto",) + BACKENDS:
        manager.backend.addItem("auto (GGUF on llama.cpp)" if name == "auto" else name, name)
    manager.backend.setToolTip("Where models run: llama.cpp keeps a GGUF quantized (its file size plus the KV "
                               "cache), transformers loads it in the dtype above")
    row.addWidget(manager.backend)
    row.addSpacing(12)
    manager.free_label = QLabel("")
    manager.free_label.setObjectName("dim")
    manager.free_label.setWordWrap(True)  # a long line wraps: it never widens the window past a small screen
    manager.free_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    row.addWidget(manager.free_label, 1)
    manager.device.currentIndexChanged.connect(manager.device_changed)
    manager.dtype.currentIndexChanged.connect(manager.device_changed)
    manager.backend.currentIndexChanged.connect(manager.device_changed)
    return row


def build_table_box(manager) -> QWidget:
    """Every model found, with its facts, and the buttons that act on the selected one."""
    box = QWidget()
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    manager.table = QTableWidget(0, len(COLUMNS))
    manager.table.setObjectName("model_table")
    manager.table.setHorizontalHeaderLabels(COLUMNS)
    manager.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    manager.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    manager.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    manager.table.verticalHeader().hide()
    manager.table.setAlternatingRowColors(True)
    manager.table.setShowGrid(False)
    header = manager.table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Interactive)
    header.setStretchLastSection(True)
    manager.table.itemSelectionChanged.connect(manager.update_buttons)
    manager.table.itemDoubleClicked.connect(lambda _item: manager.use_selected_as("target"))
    layout.addWidget(manager.table, 1)
    row = QHBoxLayout()
    manager.add_folder_button = push_button("Add folder…", lambda: manager.add_path())
    manager.add_gguf_button = push_button("Add GGUF file…", lambda: manager.add_path(gguf=True))
    manager.add_server_button = push_button("Add server…", lambda: manager.add_server())
    manager.add_server_button.setToolTip("Chat with a model on an OpenAI-compatible server (llama-server, vLLM, "
                                         "SGLang): http to this machine, https elsewhere")
    manager.remove_button = push_button("Remove from list", manager.remove_selected)
    manager.remove_button.setToolTip("Forget a folder or file you added (nothing is deleted from disk)")
    manager.refresh_button = push_button("Refresh", manager.refresh)
    manager.use_target_button = push_button("Use as target", lambda: manager.use_selected_as("target"))
    manager.use_draft_button = push_button("Use as draft", lambda: manager.use_selected_as("draft"))
    manager.train_button = push_button("Train a drafter…", manager.train_selected)
    manager.train_button.setToolTip("Train an EAGLE head for the selected model on this machine (method eagle; "
                                    "it runs on the transformers backend)")
    for button in (manager.add_folder_button, manager.add_gguf_button, manager.add_server_button, manager.remove_button,
                   manager.refresh_button):
        row.addWidget(button)
    row.addStretch(1)
    row.addWidget(manager.train_button)
    row.addWidget(manager.use_target_button)
    row.addWidget(manager.use_draft_button)
    layout.addLayout(row)
    return box


def push_button(text: str, slot) -> QPushButton:
    button = QPushButton(text)
    button.clicked.connect(slot)
    return button


def build_pair_box(manager) -> QGroupBox:
    """Target and draft pickers, the verdict in plain words and the drafts found (those of another tokenizer
    marked)."""
    box = QGroupBox("Target and draft")
    form = QFormLayout(box)
    manager.target = QComboBox()
    manager.target.setObjectName("target_combo")
    manager.draft = QComboBox()
    manager.draft.setObjectName("draft_combo")
    form.addRow("Target", manager.target)
    form.addRow("Draft", manager.draft)
    manager.verdict_label = QLabel("")
    manager.verdict_label.setObjectName("verdict")
    manager.verdict_label.setWordWrap(True)
    manager.verdict_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    form.addRow(manager.verdict_label)
    manager.drafts_caption = QLabel("Smaller drafts found for this target: those of its own tokenizer first, then "
                                     "those of another, which draft through text:")
    manager.drafts_caption.setObjectName("dim")
    manager.drafts_caption.setWordWrap(True)
    form.addRow(manager.drafts_caption)
    manager.drafts_list = QListWidget()
    manager.drafts_list.setObjectName("compatible_drafts")
    manager.drafts_list.setMaximumHeight(90)
    manager.drafts_list.setToolTip("Double-click to use it as the draft")
    manager.drafts_list.itemDoubleClicked.connect(manager.draft_from_list)
    form.addRow(manager.drafts_list)
    manager.target.currentIndexChanged.connect(lambda _i: manager.pair_changed())
    manager.draft.currentIndexChanged.connect(lambda _i: manager.pair_changed())
    return box


def build_download_box(manager) -> QGroupBox:
    box = QGroupBox("Download from Hugging Face")
    layout = QVBoxLayout(box)
    repo_row = QHBoxLayout()
    manager.repo = QLineEdit()
    manager.repo.setObjectName("repo_id")
    manager.repo.setPlaceholderText("org/name, e.g. Qwen/Qwen3-0.6B")
    manager.repo.returnPressed.connect(manager.start_download)
    manager.download_button = push_button("Download", manager.start_download)
    manager.cancel_button = push_button("Cancel", manager.cancel_download)
    manager.cancel_button.setEnabled(False)
    repo_row.addWidget(manager.repo, 1)
    repo_row.addWidget(manager.download_button)
    repo_row.addWidget(manager.cancel_button)
    layout.addLayout(repo_row)
    manager.download_progress = QProgressBar()
    manager.download_progress.setRange(0, 1)
    manager.download_progress.setValue(0)
    manager.download_progress.setFormat("%p%")
    layout.addWidget(manager.download_progress)
    manager.download_status = QLabel("")
    manager.download_status.setWordWrap(True)
    manager.download_status.setObjectName("dim")
    layout.addWidget(manager.download_status)
    manager.token_note = QLabel("")
    manager.token_note.setObjectName("dim")
    manager.token_note.setWordWrap(True)
    layout.addWidget(manager.token_note)
    layout.addStretch(1)
    return box


def build_buttons(manager) -> QHBoxLayout:
    buttons = QHBoxLayout()
    manager.status = QLabel("Looking for models…")
    manager.status.setObjectName("dim")
    buttons.addWidget(manager.status, 1)
    manager.load_button = push_button("Load", manager.load_choice)
    manager.load_button.setObjectName("send_button")
    manager.load_button.setToolTip("Load the target on the chosen device (and use the draft with the draft-model "
                                   "method)")
    buttons.addWidget(manager.load_button)
    buttons.addWidget(push_button("Close", manager.close))
    return buttons
