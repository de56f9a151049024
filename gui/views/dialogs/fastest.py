""""Which setting is fastest here?": a short sweep over methods and k on the chat's last prompt, with repeats.

Each repeat is one comparison on the chat's worker (plain decoding first, then every setting); the answer is
engine.measure.fastest's: the median speed-up of each setting against its repeat's plain run, the noise as a range,
and the winner, which the user can apply to the chat. A method the loaded model refuses (early exit on a
llama.cpp model) is dropped with its reason and the sweep goes on without it.

May touch: gui.sessions.fastest (the sweep's state: requests, ids, the fold), engine.measure.fastest (its result,
read), gui.worker (signals and request types). It renders and emits; the state decides.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
                               QProgressBar, QPushButton, QSpinBox, QTableWidget, QTableWidgetItem, QVBoxLayout)

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.measure.baselines import plain_decoding_words
from engine.measure.fastest import DEFAULT_KS, DEFAULT_MAX_NEW_TOKENS, MIN_REPEATS, FastestResult
from gui import theme
from gui.sessions.fastest import FastestState, Plan
from gui.worker import ComparisonRequest

COLUMNS = ("setting", "speed-up (median)", "noise (lowest – highest)", "tok/s (median)", "acceptance")
COLUMN_TIPS = ("the method and k", "median over the repeats of tok/s ÷ tok/s of that repeat's plain run",
               "the slowest and the fastest repeat: a range that reaches below 1× may be noise",
               "committed tokens per second after the first, median over the repeats",
               "accepted drafted tokens ÷ drafted tokens, median over the repeats")


class FastestDialog(QDialog):
    # what happened (tests wait on these)
    sweep_finished = Signal(object)  # FastestResult | None (stopped before a repeat finished)
    sweep_failed = Signal(str)
    running_changed = Signal(bool)
    # asks, queued to the worker thread
    comparison_requested = Signal(object)  # ComparisonRequest

    def __init__(self, worker_thread, palette: theme.Palette, *, prompt: Callable[[], str | None],
                 model_name: Callable[[], str], sampling: Callable[[], SamplingConfig],
                 draft: Callable[[], str | None], busy: Callable[[], str | None],
                 apply_to_chat: Callable[[SpecConfig], None], parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Which setting is fastest here?")
        self.palette_ = palette
        self.worker_thread = worker_thread
        self._prompt, self._model_name, self._sampling = prompt, model_name, sampling
        self._draft, self._busy, self._apply_to_chat = draft, busy, apply_to_chat
        self.state = FastestState(make_request=ComparisonRequest)
        self._build()
        worker = worker_thread.worker
        self.comparison_requested.connect(worker.compare)
        worker.comparison_advanced.connect(self._on_advanced)
        worker.comparison_finished.connect(self._on_finished)
        worker.comparison_failed.connect(self._on_failed)
        self._update_actions()

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        layout = QVBoxLayout(self)
        self.intro = QLabel("")
        self.intro.setObjectName("dim")
        self.intro.setWordWrap(True)
        layout.addWidget(self.intro)
        row = QHBoxLayout()
        row.addWidget(QLabel("k values"))
        self.ks = QLineEdit(", ".join(str(k) for k in DEFAULT_KS))
        self.ks.setToolTip("The draft lengths to try for every method, separated by commas")
        row.addWidget(self.ks)
        row.addWidget(QLabel("trees"))
        self.trees = QLineEdit("")
        self.trees.setPlaceholderText("none")
        self.trees.setToolTip("Token-tree budgets (nodes) that the methods which branch also try at every k, beside "
                              "their chain, separated by commas; empty: chains only")
        row.addWidget(self.trees)
        row.addWidget(QLabel("repeats"))
        self.repeats = QSpinBox()
        self.repeats.setRange(MIN_REPEATS, 10)
        self.repeats.setToolTip(f"Runs per setting ({MIN_REPEATS} to 10): the figure is their median")
        row.addWidget(self.repeats)
        row.addWidget(QLabel("tokens"))
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(16, 1024)
        self.max_new_tokens.setValue(DEFAULT_MAX_NEW_TOKENS)
        self.max_new_tokens.setToolTip("New tokens per run: short keeps the sweep short (16 to 1024)")
        row.addWidget(self.max_new_tokens)
        row.addStretch(1)
        self.start_button = QPushButton("Run")
        self.start_button.setObjectName("send_button")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        row.addWidget(self.start_button)
        row.addWidget(self.stop_button)
        layout.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setFormat("%v of %m runs")
        layout.addWidget(self.progress)
        layout.addWidget(self._build_table(), 1)
        self.verdict = QLabel("")
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.verdict)
        buttons = QHBoxLayout()
        self.status = QLabel("")
        self.status.setObjectName("dim")
        self.status.setWordWrap(True)
        buttons.addWidget(self.status, 1)
        self.apply_button = QPushButton("Apply the winner to the chat")
        self.apply_button.clicked.connect(self.apply_winner)
        buttons.addWidget(self.apply_button)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons.addWidget(close)
        layout.addLayout(buttons)

    def _build_table(self) -> QTableWidget:
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("fastest_table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        for column, tip in enumerate(COLUMN_TIPS):
            self.table.horizontalHeaderItem(column).setToolTip(tip)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        return self.table

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(820, 520)

    def showEvent(self, event) -> None:  # noqa: N802
        self.refresh_intro()
        super().showEvent(event)

    def refresh_intro(self) -> None:
        prompt = (self._prompt() or "").strip()
        shown = prompt if len(prompt) <= 90 else prompt[:89] + "…"
        self.intro.setText(f"On the chat's last prompt, “{shown}”: plain decoding, then every method at each k, "
                           "repeated; each setting's speed-up is the median against plain decoding on its own backend in the "
                           "same repeat (where settings run on several backends, the winner is the fastest against "
                           "the fastest plain run)."
                           if prompt else "Send a message in the chat first: the sweep runs on its last prompt.")

    # ------------------------------------------------------------------ running (gui.sessions.fastest decides)
    @property
    def running(self) -> bool:
        return self.state.running

    @property
    def result(self) -> FastestResult | None:
        return self.state.result

    def start(self) -> bool:
        """Start the sweep; False (with the reason shown) when it cannot start now."""
        self.refresh_intro()
        try:
            plan = Plan(model=self._model_name(), prompt=(self._prompt() or "").strip(), sampling=self._sampling(),
                        max_new_tokens=self.max_new_tokens.value())
            request = self.state.start(plan, self.ks.text(), self.repeats.value(), self._draft(), self._busy(),
                                       self.trees.text())
        except ConfigError as exc:
            self._set_status(f"Refused: {exc}")
            self.sweep_failed.emit(str(exc))
            return False
        self.progress.setRange(0, self.state.sweep.total_runs)
        self.progress.setValue(0)
        self._show_result()
        self._send(request)
        self.running_changed.emit(True)
        return True

    def _send(self, request) -> None:
        self.progress.setRange(0, self.state.sweep.total_runs)
        self._set_status(f"Repeat {self.state.repeat + 1} of {self.state.sweep.repeats}…")
        self._update_actions()
        self.comparison_requested.emit(request)

    def stop(self) -> None:
        if self.running:
            self.worker_thread.stop_generation()
            self._set_status("Stopping at the next round…")

    def _on_advanced(self, request_id: int, index: int, event) -> None:
        if self.state.advanced(request_id, index, event):
            self.progress.setRange(0, self.state.sweep.total_runs)
            self.progress.setValue(self.state.sweep.runs_done)

    def _on_finished(self, request_id: int) -> None:
        if not self.state.ours(request_id):
            return
        request = self.state.finished(request_id)
        self._show_result()
        if request is not None:
            self._send(request)
            return
        self._set_status(self.state.status())
        self._update_actions()
        self.running_changed.emit(False)
        self.sweep_finished.emit(self.state.result)

    def _on_failed(self, request_id: int, message: str) -> None:
        if not self.state.ours(request_id):
            return
        request = self.state.failed(request_id, message)
        if request is not None:  # a method the model refused is left out; the sweep goes on
            self._send(request)
            return
        self._set_status(f"Refused: {message}")
        self._update_actions()
        self.running_changed.emit(False)
        self.sweep_failed.emit(message)

    # ------------------------------------------------------------------ rendering
    def _show_result(self) -> None:
        sweep = self.state.sweep
        result = sweep.result() if sweep is not None else None
        self.verdict.setText(self.state.verdict())
        self.table.setRowCount(0 if result is None else len(result.results))
        if result is None:
            return
        bold = QFont(self.font())
        bold.setBold(True)
        for row, setting in enumerate(result.results):
            rate = setting.acceptance_rate
            label = setting.spec.label() if setting.spec.speculative else "plain decoding (none)"
            if result.several_backends and not setting.spec.speculative:
                label = f"{plain_decoding_words(setting.baseline)} (none)"
            against = f" vs {setting.baseline}" if result.several_backends else ""
            values = (label, f"{setting.median:.2f}×{against}",
                      f"{setting.low:.2f} – {setting.high:.2f}×" if setting.spec.speculative else "the reference",
                      f"{setting.median_tok_per_s:.1f}", "—" if rate is None else f"{rate:.0%}")
            for column, value in enumerate(values):
                item = QTableWidgetItem(("★ " if setting is result.winner and column == 0 else "") + value)
                item.setTextAlignment(Qt.AlignmentFlag.AlignVCenter
                                      | (Qt.AlignmentFlag.AlignLeft if column == 0 else Qt.AlignmentFlag.AlignRight))
                if setting is result.winner:
                    item.setFont(bold)
                    item.setBackground(QColor(self.palette_.surface_alt))
                self.table.setItem(row, column, item)

    def apply_winner(self) -> None:
        winner = self.state.winner()
        if winner is not None:
            self._apply_to_chat(winner)
            self._set_status(f"Applied to the chat: {winner.label()}")

    def _update_actions(self) -> None:
        self.start_button.setEnabled(not self.running)
        self.stop_button.setEnabled(self.running)
        self.apply_button.setEnabled(not self.running and self.result is not None)

    def _set_status(self, text: str) -> None:
        self.status.setText(text)

    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_ = palette
        self._show_result()

    def closeEvent(self, event) -> None:  # noqa: N802
        """Closing stops the sweep at the next round; the worker (the chat's) carries on."""
        self.stop()
        super().closeEvent(event)
