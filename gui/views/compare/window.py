"""The compare window: 2–4 settings side by side on one prompt, and the k sweep.

Runs go through the chat window's worker thread (the one that holds the model), one after another: plain
decoding first, then each setting. Each run gets a pane that draws its tokens with the chat's own
transcript view; the summary table, the diff against plain and the sweep graph render what
`gui.sessions.compare` holds (its `CompareState` is the window's state: the request in flight, the last
comparison and sweep), which takes its figures from `engine.measure.compare`.

Its widgets are built by gui.views.compare.build; the table, diff and sweep results are drawn by
gui.views.compare.results. May touch: gui.sessions.compare, gui.worker (signals and request types), engine
configs, the views' public pieces (transcript, stats). Never the engine's objects.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QMainWindow

from engine.measure.compare import ComparisonPlan, ComparisonRow, SweepSummary
from engine.core.config import MAX_K, SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.measure.fastest import sweep_methods
from engine.core.events import GenerationFinished, GenerationStarted
from engine.measure.prompts import Prompt
from gui import theme
from gui.sessions.compare import (COMPARE, CannotStart, ComparisonSession, CompareState, categories, load_prompt_choices,
                                 export_name, write_rows_csv, write_rows_json, write_sweep_csv, write_sweep_json)
from gui.persistence.settings import export_folder
from gui.resources import asset_path
from gui.views.compare.build import MAX_SETTINGS, build
from gui.views.compare.parts import RunPane, SettingRow
from gui.views.compare.results import (EXPORT_FILTERS, render_diff, run_state_text, show_rows, show_sweep_table,
                                       sweep_verdict)
from gui.worker import ComparisonRequest

REFRESH_MS = 100
__all__ = ["MAX_SETTINGS", "CompareWindow"]


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

        build(self)
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
        self.update_actions()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1440, 900)

    # ------------------------------------------------------------------ settings and prompts
    def add_setting(self, spec: SpecConfig | None = None) -> SettingRow | None:
        if len(self.setting_rows) >= MAX_SETTINGS:
            return None
        if spec is None:  # a sensible next one: the last setting with a larger k
            last = self.setting_rows[-1].spec() if self.setting_rows else SpecConfig(method=sweep_methods()[0].name, k=2)
            spec = last.with_k(min(MAX_K, last.k * 2))
        row = SettingRow(spec)
        row.remove_requested.connect(self.remove_setting)
        row.changed.connect(self.update_actions)
        self.setting_rows.append(row)
        self.settings_box.addWidget(row)
        self.update_actions()
        return row

    def remove_setting(self, row: SettingRow) -> None:
        if len(self.setting_rows) <= 1 or row not in self.setting_rows:
            return
        self.setting_rows.remove(row)
        row.setParent(None)
        row.deleteLater()
        self.update_actions()

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
        self.fill_presets()
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
        self.preset_chosen(index + 1)

    def fill_presets(self, *_args) -> None:
        self.preset.clear()
        self.preset.addItem("— choose a preset —", None)
        for choice in self.visible_choices():
            self.preset.addItem(f"{choice.category} · {choice.title}", choice.id)
            self.preset.setItemData(self.preset.count() - 1, choice.text[:600], Qt.ItemDataRole.ToolTipRole)

    def preset_chosen(self, index: int) -> None:
        wanted = self.preset.itemData(index)
        choice = next((c for c in self.visible_choices() if c.id == wanted), None)
        if choice is not None:
            self.prompt.setPlainText(choice.text)

    def browse_prompts(self) -> None:
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
        self.update_actions()
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
        if isinstance(event, ComparisonPlan):  # a plain baseline on each backend used: the panes follow the plan
            self.progress.setRange(0, len(session.runs))
            if session.kind == COMPARE:
                self._build_panes(session)
            return
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
        self.update_actions()
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
            pane.set_state(run_state_text(pane.run, row))

    # ------------------------------------------------------------------ table and diff
    def _show_rows(self, session: ComparisonSession) -> None:
        show_rows(self.table, session.rows(), self.palette_)

    def _select_first_difference(self) -> None:
        rows = self.session.rows() if self.session else []
        differing = next((i for i, row in enumerate(rows) if row.identical_to_plain is False), None)
        if differing is not None:
            self.table.selectRow(differing)
        self.show_selected_diff()

    def selected_row(self) -> ComparisonRow | None:
        rows = self.session.rows() if self.session else []
        selected = self.table.selectionModel().selectedRows()
        index = selected[0].row() if selected else None
        return rows[index] if index is not None and index < len(rows) else None

    def show_selected_diff(self) -> None:
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
        plain = next((r for r in rows if r.is_baseline and row is not None and r.baseline == row.baseline), rows[0])
        self.render_diff(plain, row, rows)

    def render_diff(self, plain: ComparisonRow, row: ComparisonRow | None, rows: list[ComparisonRow]) -> None:
        render_diff(self.diff_view, self.palette_, self.session, plain, row, rows)

    def diff_text(self) -> str:
        return self.diff_view.toPlainText()

    # ------------------------------------------------------------------ sweep
    def show_sweep_summary(self, summary: SweepSummary | None) -> None:
        """Draw a sweep (from a run, or canned points in tests)."""
        self.state.sweep_summary = summary
        self.sweep_plot.show_summary(summary)
        show_sweep_table(self.sweep_table, summary)
        verdict = sweep_verdict(summary)
        if verdict is not None:
            self.best_label.setText(verdict[0])
            self.apply_button.setText(verdict[1])
        self.update_actions()

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
            self.show_selected_diff()

    def update_actions(self) -> None:
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

