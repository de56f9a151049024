"""The model manager's parts, each a widget that owns its controls: the device, dtype and backend row (DeviceRow),
the models table with the buttons that act on the selected model (ModelTable), the target and draft pickers with
the verdict (PairBox) and the download box (DownloadBox).

They render what they are given (catalog entries, estimates, a PairVerdict, a download's progress) in the words of
gui.sessions.models and tell the manager what was asked by signals; they run nothing.
May touch: QtWidgets, gui.theme, gui.sessions.models (the device and dtype names, the words), the backends' names.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QHeaderView, QLabel,
                               QLineEdit, QListWidget, QListWidgetItem, QProgressBar, QPushButton, QSizePolicy,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from engine.core.config import BACKENDS
from gui import theme
from gui.sessions.models import DTYPES, PairVerdict, device_choices, device_label, draft_list_words, model_row

COLUMNS = ("Model", "Source", "Architecture", "Parameters", "Size on disk", "Stored as", "Tokenizer",
           "Memory needed", "Status")
MEMORY, STATUS = 7, 8  # the columns coloured when a model is too big or not usable
NO_DRAFT = "none (no draft model)"


def push_button(text: str, slot) -> QPushButton:
    button = QPushButton(text)
    button.clicked.connect(slot)
    return button


def set_combo(combo: QComboBox, name: str | None) -> None:
    """Select `name` (an item's data, else its text: a hub id given by label, or a path), or the first item."""
    index = combo.findData(name)
    if index < 0 and name is not None:
        index = next((i for i in range(combo.count()) if combo.itemText(i) == name), -1)
    combo.setCurrentIndex(max(0, index))


class DeviceRow(QWidget):
    """Device, dtype and backend, with the free-memory line."""

    changed = Signal()  # any of the three

    def __init__(self, device: str, dtype: str, parent=None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Device"))
        self.device = QComboBox()
        for name in device_choices():
            self.device.addItem(device_label(name), name)
        self.device.setCurrentIndex(max(0, self.device.findData(device)))
        row.addWidget(self.device)
        row.addSpacing(12)
        row.addWidget(QLabel("dtype"))
        self.dtype = QComboBox()
        for name in DTYPES:
            self.dtype.addItem("auto (per device)" if name == "auto" else name, name)
        self.dtype.setCurrentIndex(max(0, self.dtype.findData(dtype)))
        self.dtype.setToolTip("The dtype the weights are loaded in on the transformers backend (GGUF files are "
                              "dequantised to it); on llama.cpp a GGUF stays as quantized")
        row.addWidget(self.dtype)
        row.addSpacing(12)
        row.addWidget(QLabel("Backend"))
        self.backend = QComboBox()
        self.backend.setObjectName("manager_backend")
        for name in ("auto",) + BACKENDS:
            self.backend.addItem("auto (GGUF on llama.cpp)" if name == "auto" else name, name)
        self.backend.setToolTip("Where models run: llama.cpp keeps a GGUF quantized (its file size plus the KV "
                                "cache), transformers loads it in the dtype above")
        row.addWidget(self.backend)
        row.addSpacing(12)
        self.free_label = QLabel("")
        self.free_label.setObjectName("dim")
        self.free_label.setWordWrap(True)  # a long line wraps: it never widens the window past a small screen
        self.free_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.free_label, 1)
        for combo in (self.device, self.dtype, self.backend):
            combo.currentIndexChanged.connect(self.changed)

    def set_available(self, available: dict[str, bool]) -> None:
        """Grey out the devices nothing here can run on."""
        for i in range(self.device.count()):
            self.device.model().item(i).setEnabled(available.get(self.device.itemData(i), False))


class ModelTable(QWidget):
    """Every model found, with its facts, and the buttons that act on the selected one."""

    selection_changed = Signal()
    use_requested = Signal(str)  # "target" or "draft": use the selected model so
    train_requested = Signal()  # train a drafter for the selected model
    add_requested = Signal(bool)  # add a folder (False) or a GGUF file (True)
    add_server_requested = Signal()
    remove_requested = Signal()
    refresh_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("model_table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self.selection_changed)
        self.table.itemDoubleClicked.connect(lambda _item: self.use_requested.emit("target"))
        layout.addWidget(self.table, 1)
        layout.addLayout(self._buttons())

    def _buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.add_folder_button = push_button("Add folder…", lambda: self.add_requested.emit(False))
        self.add_gguf_button = push_button("Add GGUF file…", lambda: self.add_requested.emit(True))
        self.add_server_button = push_button("Add server…", self.add_server_requested)
        self.add_server_button.setToolTip("Chat with a model on an OpenAI-compatible server (llama-server, vLLM, "
                                          "SGLang): http to this machine, https elsewhere")
        self.remove_button = push_button("Remove from list", self.remove_requested)
        self.remove_button.setToolTip("Forget a folder or file you added (nothing is deleted from disk)")
        self.refresh_button = push_button("Refresh", self.refresh_requested)
        self.use_target_button = push_button("Use as target", lambda: self.use_requested.emit("target"))
        self.use_draft_button = push_button("Use as draft", lambda: self.use_requested.emit("draft"))
        self.train_button = push_button("Train a drafter…", self.train_requested)
        self.train_button.setToolTip("Train an EAGLE head for the selected model on this machine (method eagle; "
                                     "it runs on the transformers backend)")
        for button in (self.add_folder_button, self.add_gguf_button, self.add_server_button, self.remove_button,
                       self.refresh_button):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(self.train_button)
        row.addWidget(self.use_target_button)
        row.addWidget(self.use_draft_button)
        return row

    def fill(self, entries, estimates: dict, palette: theme.Palette):
        """One row per catalog entry (the selection kept); returns the last estimate that knows the free memory."""
        selected = self.selected_name()
        self.table.setRowCount(len(entries))
        free = None
        for row, entry in enumerate(entries):
            estimate = estimates.get(entry.name)
            if estimate is not None and estimate.free_bytes is not None:
                free = estimate
            words = model_row(entry, estimate)
            for column, value in enumerate(words.values):
                self.table.setItem(row, column, self._item(entry, words, column, value, palette))
        if selected is not None:
            self.select(selected)
        return free

    @staticmethod
    def _item(entry, words, column: int, value: str, p: theme.Palette) -> QTableWidgetItem:
        item = QTableWidgetItem(value)
        item.setData(Qt.ItemDataRole.UserRole, entry.name)
        if column == 0:
            item.setToolTip(words.tooltip)
        elif column == MEMORY:
            item.setToolTip(words.memory_tip)
            if words.too_big:
                item.setForeground(QColor(p.error))
        elif column == STATUS:
            item.setToolTip(words.status)
            if not entry.usable:
                item.setForeground(QColor(p.error))
        if not entry.usable and column != STATUS:
            item.setForeground(QColor(p.text_dim))
        return item

    def select(self, name: str) -> bool:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(Qt.ItemDataRole.UserRole) == name:
                self.table.selectRow(row)
                return True
        return False

    def selected_name(self) -> str | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        return self.table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole) if rows else None

    def set_buttons(self, usable: bool, removable: bool) -> None:
        """Enable what acts on the selected model: `usable` (selected and loadable), `removable` (added by hand)."""
        self.use_target_button.setEnabled(usable)
        self.use_draft_button.setEnabled(usable)
        self.train_button.setEnabled(usable)  # every local model runs on transformers
        self.remove_button.setEnabled(removable)


class PairBox(QGroupBox):
    """Target and draft pickers, the verdict in plain words and the drafts found (those of another tokenizer
    marked)."""

    pair_changed = Signal()  # the target or the draft was picked
    draft_chosen = Signal(str)  # a draft found was double-clicked: its name

    def __init__(self, parent=None) -> None:
        super().__init__("Target and draft", parent)
        form = QFormLayout(self)
        self.target = QComboBox()
        self.target.setObjectName("target_combo")
        self.draft = QComboBox()
        self.draft.setObjectName("draft_combo")
        form.addRow("Target", self.target)
        form.addRow("Draft", self.draft)
        self.verdict_label = QLabel("")
        self.verdict_label.setObjectName("verdict")
        self.verdict_label.setWordWrap(True)
        self.verdict_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow(self.verdict_label)
        self.drafts_caption = QLabel("Smaller drafts found for this target: those of its own tokenizer first, then "
                                     "those of another, which draft through text:")
        self.drafts_caption.setObjectName("dim")
        self.drafts_caption.setWordWrap(True)
        form.addRow(self.drafts_caption)
        self.drafts_list = QListWidget()
        self.drafts_list.setObjectName("compatible_drafts")
        self.drafts_list.setMaximumHeight(90)
        self.drafts_list.setToolTip("Double-click to use it as the draft")
        self.drafts_list.itemDoubleClicked.connect(self._draft_double_clicked)
        form.addRow(self.drafts_list)
        self.target.currentIndexChanged.connect(lambda _i: self.pair_changed.emit())
        self.draft.currentIndexChanged.connect(lambda _i: self.pair_changed.emit())

    def _draft_double_clicked(self, item: QListWidgetItem) -> None:
        name = item.data(Qt.ItemDataRole.UserRole)
        if name:
            self.draft_chosen.emit(name)

    def fill(self, entries, target: str | None, draft: str | None) -> None:
        """Both pickers from the usable `entries` (the draft's also offers none), `target` and `draft` chosen;
        quietly (no pair_changed)."""
        for combo in (self.target, self.draft):
            combo.blockSignals(True)
            combo.clear()
        self.draft.addItem(NO_DRAFT, None)
        for entry in entries:
            if entry.usable:
                self.target.addItem(entry.label, entry.name)
                self.draft.addItem(entry.label, entry.name)
        set_combo(self.target, target)
        set_combo(self.draft, draft)
        for combo in (self.target, self.draft):
            combo.blockSignals(False)

    def choose(self, combo: QComboBox, name: str | None) -> None:
        """Pick `name` in one of the two pickers, quietly (no pair_changed)."""
        combo.blockSignals(True)
        set_combo(combo, name)
        combo.blockSignals(False)

    def say(self, text: str) -> None:
        """A line in place of the verdict (no target, a check under way, a check that failed)."""
        self.verdict_label.setText(text)
        self.verdict_label.setStyleSheet("")

    def show_verdict(self, verdict: PairVerdict, p: theme.Palette) -> None:
        if verdict.compatible is None:
            self.verdict_label.setText("No draft model: pick one to use the draft-model method, or use another "
                                       "method (prompt lookup, early exit) in the settings.")
            self.verdict_label.setStyleSheet(f"color: {p.text_dim};")
        elif verdict.compatible:
            self.verdict_label.setText("✓ " + verdict.explanation)
            self.verdict_label.setStyleSheet(f"color: {p.text};")
        else:
            self.verdict_label.setText("⚠ " + verdict.explanation)
            self.verdict_label.setStyleSheet(f"color: {p.error};")
        self.drafts_list.clear()
        for candidate in verdict.drafts:  # the target's own tokenizer first, then another's (drafted through text)
            text, tip = draft_list_words(candidate)
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, candidate.entry.name)
            item.setToolTip(tip)
            self.drafts_list.addItem(item)
        if not verdict.drafts:
            item = QListWidgetItem("none found among the models listed above")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.drafts_list.addItem(item)

    def compatible_draft_names(self) -> list[str]:
        names = (self.drafts_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.drafts_list.count()))
        return [name for name in names if name]


