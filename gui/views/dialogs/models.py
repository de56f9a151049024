"""The model manager: every model on this machine with its facts, target and draft picking with an
instant compatibility check in plain words, the compatible drafts found, and downloads from the Hugging Face
Hub with progress, cancel and resume.

All the work is `engine.models.catalog` and `engine.models.hub`, run on background threads (gui.jobs): listing reads
metadata and tokenizers, the pair check loads two tokenizers (never weights), a download streams files.
Results come back by job id; a result for a question no longer asked is dropped.

May touch: engine.models.catalog and engine.models.hub (public functions only), engine.models.sources (which devices exist),
engine.models.secrets (whether a token is set, never the token's text; a server's API key is saved, never shown),
engine.remote.client (a server address's rules), gui.persistence.settings (device, added models, answers).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDialog, QFileDialog, QFormLayout, QGroupBox,
                               QHBoxLayout, QHeaderView, QLabel, QLineEdit, QListWidget, QListWidgetItem,
                               QProgressBar, QPushButton, QSplitter, QTableWidget, QTableWidgetItem,
                               QVBoxLayout, QWidget)

from engine.models import catalog, pairs, secrets
from engine.core.config import BACKENDS
from engine.models.pairs import DRAFT_IS_TARGET
from engine.core.errors import DownloadCancelledError, SpecScopeError, UnsafeCheckpointError
from gui import theme
from gui.jobs import BackgroundJobs
from gui.persistence.settings import AppSettings
from gui.views.main.dialogs import ask_yes_no

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")
COLUMNS = ("Model", "Source", "Architecture", "Parameters", "Size on disk", "Stored as", "Tokenizer",
           "Memory needed", "Status")
KIND_LABELS = {"built-in": "built in", "hub-cache": "HF cache", "folder": "folder", "gguf": "GGUF file"}
NO_DRAFT = "none (no draft model)"


def plural(n: int, word: str) -> str:
    """'1 model', '3 models'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True, slots=True)
class PairVerdict:
    target: str
    draft: str | None
    compatible: bool | None  # None: no draft chosen
    explanation: str
    drafts: tuple  # compatible CatalogEntry candidates for the target


def device_availability() -> dict[str, bool]:
    """Which devices this machine has: what engine.models.sources.resolve_device (the one resolver) accepts."""
    from engine.core.errors import DeviceError
    from engine.models.sources import resolve_device

    available = {}
    for name in DEVICES:
        try:
            resolve_device(name)
            available[name] = True
        except DeviceError:
            available[name] = False
    return available


def list_job(extra: list[str], device: str, dtype: str, backend: str = "auto"):
    entries = catalog.list_models(extra)
    return entries, estimates_job(entries, device, dtype, backend)(), device_availability()


def estimates_job(entries, device: str, dtype: str, backend: str = "auto") -> Callable[[], dict]:
    """Each entry's memory estimate on the chosen backend (a GGUF on llama.cpp stays quantized)."""
    def run() -> dict:
        out = {}
        for entry in entries:
            try:
                out[entry.name] = catalog.estimate_memory_on(entry, backend, device,
                                                             None if dtype == "auto" else dtype)
            except (SpecScopeError, RuntimeError, ValueError):
                out[entry.name] = None
        return out
    return run


def pair_job(target, draft, candidates) -> Callable[[], PairVerdict]:
    def run() -> PairVerdict:
        drafts = tuple(catalog.compatible_drafts(target, candidates))
        if draft is None:
            return PairVerdict(target.name, None, None, "", drafts)
        if catalog.same_model(target, draft):
            return PairVerdict(target.name, draft.name, False, DRAFT_IS_TARGET, drafts)
        try:
            difference = catalog.draft_difference(target, draft)
        except SpecScopeError as exc:
            return PairVerdict(target.name, draft.name, False, f"The pair cannot be checked: {exc}", drafts)
        if difference is not None:
            return PairVerdict(target.name, draft.name, False, catalog.explain_mismatch(difference), drafts)
        note = ""
        if not catalog.is_smaller(draft, target):
            note = " It is not smaller than the target, though, so it will not make replies faster."
        return PairVerdict(target.name, draft.name, True,
                           f"These two share one tokenizer: {draft.label} can draft for {target.label}.{note}",
                           drafts)
    return run


