"""The compare window: 2–4 settings side by side on one prompt, and the k sweep.

Runs go through the chat window's worker thread (the one that holds the model), one after another: plain
decoding first, then each setting. Each run gets a pane that draws its tokens with the chat's own
transcript view; the summary table, the diff against plain and the sweep graph render what
`gui.sessions.compare` holds (its `CompareState` is the window's state: the request in flight, the last
comparison and sweep), which takes its figures from `engine.measure.compare`.

The window holds its parts, each a widget that owns its controls: the prompt box and the sampling row
(gui.views.compare.inputs), the "Side by side" page (settings, panes, results: gui.views.compare.side_by_side)
and the "k sweep" page (gui.views.compare.sweep); it wires their signals to the worker and the session.
May touch: gui.sessions.compare, gui.worker (signals and request types), engine configs, the compare parts.
Never the engine's objects.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QFileDialog, QLabel, QMainWindow, QProgressBar, QTabWidget, QVBoxLayout, QWidget

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised
from engine.measure.compare import ComparisonPlan, ComparisonRow, SweepSummary
from engine.measure.fastest import sweep_methods
from engine.measure.prompts import Prompt
from gui import theme
from gui.persistence.settings import export_folder
from gui.resources import asset_path
from gui.sessions.compare import (COMPARE, CannotStart, ComparisonSession, CompareState, export_name, write_rows_csv,
                                  write_rows_json, write_sweep_csv, write_sweep_json)
from gui.views.compare.inputs import PromptBox, SamplingRow
from gui.views.compare.parts import RunPane, SettingRow
from gui.views.compare.results import EXPORT_FILTERS
from gui.views.compare.settings_area import MAX_SETTINGS
from gui.views.compare.side_by_side import SideBySidePage
from gui.views.compare.sweep import SweepPage
from gui.views.main.screen_fit import ContentScroll
from gui.worker import ComparisonRequest

REFRESH_MS = 100
__all__ = ["MAX_SETTINGS", "CompareWindow"]


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

        self.prompt_box = PromptBox()
        self.sampling_row = SamplingRow()  # the one place the shared sampling is read
        self.side_by_side = SideBySidePage(self.palette_)
        self.sweep = SweepPage(self.palette_)
        self.tabs = QTabWidget()
        self.status_label = QLabel("Choose settings and a prompt, then Run.")
        self.progress = QProgressBar()
        self._lay_out()
        self._connect_parts()
        # the widgets the scripted mode (gui.app) and tests read by name
        self.prompt, self.source_label = self.prompt_box.prompt, self.prompt_box.source_label
        self.temperature, self.seed = self.sampling_row.temperature, self.sampling_row.seed
        self.max_new_tokens, self.note = self.sampling_row.max_new_tokens, self.sampling_row.note
        self.legend, self.table = self.side_by_side.legend, self.side_by_side.results.table
        self.diff_view = self.side_by_side.results.diff_view
        self.strict_button = self.side_by_side.settings.strict_button

        worker = worker_thread.worker
        self.comparison_requested.connect(worker.compare)
        worker.comparison_advanced.connect(self._on_advanced)
        worker.comparison_finished.connect(self._on_finished)
        worker.comparison_failed.connect(self._on_failed)
        worker.load_failed.connect(self._on_load_failed)
        self.refresh_timer = QTimer(self)
        self.refresh_timer.setInterval(REFRESH_MS)
        self.refresh_timer.timeout.connect(self.side_by_side.refresh_running)
        for spec in (SpecConfig(method=m.name, k=4) for m in sweep_methods()[:2]):  # the first two the sweep tries
            self.add_setting(spec)
        try:
            self.load_prompt_file(asset_path("presets.json"))
        except ConfigError as exc:
            self._set_status(f"No presets: {exc}")
        self.update_actions()

    def _lay_out(self) -> None:
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(10, 8, 10, 8)
        column.setSpacing(6)
        column.addWidget(self.prompt_box)
        column.addWidget(self.sampling_row)
        self.tabs.addTab(self.side_by_side, "Side by side")
        self.tabs.addTab(self.sweep, "k sweep")
        column.addWidget(self.tabs, 1)
        self.setCentralWidget(ContentScroll(central))  # four settings with many parameters: scrolled, never cut off
        self.progress.setMaximumWidth(180)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.progress)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self.stop)
        file_menu = self.menuBar().addMenu("&File")
        for text, kind in (("Export summary as &CSV…", "csv"), ("Export summary as &JSON…", "json"),
                           ("Save comparison as &PNG…", "png"), ("Export sweep as CSV…", "sweep-csv"),
                           ("Export sweep as JSON…", "sweep-json"), ("Save sweep graph as PNG…", "sweep-png")):
            file_menu.addAction(QAction(text, self, triggered=lambda _=False, k=kind: self.export(k)))
        file_menu.addSeparator()
        file_menu.addAction(QAction("&Close", self, shortcut=QKeySequence.StandardKey.Close, triggered=self.close))

    def _connect_parts(self) -> None:
        self.prompt_box.text_changed.connect(self.update_actions)
        self.prompt_box.status_reported.connect(self._set_status)
        settings, results = self.side_by_side.settings, self.side_by_side.results
        settings.changed.connect(self.update_actions)
        settings.run_requested.connect(self.run_comparison)
        settings.strict_run_requested.connect(self.run_strict_comparison)
        settings.stop_requested.connect(self.stop)
        results.selection_changed.connect(self.show_selected_diff)
        results.export_requested.connect(self.export)
        self.sweep.run_requested.connect(self.run_sweep)
        self.sweep.stop_requested.connect(self.stop)
        self.sweep.apply_requested.connect(self.apply_best_to_chat)
        self.sweep.export_requested.connect(self.export)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1440, 900)

    # ------------------------------------------------------------------ settings and prompts
    @property
    def setting_rows(self) -> list[SettingRow]:
        return self.side_by_side.settings.setting_rows

    @property
    def panes(self) -> list[RunPane]:
        return self.side_by_side.panes

    def add_setting(self, spec: SpecConfig | None = None) -> SettingRow | None:
        return self.side_by_side.settings.add_setting(spec)

    def set_specs(self, specs: list[SpecConfig]) -> None:
        """Replace the settings (the scripted mode and tests); 1…4 speculative specs."""
        self.side_by_side.settings.set_specs(specs)

    def specs(self) -> list[SpecConfig]:
        return self.side_by_side.settings.specs()

    def sampling(self) -> SamplingConfig:
        return self.sampling_row.sampling()

    def load_prompt_file(self, path) -> int:
        """Presets or a Spec-Bench JSON lines file into the preset list; returns how many prompts."""
        return self.prompt_box.load_prompt_file(path)

    def set_category(self, category: str | None) -> None:
        self.prompt_box.set_category(category)

    def visible_choices(self) -> list[Prompt]:
        return self.prompt_box.visible_choices()

    def choose_preset(self, index: int) -> None:
        """Put the index-th visible preset in the prompt box."""
        self.prompt_box.choose_preset(index)

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
        self.side_by_side.build_panes(session, self.palette_)
        self.side_by_side.results.clear()
        return True

    def run_strict_comparison(self) -> bool:
        """"Prove it in float32": the same comparison where equality must be exact."""
        started = self.run_comparison(strict=True)
        if started:
            self._set_status("Strict check: plain decoding in float32 on the CPU (transformers)…")
        return started

    def run_sweep(self) -> bool:
        """Plain decoding once, then the sweep's method for k = 1…K."""
        session = self._start(lambda **kw: self.state.start_sweep(self.sweep.setting.spec(),
                                                                   self.sweep.max_k.value(), **kw))
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
            session, request = start(prompt=self.prompt_box.text(), sampling=self.sampling(),
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
        self.update_actions()
        self.running_changed.emit(True)
        self.refresh_timer.start()
        self.comparison_requested.emit(request)
        return session

    # ------------------------------------------------------------------ worker signals
    def _on_advanced(self, request_id: int, index: int, event) -> None:
        tokens = self.state.advanced(request_id, index, event)
        if tokens is None:
            return
        session = self.state.active
        if isinstance(event, ComparisonPlan):  # a plain baseline on each backend used: the panes follow the plan
            self.progress.setRange(0, len(session.runs))
            if session.kind == COMPARE:
                self.side_by_side.build_panes(session, self.palette_)
            return
        run = session.runs[index]
        pane = self.side_by_side.pane(index) if session.kind == COMPARE else None
        if isinstance(event, GenerationStarted):
            self._set_status(f"Run {index + 1} of {len(session.runs)}: {run.label}…")
            if pane is not None:
                pane.transcript.begin_assistant(run.turn)
                pane.set_state("running…")
        elif isinstance(event, RoundsRevised):  # the run's reply, told again as the server's steps
            if pane is not None:
                pane.rerender()
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
            self.side_by_side.update_panes(session)
        else:
            self.show_sweep_summary(self.state.sweep_summary)

    def _on_finished(self, request_id: int) -> None:
        session = self.state.finished(request_id)
        if session is None:
            return
        self._end_active()
        self._show_session(session)
        if session.kind == COMPARE:
            self.side_by_side.results.select_first_difference(self.session)
            self.show_selected_diff()
        self._set_status(self.state.status(session))
        (self.comparison_finished if session.kind == COMPARE else self.sweep_finished).emit(session)

    def _on_failed(self, request_id: int, message: str) -> None:
        session = self.state.failed(request_id, message)
        if session is None:
            return
        self._end_active()
        if session.kind == COMPARE:
            self._show_rows(session)
            self.side_by_side.update_panes(session)
        self._set_status(f"Refused: {message}")
        self.comparison_failed.emit(message)

    def _on_load_failed(self, name: str, message: str) -> None:
        if self.state.running:
            self._on_failed(self.state.active_id, f"could not load {name}: {message}")

    def _end_active(self) -> None:
        self.refresh_timer.stop()
        self.side_by_side.refresh_running()
        self.progress.hide()
        self.update_actions()
        self.running_changed.emit(False)

    # ------------------------------------------------------------------ table and diff
    def _show_rows(self, session: ComparisonSession) -> None:
        self.side_by_side.results.show_rows(session, self.palette_)

    def selected_row(self) -> ComparisonRow | None:
        return self.side_by_side.results.selected_row(self.session)

    def show_selected_diff(self) -> None:
        if self.session is not None and not self.running:
            self.side_by_side.results.show_diff(self.session, self.palette_)

    def diff_text(self) -> str:
        return self.side_by_side.results.diff_text()

    # ------------------------------------------------------------------ sweep
    def show_sweep_summary(self, summary: SweepSummary | None) -> None:
        """Draw a sweep (from a run, or canned points in tests)."""
        self.state.sweep_summary = summary
        self.sweep.show_summary(summary)
        self.update_actions()

    def best_spec(self) -> SpecConfig | None:
        return self.state.best_spec(fallback=self.sweep.setting.spec())

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
        return self.sweep.save_png(path)

    def export(self, kind: str) -> None:
        if kind.startswith("sweep") and self.sweep_summary is None:
            self._set_status("Run a sweep first.")
            return
        if kind in ("csv", "json") and (self.session is None or not self.session.rows()):
            self._set_status("Run a comparison first.")
            return
        suffix = kind.rsplit("-", 1)[-1]
        session = self.sweep_session if kind.startswith("sweep") else self.session
        suggested = export_folder() / export_name(kind, session, suffix)  # one folder for every export
        path, _ = QFileDialog.getSaveFileName(self, "Export", str(suggested), EXPORT_FILTERS[kind])
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
    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_ = palette
        self.side_by_side.set_palette(palette)
        self.sweep.set_palette(palette)
        if self.session is not None and not self.running:
            self._show_rows(self.session)
            self.show_selected_diff()

    def update_actions(self) -> None:
        idle = not self.state.running
        has_prompt = bool(self.prompt_box.text().strip())
        self.side_by_side.settings.set_actions(idle, has_prompt)
        self.sweep.set_actions(idle, has_prompt, self._apply_to_chat is not None and self.best_spec() is not None)

    def _set_status(self, text: str) -> None:
        self.status_label.setText(text)

    # ------------------------------------------------------------------ closing
    def closeEvent(self, event) -> None:  # noqa: N802
        """Closing stops a comparison at the next round; the worker (the chat's) carries on."""
        self.stop()
        super().closeEvent(event)

