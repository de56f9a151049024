"""The model manager: every model on this machine with its facts, target and draft picking with an
instant compatibility check in plain words, the drafts found (of the target's tokenizer, then of another), and
downloads from the Hugging Face Hub with progress, cancel and resume.

All the work is `engine.models` (catalog, pairing, memory, hub), run on background threads (gui.jobs) through the
look-ups of gui.sessions.models, which also says what each row and line reads; its parts (device row, models
table, pair box, download box) are the widgets of gui.views.dialogs.model_widgets, each owning its controls.
Results come back by job id; a result for a question no longer asked is dropped.

May touch: gui.sessions.models, engine.models.catalog and engine.models.hub (public functions only),
engine.models.secrets (a server's API key is saved, never shown), engine.remote.client (a server address's rules),
gui.persistence.settings (device, added models, answers).
"""

from __future__ import annotations

import threading
from typing import Callable

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QDialog, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QSplitter, QVBoxLayout, QWidget

from engine.core.errors import DownloadCancelledError, SpecScopeError, UnsafeCheckpointError
from engine.models import catalog, secrets, sources
from gui import theme
from gui.jobs import BackgroundJobs
from gui.persistence.settings import AppSettings
from gui.sessions.models import (PairVerdict, estimates_job, free_memory_words, list_job, pair_job, plural,
                                 progress_words, token_note)
from gui.views.dialogs.model_widgets import (COLUMNS, NO_DRAFT, DeviceRow, DownloadBox, ModelTable, PairBox,
                                             push_button)
from gui.views.main.dialogs import ask_yes_no

__all__ = ["COLUMNS", "ModelManager", "NO_DRAFT"]