@dataclass(frozen=True, slots=True)
class DraftChoices:
    """What the settings panel's draft list offers for a target (gui.views.chat.controls.set_draft_choices)."""

    target: str
    names: tuple[str, ...]  # compatible, smaller, installed
    target_aliases: frozenset[str]  # the target's own names: a draft that is one of them is the target itself
    note: str  # when none is installed: why, and the known-good draft
    download: str | None  # the known-good draft's hub id, to download


def draft_choices(target_name: str, added: list[str]) -> DraftChoices:
    """The compatible, smaller drafts installed for `target_name` (loads tokenizers, never weights); when
    there is none, engine.models.pairs' known-good draft for its family."""
    target = catalog.describe_name(target_name)
    entries = catalog.list_models(added)
    drafts = catalog.compatible_drafts(target, entries)
    aliases = {target_name, target.name, str(target.path)} | {e.name for e in entries if catalog.same_model(e, target)}
    if drafts:
        return DraftChoices(target_name, tuple(e.name for e in drafts), frozenset(aliases), "", None)
    names = (target_name, target.name, target.label, target.repo_id)
    known, bigger = pairs.pairs_for(*names), pairs.pairs_drafted_by(*names)
    download = known[0].draft if known else bigger[0].targets[0] if bigger else None  # the draft, or its target
    advice = pairs.suggestion(*names) or "Prompt lookup and early exit need no draft model."
    return DraftChoices(target_name, (), frozenset(aliases),
                        f"No compatible, smaller draft is installed for {target.label}. {advice}", download)