class DownloadBox(QGroupBox):
    """A Hugging Face repo id, Download and Cancel, the progress bar, the status line and the token note."""

    download_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__("Download from Hugging Face", parent)
        layout = QVBoxLayout(self)
        repo_row = QHBoxLayout()
        self.repo = QLineEdit()
        self.repo.setObjectName("repo_id")
        self.repo.setPlaceholderText("org/name, e.g. Qwen/Qwen3-0.6B")
        self.repo.returnPressed.connect(self.download_requested)
        self.download_button = push_button("Download", self.download_requested)
        self.cancel_button = push_button("Cancel", self.cancel_requested)
        self.cancel_button.setEnabled(False)
        repo_row.addWidget(self.repo, 1)
        repo_row.addWidget(self.download_button)
        repo_row.addWidget(self.cancel_button)
        layout.addLayout(repo_row)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("%p%")
        layout.addWidget(self.progress)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setObjectName("dim")
        layout.addWidget(self.status)
        self.token_note = QLabel("")
        self.token_note.setObjectName("dim")
        self.token_note.setWordWrap(True)
        layout.addWidget(self.token_note)
        layout.addStretch(1)

    def set_downloading(self, downloading: bool) -> None:
        self.download_button.setEnabled(not downloading)
        self.cancel_button.setEnabled(downloading)
        self.repo.setEnabled(not downloading)

    def show_fraction(self, done: int, total: int) -> None:
        """`done` of `total` (0 of 0: a busy bar)."""
        self.progress.setRange(0, 0 if total == 0 else 1000)
        if total:
            self.progress.setValue(int(1000 * min(done, total) / total))

    def end_busy(self) -> None:
        """Leave the busy bar (a download ended), the last fraction kept."""
        self.progress.setRange(0, 1000)

    def say(self, text: str, colour: str | None = None) -> None:
        self.status.setStyleSheet(f"color: {colour};" if colour else "")
        self.status.setText(text)