class ModelManager(QDialog):
    # what happened (tests wait on these)
    catalog_listed = Signal()
    estimates_updated = Signal()
    pair_checked = Signal(object)  # PairVerdict
    download_progressed = Signal(object)  # engine.models.hub.DownloadProgress (on the GUI thread, via gui.jobs)
    download_finished = Signal(object)  # engine.models.hub.DownloadResult
    download_failed = Signal(str)
    download_cancelled = Signal(str)
    # asks
    load_requested = Signal(str, object, str, str)  # target, draft (None: none), device, dtype
    train_requested = Signal(str, str)  # a model's name and label: train an eagle head for it

    def __init__(self, settings: AppSettings, palette: theme.Palette, *, target: str = "default",
                 draft: str | None = None, ask_yes_no: Callable[..., bool] = ask_yes_no, parent=None) -> None:
        """`ask_yes_no(parent, title, text)`: the yes/no question before pickle checkpoints are downloaded and
        before a download is cancelled by closing (tests answer it without a modal dialog)."""
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.settings = settings
        self.palette_ = palette
        self.entries: list[catalog.CatalogEntry] = []
        self.estimates: dict = {}
        self.verdict: PairVerdict | None = None
        self._ask_yes_no = ask_yes_no
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
        self.download_jobs.progressed.connect(self._show_progress)
        self.device_row = DeviceRow(settings.device(), settings.dtype())
        self.models = ModelTable()
        self.pair_box = PairBox()
        self.downloads = DownloadBox()
        self.status = QLabel("Looking for models…")
        self.load_button = push_button("Load", self.load_choice)
        self._lay_out()
        self._connect_parts()
        # the widgets other windows and tests read by name
        self.table, self.use_target_button = self.models.table, self.models.use_target_button
        self.use_draft_button = self.models.use_draft_button
        self.target, self.draft = self.pair_box.target, self.pair_box.draft
        self.verdict_label, self.drafts_list = self.pair_box.verdict_label, self.pair_box.drafts_list
        self.repo = self.downloads.repo
        self.update_token_note()
        self.update_buttons()
        self.refresh()

    # ------------------------------------------------------------------ construction
    def _lay_out(self) -> None:
        outer = QVBoxLayout(self)
        outer.setSpacing(8)
        outer.addWidget(self.device_row)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("model_manager_splitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.models)
        lower = QWidget()
        lower_layout = QHBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addWidget(self.pair_box, 3)
        lower_layout.addWidget(self.downloads, 2)
        self.splitter.addWidget(lower)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        outer.addWidget(self.splitter, 1)
        buttons = QHBoxLayout()
        self.status.setObjectName("dim")
        buttons.addWidget(self.status, 1)
        self.load_button.setObjectName("send_button")
        self.load_button.setToolTip("Load the target on the chosen device (and use the draft with the draft-model "
                                    "method)")
        buttons.addWidget(self.load_button)
        buttons.addWidget(push_button("Close", self.close))
        outer.addLayout(buttons)

    def _connect_parts(self) -> None:
        self.device_row.changed.connect(self.device_changed)
        self.models.selection_changed.connect(self.update_buttons)
        self.models.use_requested.connect(self.use_selected_as)
        self.models.train_requested.connect(self.train_selected)
        self.models.add_requested.connect(lambda gguf: self.add_path(gguf=gguf))
        self.models.add_server_requested.connect(lambda: self.add_server())
        self.models.remove_requested.connect(self.remove_selected)
        self.models.refresh_requested.connect(self.refresh)
        self.pair_box.pair_changed.connect(self.pair_changed)
        self.pair_box.draft_chosen.connect(lambda name: self.set_pair(draft=name))
        self.downloads.download_requested.connect(lambda: self.start_download())
        self.downloads.cancel_requested.connect(self.cancel_download)

    def sizeHint(self):  # noqa: N802
        return QSize(1120, 720)

    # ------------------------------------------------------------------ listing
    def refresh(self) -> None:
        self.status.setText("Looking for models…")
        self._list_job = self.catalog_jobs.submit(
            lambda extra=self.settings.added_models(), device=self.device_name(), dtype=self.dtype_name(),
            backend=self.backend_name(): list_job(extra, device, dtype, backend))

    def device_name(self) -> str:
        return self.device_row.device.currentData()

    def dtype_name(self) -> str:
        return self.device_row.dtype.currentData()

    def backend_name(self) -> str:
        return self.device_row.backend.currentData()

    def set_backend(self, backend: str) -> None:
        """Follow the settings panel's backend (auto, transformers, llama.cpp)."""
        self.device_row.backend.setCurrentIndex(max(0, self.device_row.backend.findData(backend)))

    def entry(self, name: str | None) -> catalog.CatalogEntry | None:
        return next((e for e in self.entries if e.name == name), None) if name else None

    def _job_finished(self, job_id: int, result) -> None:
        if job_id == self._list_job:
            self.entries, self.estimates, available = result
            self.device_row.set_available(available)
            self._fill_table()
            self._fill_combos()
            usable = sum(1 for e in self.entries if e.usable)
            self.status.setText(f"{plural(len(self.entries), 'model')} found, {usable} ready to load · HF cache: "
                                f"{sources.hub_cache_dir()}")
            self.catalog_listed.emit()
            self.pair_changed()
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
            self.pair_box.say(f"⚠ The pair could not be checked: {exc}")

    def _fill_table(self) -> None:
        free = self.models.fill(self.entries, self.estimates, self.palette_)
        if free is not None:
            self.device_row.free_label.setText(free_memory_words(free, self.backend_name()))
        self.update_buttons()

    def _fill_combos(self) -> None:
        target = self.target.currentData() or self._want_target
        draft = self.draft.currentData() if self.draft.count() else self._want_draft
        self.pair_box.fill(self.entries, target, draft)

    def device_changed(self) -> None:
        self.settings.set_device(self.device_name(), self.dtype_name())
        if self.entries:
            self._estimate_job = self.catalog_jobs.submit(estimates_job(list(self.entries), self.device_name(),
                                                                        self.dtype_name(), self.backend_name()))

    # ------------------------------------------------------------------ selection and pairing
    def select(self, name: str) -> bool:
        return self.models.select(name)

    def selected_entry(self) -> catalog.CatalogEntry | None:
        return self.entry(self.models.selected_name())

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
            self.pair_box.choose(self.target, target)
        if draft != "keep":
            self._want_draft = draft
            self.pair_box.choose(self.draft, draft)
        self.pair_changed()

    def pair_changed(self) -> None:
        target = self.entry(self.target.currentData())
        if target is None:
            self.verdict_label.setText("Pick a target model.")
            self.drafts_list.clear()
            return
        draft = self.entry(self.draft.currentData())
        self.pair_box.say("Checking the pair…")
        self._pair_job = self.catalog_jobs.submit(pair_job(target, draft, list(self.entries)))

    def _show_verdict(self, verdict: PairVerdict) -> None:
        self.verdict = verdict
        self.pair_box.show_verdict(verdict, self.palette_)
        self.pair_checked.emit(verdict)

    def compatible_draft_names(self) -> list[str]:
        return self.pair_box.compatible_draft_names()

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

    def update_buttons(self) -> None:
        entry = self.selected_entry()
        self.models.set_buttons(usable=entry is not None and entry.usable,
                                removable=entry is not None and entry.name in self.settings.added_models())
        self.load_button.setEnabled(self.target.count() > 0)

    # ------------------------------------------------------------------ downloads
    @property
    def downloading(self) -> bool:
        return self._download_job is not None

    def update_token_note(self) -> None:
        self.downloads.token_note.setText(token_note())

    def start_download(self, allow_pickle: bool = False) -> bool:
        repo_id = self.repo.text().strip()
        if self.downloading or not repo_id:
            return False
        from engine.models import hub
        allow_pickle = bool(allow_pickle) or self.settings.consent("pickle", repo_id) is True
        cancel = threading.Event()
        self._download_cancel, self._download_repo, self._download_pickle = cancel, repo_id, allow_pickle

        def run(report):  # report: called from the download's threads, heard on the GUI thread (_show_progress)
            return hub.download(repo_id, token=secrets.get_token(), progress=report, cancel=cancel,
                                allow_pickle=allow_pickle)

        self.downloads.show_fraction(0, 0)
        self.downloads.say(f"Asking the hub about {repo_id}…")
        self._download_job = self.download_jobs.submit(run, reporting=True)
        self._update_download_buttons()
        return True

    def cancel_download(self) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()
            self.downloads.say("Cancelling…")

    def _show_progress(self, job_id: int, progress) -> None:
        if job_id != self._download_job:
            return
        self.downloads.show_fraction(progress.bytes_done, max(progress.bytes_total, 1))
        self.downloads.say(progress_words(progress))
        self.download_progressed.emit(progress)

    def _download_done(self, job_id: int, result) -> None:
        if job_id != self._download_job:
            return
        self._end_download()
        self.downloads.show_fraction(1, 1)
        note = (" It comes with its own Python code: you will be asked before it runs."
                if result.needs_remote_code else "")
        self.downloads.say(f"✓ {result.repo_id} is downloaded ({len(result.files)} files).{note}")
        self._want_target = self.target.currentData() or self._want_target
        self.refresh()
        self.download_finished.emit(result)

    def _download_error(self, job_id: int, exc) -> None:
        if job_id != self._download_job:
            return
        repo_id = self._download_repo
        self._end_download()
        self.downloads.end_busy()
        if isinstance(exc, UnsafeCheckpointError) and not self._download_pickle and not self._closed:
            if self._ask_yes_no(self, "Pickle checkpoints", f"{exc}.\n\nDownload them anyway?"):
                self.settings.set_consent("pickle", repo_id, True)
                self.start_download(allow_pickle=True)
                return
        message = str(exc) if isinstance(exc, SpecScopeError) else f"{type(exc).__name__}: {exc}"
        self.refresh()  # a cancelled download shows as unfinished (not usable) in the list
        if isinstance(exc, DownloadCancelledError):
            self.downloads.say(f"Cancelled: {message}.")
            self.download_cancelled.emit(message)
            return
        self.downloads.say(f"⚠ {message[:1].upper()}{message[1:]}.", self.palette_.error)
        self.download_failed.emit(message)

    def _end_download(self) -> None:
        self._download_job = None
        self._download_cancel = None
        self._update_download_buttons()

    def _update_download_buttons(self) -> None:
        self.downloads.set_downloading(self.downloading)

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
        if self.downloading and not self._ask_yes_no(self, "Download in progress",
                                                    "Cancel the download? The files that finished are kept and "
                                                    "downloading again continues from there."):
            event.ignore()
            return
        self.cancel_download()
        super().closeEvent(event)