class ModelManager(QDialog):
    # what happened (tests wait on these)
    catalog_listed = Signal()
    estimates_updated = Signal()
    pair_checked = Signal(object)  # PairVerdict
    download_progressed = Signal(object)  # engine.models.hub.DownloadProgress (emitted from the download's threads)
    download_finished = Signal(object)  # engine.models.hub.DownloadResult
    download_failed = Signal(str)
    download_cancelled = Signal(str)
    # asks
    load_requested = Signal(str, object, str, str)  # target, draft (None: none), device, dtype
    train_requested = Signal(str, str)  # a model's name and label: train an eagle head for it

    def __init__(self, settings: AppSettings, palette: theme.Palette, *, target: str = "default",
                 draft: str | None = None, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.settings = settings
        self.palette_ = palette
        self.entries: list[catalog.CatalogEntry] = []
        self.estimates: dict = {}
        self.verdict: PairVerdict | None = None
        self.ask_yes_no: Callable[..., bool] = ask_yes_no  # replaceable: tests answer without a modal dialog
        self._want_target, self._want_draft = target, draft
        self._list_job = self._estimate_job = self._pair_job = self._download_job = None
        self._download_cancel: threading.Event | None = None
        self._download_repo: str | None = None
        self._download_pickle = False
        self._closed = False
        self.catalog_jobs = BackgroundJobs("catalog", self)
        self.catalog_jobs.finished.connect(self._job_finished)
        self.catalog_jobs.failed.connect(self._job_failed)
        self.download_jobs = BackgroundJobs("download", self)
        self.download_jobs.finished.connect(self._download_done)
        self.download_jobs.failed.connect(self._download_error)
        self.download_progressed.connect(self._show_progress)
        self._build()
        self.refresh()

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setSpacing(8)
        outer.addLayout(self._build_device_row())
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setObjectName("model_manager_splitter")
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self._build_table_box())
        lower = QWidget()
        lower_layout = QHBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addWidget(self._build_pair_box(), 3)
        lower_layout.addWidget(self._build_download_box(), 2)
        splitter.addWidget(lower)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        outer.addWidget(splitter, 1)
        self.splitter = splitter
        outer.addLayout(self._build_buttons())
        self.update_token_note()
        self._update_buttons()

    def _build_device_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.addWidget(QLabel("Device"))
        self.device = QComboBox()
        for name in DEVICES:
            self.device.addItem({"auto": "auto (best available)", "cpu": "CPU", "cuda": "CUDA (NVIDIA GPU)",
                                 "mps": "MPS (Apple GPU)"}[name], name)
        self.device.setCurrentIndex(max(0, self.device.findData(self.settings.device())))
        row.addWidget(self.device)
        row.addSpacing(12)
        row.addWidget(QLabel("dtype"))
        self.dtype = QComboBox()
        for name in DTYPES:
            self.dtype.addItem("auto (per device)" if name == "auto" else name, name)
        self.dtype.setCurrentIndex(max(0, self.dtype.findData(self.settings.dtype())))
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
        row.addWidget(self.free_label, 1)
        self.device.currentIndexChanged.connect(self._device_changed)
        self.dtype.currentIndexChanged.connect(self._device_changed)
        self.backend.currentIndexChanged.connect(self._device_changed)
        return row

    def _build_table_box(self) -> QWidget:
        """Every model found, with its facts, and the buttons that act on the selected one."""
        box = QWidget()
        layout = QVBoxLayout(box)
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
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _item: self.use_selected_as("target"))
        layout.addWidget(self.table, 1)
        row = QHBoxLayout()
        self.add_folder_button = self._button("Add folder…", lambda: self.add_path())
        self.add_gguf_button = self._button("Add GGUF file…", lambda: self.add_path(gguf=True))
        self.add_server_button = self._button("Add server…", lambda: self.add_server())
        self.add_server_button.setToolTip("Chat with a model on an OpenAI-compatible server (llama-server, vLLM, "
                                          "SGLang): http to this machine, https elsewhere")
        self.remove_button = self._button("Remove from list", self.remove_selected)
        self.remove_button.setToolTip("Forget a folder or file you added (nothing is deleted from disk)")
        self.refresh_button = self._button("Refresh", self.refresh)
        self.use_target_button = self._button("Use as target", lambda: self.use_selected_as("target"))
        self.use_draft_button = self._button("Use as draft", lambda: self.use_selected_as("draft"))
        self.train_button = self._button("Train a drafter…", self.train_selected)
        self.train_button.setToolTip("Train an EAGLE head for the selected model on this machine (method eagle; "
                                     "it runs on the transformers backend)")
        for button in (self.add_folder_button, self.add_gguf_button, self.add_server_button, self.remove_button,
                       self.refresh_button):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(self.train_button)
        row.addWidget(self.use_target_button)
        row.addWidget(self.use_draft_button)
        layout.addLayout(row)
        return box

    @staticmethod
    def _button(text: str, slot) -> QPushButton:
        button = QPushButton(text)
        button.clicked.connect(slot)
        return button

    def _build_pair_box(self) -> QGroupBox:
        """Target and draft pickers, the verdict in plain words and the compatible drafts found."""
        box = QGroupBox("Target and draft")
        form = QFormLayout(box)
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
        self.drafts_caption = QLabel("Compatible drafts found for this target (same vocabulary, smaller):")
        self.drafts_caption.setObjectName("dim")
        self.drafts_caption.setWordWrap(True)
        form.addRow(self.drafts_caption)
        self.drafts_list = QListWidget()
        self.drafts_list.setObjectName("compatible_drafts")
        self.drafts_list.setMaximumHeight(90)
        self.drafts_list.setToolTip("Double-click to use it as the draft")
        self.drafts_list.itemDoubleClicked.connect(self._draft_from_list)
        form.addRow(self.drafts_list)
        self.target.currentIndexChanged.connect(lambda _i: self._pair_changed())
        self.draft.currentIndexChanged.connect(lambda _i: self._pair_changed())
        return box

    def _build_download_box(self) -> QGroupBox:
        box = QGroupBox("Download from Hugging Face")
        layout = QVBoxLayout(box)
        repo_row = QHBoxLayout()
        self.repo = QLineEdit()
        self.repo.setObjectName("repo_id")
        self.repo.setPlaceholderText("org/name, e.g. Qwen/Qwen3-0.6B")
        self.repo.returnPressed.connect(self.start_download)
        self.download_button = self._button("Download", self.start_download)
        self.cancel_button = self._button("Cancel", self.cancel_download)
        self.cancel_button.setEnabled(False)
        repo_row.addWidget(self.repo, 1)
        repo_row.addWidget(self.download_button)
        repo_row.addWidget(self.cancel_button)
        layout.addLayout(repo_row)
        self.download_progress = QProgressBar()
        self.download_progress.setRange(0, 1)
        self.download_progress.setValue(0)
        self.download_progress.setFormat("%p%")
        layout.addWidget(self.download_progress)
        self.download_status = QLabel("")
        self.download_status.setWordWrap(True)
        self.download_status.setObjectName("dim")
        layout.addWidget(self.download_status)
        self.token_note = QLabel("")
        self.token_note.setObjectName("dim")
        self.token_note.setWordWrap(True)
        layout.addWidget(self.token_note)
        layout.addStretch(1)
        return box

    def _build_buttons(self) -> QHBoxLayout:
        buttons = QHBoxLayout()
        self.status = QLabel("Looking for models…")
        self.status.setObjectName("dim")
        buttons.addWidget(self.status, 1)
        self.load_button = self._button("Load", self.load_choice)
        self.load_button.setObjectName("send_button")
        self.load_button.setToolTip("Load the target on the chosen device (and use the draft with the draft-model "
                                    "method)")
        buttons.addWidget(self.load_button)
        buttons.addWidget(self._button("Close", self.close))
        return buttons

    def sizeHint(self):  # noqa: N802
        from PySide6.QtCore import QSize
        return QSize(1120, 720)

    # ------------------------------------------------------------------ listing
    def refresh(self) -> None:
        self.status.setText("Looking for models…")
        self._list_job = self.catalog_jobs.submit(
            lambda extra=self.settings.added_models(), device=self.device_name(), dtype=self.dtype_name(),
            backend=self.backend_name(): list_job(extra, device, dtype, backend))

    def device_name(self) -> str:
        return self.device.currentData()

    def dtype_name(self) -> str:
        return self.dtype.currentData()

    def backend_name(self) -> str:
        return self.backend.currentData()

    def set_backend(self, backend: str) -> None:
        """Follow the settings panel's backend (auto, transformers, llama.cpp)."""
        self.backend.setCurrentIndex(max(0, self.backend.findData(backend)))

    def entry(self, name: str | None) -> catalog.CatalogEntry | None:
        return next((e for e in self.entries if e.name == name), None) if name else None

    def _job_finished(self, job_id: int, result) -> None:
        if job_id == self._list_job:
            self.entries, self.estimates, available = result
            for i in range(self.device.count()):
                item = self.device.model().item(i)
                item.setEnabled(available.get(self.device.itemData(i), False))
            self._fill_table()
            self._fill_combos()
            usable = sum(1 for e in self.entries if e.usable)
            self.status.setText(f"{plural(len(self.entries), 'model')} found, {usable} ready to load · HF cache: "
                                f"{catalog.hub_cache_dir()}")
            self.catalog_listed.emit()
            self._pair_changed()
        elif job_id == self._estimate_job:
            self.estimates = result
            self._fill_table()
            self.estimates_updated.emit()
        elif job_id == self._pair_job:
            self._show_verdict(result)

    def _job_failed(self, job_id: int, exc) -> None:
        if job_id in (self._list_job, self._estimate_job):
            self.status.setText(f"The models could not be listed: {exc}")
        elif job_id == self._pair_job:
            self.verdict_label.setText(f"⚠ The pair could not be checked: {exc}")

    def _fill_table(self) -> None:
        p = self.palette_
        selected = self.selected_entry()
        self.table.setRowCount(len(self.entries))
        free = None
        for row, entry in enumerate(self.entries):
            estimate = self.estimates.get(entry.name)
            if estimate is not None and estimate.free_bytes is not None:
                free = estimate
            tokenizer = " · ".join(x for x in (entry.tokenizer_family,
                                               f"{entry.vocab_size:,} tokens" if entry.vocab_size else None) if x)
            memory, memory_tip, too_big = "?", "", False
            if estimate is not None:
                memory = catalog.format_bytes(estimate.total_bytes)
                memory_tip = (f"on {estimate.device} in {estimate.dtype}: weights "
                              f"{catalog.format_bytes(estimate.weights_bytes)}, KV cache for "
                              f"{estimate.context_tokens:,} tokens {catalog.format_bytes(estimate.kv_cache_bytes)}, "
                              f"runtime {catalog.format_bytes(estimate.overhead_bytes)}; free "
                              f"{catalog.format_bytes(estimate.free_bytes)}")
                if estimate.fits is False:
                    too_big = True
                    memory += " — too big"
            status = "ready" if entry.usable else (entry.problem or "incomplete")
            if entry.usable and entry.needs_remote_code:
                status = "ready · runs its own code (asks first)"
            elif entry.usable and entry.weights_format == "pickle":
                status = "ready · pickle weights (asks first)"
            own = catalog.own_drafter(entry)
            if own is not None:
                status += f" · this model {own[1]}"
            values = (entry.label, KIND_LABELS.get(entry.kind, entry.kind), entry.architecture or "?",
                      catalog.format_parameters(entry.n_parameters), catalog.format_bytes(entry.size_bytes),
                      entry.dtype or "?", tokenizer or "?", memory, status)
            for column, value in enumerate(values):
                item = QTableWidgetItem(value)
                item.setData(Qt.ItemDataRole.UserRole, entry.name)
                if column == 0:
                    item.setToolTip(f"{entry.label}\n{entry.path}" + (f"\nThis model {own[1]}." if own else ""))
                elif column == 7:
                    item.setToolTip(memory_tip)
                    if too_big:
                        item.setForeground(QColor(p.error))
                elif column == 8:
                    item.setToolTip(status)
                    if not entry.usable:
                        item.setForeground(QColor(p.error))
                if not entry.usable and column != 8:
                    item.setForeground(QColor(p.text_dim))
                self.table.setItem(row, column, item)
        if free is not None:
            where = "RAM" if free.device == "cpu" else free.device
            on = {"auto": "each on its backend", "llama.cpp": "on llama.cpp (GGUF quantized)"}.get(
                self.backend_name(), f"on transformers in {free.dtype}")
            self.free_label.setText(f"Free {where}: {catalog.format_bytes(free.free_bytes)} · estimates {on}, "
                                    f"with a KV cache for up to "
                                    f"{catalog.DEFAULT_CONTEXT_TOKENS:,} tokens")
        if selected is not None:
            self.select(selected.name)
        self._update_buttons()

    def _fill_combos(self) -> None:
        target = self.target.currentData() or self._want_target
        draft = self.draft.currentData() if self.draft.count() else self._want_draft
        for combo in (self.target, self.draft):
            combo.blockSignals(True)
            combo.clear()
        self.draft.addItem(NO_DRAFT, None)
        for entry in self.entries:
            if entry.usable:
                self.target.addItem(entry.label, entry.name)
                self.draft.addItem(entry.label, entry.name)
        self._set_combo(self.target, target)
        self._set_combo(self.draft, draft)
        for combo in (self.target, self.draft):
            combo.blockSignals(False)

    @staticmethod
    def _set_combo(combo: QComboBox, name: str | None) -> None:
        index = combo.findData(name)
        if index < 0 and name is not None:  # a hub id given by label, or a path
            index = next((i for i in range(combo.count()) if combo.itemText(i) == name), -1)
        combo.setCurrentIndex(max(0, index))

    def _device_changed(self) -> None:
        self.settings.set_device(self.device_name(), self.dtype_name())
        if self.entries:
            self._estimate_job = self.catalog_jobs.submit(estimates_job(list(self.entries), self.device_name(),
                                                                        self.dtype_name(), self.backend_name()))

    # ------------------------------------------------------------------ selection and pairing
    def select(self, name: str) -> bool:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(Qt.ItemDataRole.UserRole) == name:
                self.table.selectRow(row)
                return True
        return False

    def selected_entry(self) -> catalog.CatalogEntry | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows:
            return None
        return self.entry(self.table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole))

    def use_selected_as(self, role: str) -> None:
        entry = self.selected_entry()
        if entry is None or not entry.usable:
            return
        self.set_pair(**{role: entry.name})

    def train_selected(self) -> None:
        entry = self.selected_entry()
        if entry is not None and entry.usable:
            self.train_requested.emit(entry.name, entry.label)

    def set_pair(self, target: str | None = None, draft: str | None = "keep") -> None:
        """Choose the target and/or draft by name (draft None: no draft); the check runs at once."""
        if target is not None:
            self._want_target = target
            self.target.blockSignals(True)
            self._set_combo(self.target, target)
            self.target.blockSignals(False)
        if draft != "keep":
            self._want_draft = draft
            self.draft.blockSignals(True)
            self._set_combo(self.draft, draft)
            self.draft.blockSignals(False)
        self._pair_changed()

    def _pair_changed(self) -> None:
        target = self.entry(self.target.currentData())
        if target is None:
            self.verdict_label.setText("Pick a target model.")
            self.drafts_list.clear()
            return
        draft = self.entry(self.draft.currentData())
        self.verdict_label.setText("Checking the pair…")
        self.verdict_label.setStyleSheet("")
        self._pair_job = self.catalog_jobs.submit(pair_job(target, draft, list(self.entries)))

    def _show_verdict(self, verdict: PairVerdict) -> None:
        self.verdict = verdict
        p = self.palette_
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
        for entry in verdict.drafts:
            item = QListWidgetItem(f"{entry.label}  ({catalog.format_parameters(entry.n_parameters)} parameters)")
            item.setData(Qt.ItemDataRole.UserRole, entry.name)
            self.drafts_list.addItem(item)
        if not verdict.drafts:
            item = QListWidgetItem("none found among the models listed above")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.drafts_list.addItem(item)
        self.pair_checked.emit(verdict)

    def compatible_draft_names(self) -> list[str]:
        return [self.drafts_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.drafts_list.count())
                if self.drafts_list.item(i).data(Qt.ItemDataRole.UserRole)]

    def _draft_from_list(self, item: QListWidgetItem) -> None:
        name = item.data(Qt.ItemDataRole.UserRole)
        if name:
            self.set_pair(draft=name)

    def load_choice(self) -> None:
        target = self.target.currentData()
        if not target:
            return
        self.settings.set_device(self.device_name(), self.dtype_name())
        self.load_requested.emit(target, self.draft.currentData(), self.device_name(), self.dtype_name())

    # ------------------------------------------------------------------ added paths
    def add_path(self, path: str | None = None, gguf: bool = False) -> None:
        if path is None:
            if gguf:
                path, _ = QFileDialog.getOpenFileName(self, "Add a GGUF model", "", "GGUF models (*.gguf)")
            else:
                path = QFileDialog.getExistingDirectory(self, "Add a model folder")
            if not path:
                return
        self.settings.set_added_models(self.settings.added_models() + [str(path)])
        self._want_target = self.target.currentData() or self._want_target
        self.refresh()

    def add_server(self, url: str | None = None, api_key: str | None = None) -> bool:
        """Load a model served elsewhere as the target (engine.remote.engine): ask the address and an API key (kept in
        the keyring for that server only, engine.models.secrets), check the address rules, then load it."""
        from PySide6.QtWidgets import QInputDialog
        from engine.remote.client import parse_server_url
        if url is None:
            url, ok = QInputDialog.getText(self, "Add server", "Address of an OpenAI-compatible server, e.g. "
                                           "http://127.0.0.1:8080 or https://gpu.example.org:8000")
            if not ok or not url.strip():
                return False
            api_key, ok = QInputDialog.getText(self, "Add server", "API key (empty if the server needs none):",
                                               QLineEdit.EchoMode.Password)
            if not ok:
                return False
        try:
            address = parse_server_url(url)
            if api_key and api_key.strip():
                secrets.set_server_key(address.origin, api_key)
        except (SpecScopeError, ValueError) as exc:
            self.status.setText(f"⚠ {exc}")
            return False
        self.status.setText(f"Connecting to {address.url}…")
        self.load_requested.emit(address.url, None, self.device_name(), self.dtype_name())
        return True

    def remove_selected(self) -> None:
        entry = self.selected_entry()
        if entry is None:
            return
        self.settings.set_added_models([p for p in self.settings.added_models() if p != entry.name])
        self.refresh()

    def _update_buttons(self) -> None:
        entry = self.selected_entry()
        self.use_target_button.setEnabled(entry is not None and entry.usable)
        self.use_draft_button.setEnabled(entry is not None and entry.usable)
        self.train_button.setEnabled(entry is not None and entry.usable)  # every local model runs on transformers
        self.remove_button.setEnabled(entry is not None and entry.name in self.settings.added_models())
        self.load_button.setEnabled(self.target.count() > 0)

    # ------------------------------------------------------------------ downloads
    @property
    def downloading(self) -> bool:
        return self._download_job is not None

    def update_token_note(self) -> None:
        store = secrets.default_store()
        # only whether a token is set, never the token
        has = store.has_token()
        where = "the system keyring" if store.storage is secrets.TokenStorage.KEYRING else "this session only"
        self.token_note.setText(f"Uses your Hugging Face token ({where}) for gated and private models." if has else
                                "No Hugging Face token set: public models only (add one in Settings).")

    def start_download(self, allow_pickle: bool = False) -> bool:
        repo_id = self.repo.text().strip()
        if self.downloading or not repo_id:
            return False
        from engine.models import hub
        allow_pickle = bool(allow_pickle) or self.settings.consent("pickle", repo_id) is True
        cancel = threading.Event()
        self._download_cancel, self._download_repo, self._download_pickle = cancel, repo_id, allow_pickle
        progressed = self.download_progressed.emit

        def run():
            return hub.download(repo_id, token=secrets.get_token(), progress=progressed, cancel=cancel,
                                allow_pickle=allow_pickle)

        self.download_progress.setRange(0, 0)
        self.download_status.setStyleSheet("")
        self.download_status.setText(f"Asking the hub about {repo_id}…")
        self._download_job = self.download_jobs.submit(run)
        self._update_download_buttons()
        return True

    def cancel_download(self) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()
            self.download_status.setText("Cancelling…")

    def _show_progress(self, progress) -> None:
        if not self.downloading:
            return
        total = max(progress.bytes_total, 1)
        self.download_progress.setRange(0, 1000)
        self.download_progress.setValue(int(1000 * min(progress.bytes_done, total) / total))
        current = f" · {progress.current_file}" if progress.current_file else ""
        self.download_status.setText(f"{catalog.format_bytes(progress.bytes_done)} of "
                                     f"{catalog.format_bytes(progress.bytes_total)} · file "
                                     f"{progress.files_done}/{progress.files_total}{current}")

    def _download_done(self, job_id: int, result) -> None:
        if job_id != self._download_job:
            return
        self._end_download()
        self.download_progress.setRange(0, 1000)
        self.download_progress.setValue(1000)
        note = (" It comes with its own Python code: you will be asked before it runs."
                if result.needs_remote_code else "")
        self.download_status.setText(f"✓ {result.repo_id} is downloaded ({len(result.files)} files).{note}")
        self._want_target = self.target.currentData() or self._want_target
        self.refresh()
        self.download_finished.emit(result)

    def _download_error(self, job_id: int, exc) -> None:
        if job_id != self._download_job:
            return
        repo_id = self._download_repo
        self._end_download()
        self.download_progress.setRange(0, 1000)
        if isinstance(exc, UnsafeCheckpointError) and not self._download_pickle and not self._closed:
            if self.ask_yes_no(self, "Pickle checkpoints", f"{exc}.\n\nDownload them anyway?"):
                self.settings.set_consent("pickle", repo_id, True)
                self.start_download(allow_pickle=True)
                return
        message = str(exc) if isinstance(exc, SpecScopeError) else f"{type(exc).__name__}: {exc}"
        self.refresh()  # a cancelled download shows as unfinished (not usable) in the list
        if isinstance(exc, DownloadCancelledError):
            self.download_status.setStyleSheet("")
            self.download_status.setText(f"Cancelled: {message}.")
            self.download_cancelled.emit(message)
            return
        self.download_status.setStyleSheet(f"color: {self.palette_.error};")
        self.download_status.setText(f"⚠ {message[:1].upper()}{message[1:]}.")
        self.download_failed.emit(message)

    def _end_download(self) -> None:
        self._download_job = None
        self._download_cancel = None
        self._update_download_buttons()

    def _update_download_buttons(self) -> None:
        self.download_button.setEnabled(not self.downloading)
        self.cancel_button.setEnabled(self.downloading)
        self.repo.setEnabled(not self.downloading)

    # ------------------------------------------------------------------ theme and shutdown
    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_ = palette
        self._fill_table()
        if self.verdict is not None:
            self._show_verdict(self.verdict)

    def shutdown(self) -> None:
        """Cancel a download, stop both threads and wait for them. Safe to call twice."""
        self._closed = True
        if self._download_cancel is not None:
            self._download_cancel.set()
        self.download_jobs.shutdown()
        self.catalog_jobs.shutdown()

    def closeEvent(self, event) -> None:  # noqa: N802
        # closing the window while downloading asks first; the threads live on until the app ends (shutdown)
        if self.downloading and not self.ask_yes_no(self, "Download in progress",
                                                    "Cancel the download? The files that finished are kept and "
                                                    "downloading again continues from there."):
            event.ignore()
            return
        self.cancel_download()
        super().closeEvent(event)
