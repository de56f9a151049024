""""Train a drafter…": train an EAGLE head for a model on this machine (engine.training.train.train), with a
progress bar, the phase line, the loss and a live plot of held-out acceptance by draft position; Start, Cancel
and Resume (the same call on the same folder continues from its checkpoint); when it ends, where the head
was written, its held-out acceptance and "Use eagle now".

The run is one call of `train(options, report, cancel)` on a thread of its own (gui.jobs.BackgroundJobs);
`report` folds into gui.sessions.training.TrainRun under a lock and the dialog redraws from a 20 Hz timer, never
per report. Cancel, closing the dialog and closing the app set the cancel Event: the trainer keeps its
checkpoint; the app's shutdown waits for the thread. `TrainingFront` is the main window's side: it opens the
dialog and offers training the first time a model without a head gets method eagle (never in a scripted
run, never again for a model once declined).

May touch: engine.training.train (TrainOptions, train), engine.drafters.eagle (TRAIN_MINUTES), engine.host,
gui.sessions.training, gui.jobs, gui.persistence.settings, gui.theme, the main window's public methods and its settings
panel (gui.views.chat.controls). The engine's objects only as the trainer returns them (the head card).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QCheckBox, QDialog, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel,
                               QMessageBox, QProgressBar, QPushButton, QVBoxLayout)

from engine.backends import is_local_backend
from engine.core.errors import ConfigError
from engine.core.methods import head_method
from engine.core.validation import MAX_TRAIN_MINUTES, MIN_TRAIN_MINUTES
from gui import theme
from gui.jobs import BackgroundJobs
from gui.persistence.settings import AppSettings
from gui.sessions.training import (POSITIONS, TrainRun, checkpoint_points, checkpoint_step,
                               figures_line, head_for, offer_text, progress_line, result_words, run_options)
from gui.views.live.plots import _nice_ceiling
from gui.views.main.screen_fit import show_window
from gui.worker import error_message

REFRESH_MS = 50  # at most 20 redraws a second
LINE_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine)
SYMBOLS = ("o", "t", "s")  # colour is never the only cue: each position has its own dash and marker


def real_train(options, report, cancel):
    """engine.training.train.train, imported when a run starts (it brings torch)."""
    from engine.training.train import train
    return train(options, report, cancel)


def default_options(settings: AppSettings):
    """The trainer's defaults, on the device and dtype chosen in the Models window."""
    from engine.training.train import TrainOptions
    dtype = settings.dtype()
    return TrainOptions(device=settings.device(), dtype=None if dtype == "auto" else dtype)


def default_minutes() -> float:
    from engine.drafters.eagle import TRAIN_MINUTES
    return float(TRAIN_MINUTES)


class TrainDialog(QDialog):
    # what happened (tests wait on these)
    training_finished = Signal(str)  # done | cancelled | failed
    # asks
    use_eagle_requested = Signal(str)  # the model's name: select method eagle in the chat's settings

    def __init__(self, model: str, label: str, settings: AppSettings, palette: theme.Palette, *,
                 train: Callable | None = None, base_options=None, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a drafter")
        self.settings, self.palette_ = settings, palette
        self.model, self.label = model, label
        self._train = train if train is not None else real_train
        self._base = base_options if base_options is not None else default_options(settings)
        self.run = TrainRun()
        self.cancel_event: threading.Event | None = None
        self._job: int | None = None
        self._drawn = -1
        self.out: Path | None = None  # the head folder of the last run that told it
        self.jobs = BackgroundJobs("train", self)
        self.jobs.finished.connect(self._job_finished)
        self.jobs.failed.connect(self._job_failed)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self._build()
        self.set_palette(palette)
        self.set_model(model, label)

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        layout = QVBoxLayout(self)
        self.title = QLabel()
        self.title.setObjectName("pane_title")
        layout.addWidget(self.title)
        self.about = self._label("dim")
        layout.addWidget(self.about)
        form = QFormLayout()
        self.minutes = QDoubleSpinBox()
        self.minutes.setObjectName("train_minutes")
        self.minutes.setRange(MIN_TRAIN_MINUTES, MAX_TRAIN_MINUTES)
        self.minutes.setDecimals(1)
        self.minutes.setSingleStep(1.0)
        self.minutes.setSuffix(" min")
        self.minutes.setMaximumWidth(140)
        self.minutes.setValue(default_minutes())
        self.minutes.setToolTip("The whole run, data generation included: training goes on until it is spent")
        form.addRow("Time budget", self.minutes)
        self.from_history = QCheckBox("Also train on my chats")
        self.from_history.setToolTip("Add the messages you wrote in your saved chats to the training prompts")
        form.addRow("", self.from_history)
        layout.addLayout(form)
        self.resume_note = self._label("dim")
        layout.addWidget(self.resume_note)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setFormat("%p%")
        layout.addWidget(self.bar)
        self.phase = self._label("")
        layout.addWidget(self.phase)
        self.figures = self._label("")
        layout.addWidget(self.figures)
        layout.addWidget(self._build_plot(), 1)
        self.legend = self._label("dim")  # under the plot, where it never hides a line
        self.legend.setWordWrap(False)
        layout.addWidget(self.legend)
        self.problem = self._label("problem")
        layout.addWidget(self.problem)
        self.result = self._label("")
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.result)
        layout.addLayout(self._build_buttons())

    @staticmethod
    def _label(name: str) -> QLabel:
        label = QLabel()
        label.setWordWrap(True)
        if name:
            label.setObjectName(name)
        return label

    def _build_plot(self) -> pg.PlotWidget:
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("train_plot")
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.showGrid(x=False, y=True, alpha=0.25)
        self.plot.setMinimumHeight(220)
        self.plot.disableAutoRange()
        item = self.plot.getPlotItem()
        item.getAxis("left").setLabel("%")
        item.getAxis("left").setTicks([[(v, str(v)) for v in (0, 25, 50, 75, 100)]])
        item.getAxis("bottom").setLabel("training step")
        for name in ("left", "bottom"):
            item.getAxis(name).enableAutoSIPrefix(False)
        item.getAxis("left").setStyle(hideOverlappingLabels=False)  # keep the 0 and the 100
        self.plot.setYRange(0, 100, padding=0.04)
        self._x_max = 0.0
        self._set_x_range(10.0)
        self.curves = [self.plot.plot(name=f"position {i + 1}", symbol=SYMBOLS[i], symbolSize=6)
                       for i in range(POSITIONS)]
        self.empty_note = pg.TextItem("held-out acceptance appears at the first evaluation", anchor=(0.5, 0.5))
        self.plot.addItem(self.empty_note, ignoreBounds=True)
        self.empty_note.setPos(5, 50)
        return self.plot

    def _set_x_range(self, last_step: float) -> None:
        """0 … a 1-2-5 step above the last training step (moved only when it steps up: whole-step ticks)."""
        wanted = _nice_ceiling(max(10.0, last_step))
        if wanted != self._x_max:
            self._x_max = wanted
            self.plot.setXRange(0, wanted, padding=0.05)  # room for the last tick's label

    def _build_buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.use_button = QPushButton("Use eagle now")
        self.use_button.setToolTip("Select method eagle in the chat's settings (on the transformers backend)")
        self.use_button.clicked.connect(lambda: self.use_eagle_requested.emit(self.model))
        self.use_button.hide()
        row.addWidget(self.use_button)
        row.addStretch(1)
        self.start_button = QPushButton("Start")
        self.start_button.setObjectName("send_button")
        self.start_button.clicked.connect(self.start)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("Train again on the same folder: it continues from the checkpoint")
        self.resume_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop after the current step; the checkpoint is kept, Resume continues")
        self.cancel_button.clicked.connect(self.cancel)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        for button in (self.start_button, self.resume_button, self.cancel_button, close):
            row.addWidget(button)
        return row

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(660, 700)

    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_ = palette
        colours = (palette.series_cumulative, palette.series_speed, palette.series_draft_time)
        self.plot.setBackground(QColor(palette.surface))
        item = self.plot.getPlotItem()
        item.setTitle("Held-out acceptance by draft position", color=palette.text, size="9pt")
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen(QColor(palette.border), width=1))
            axis.setTextPen(QColor(palette.text_dim))
            axis.label.setDefaultTextColor(QColor(palette.text_dim))
        for curve, colour, style in zip(self.curves, colours, LINE_STYLES):
            curve.setPen(pg.mkPen(QColor(colour), width=2, style=style))
            curve.setSymbolBrush(QColor(colour))
            curve.setSymbolPen(pg.mkPen(QColor(colour)))
        self.empty_note.setColor(QColor(palette.text_dim))
        marks = ("● ——", "▼ – –", "■ ···")  # the marker and dash of each line, as drawn
        self.legend.setText("    ".join(f"<span style='color:{colour}'>{mark}</span> position {i + 1}"
                                       for i, (colour, mark) in enumerate(zip(colours, marks)))
                            + "  (draft position: 1 = the first drafted token)")

    # ------------------------------------------------------------------ state
    @property
    def running(self) -> bool:
        return self._job is not None

    def set_model(self, model: str, label: str) -> bool:
        """Train for another model (only while idle); False while a run is going."""
        if self.running and model != self.model:
            return False
        changed = model != self.model or not self.run.snapshot().version
        self.model, self.label = model, label
        if changed:  # a saved run's evaluations are drawn at once
            self.out = None
            self.run, self._drawn = TrainRun(checkpoint_points(self.folder())), -1
            self.result.clear()
            self.use_button.hide()
            self.refresh()
        self.title.setText(f"Train an EAGLE drafter for {label}")
        self.about.setText(f"A one-layer head learns to guess {label}'s next tokens from its own replies (written "
                           "here first), then method eagle drafts with it. The chat keeps working meanwhile, more "
                           "slowly: training uses all cores but one.")
        self._update_resume()
        return True

    def folder(self) -> Path | None:
        """The head folder of this model, where known (the last run's, remembered, or found by its card)."""
        if self.out is not None:
            return self.out
        remembered = self.settings.eagle_head_folder(self.model)
        if remembered is not None and Path(remembered).is_dir():
            return Path(remembered)
        return head_for(self.label)

    def _update_resume(self) -> None:
        folder = self.folder()
        step = checkpoint_step(folder)
        if step is not None and not self.running:
            self.resume_note.setText(f"A run is saved in {folder}: Resume trains for the time above and resumes "
                                     f"from step {step}.")
        else:
            self.resume_note.setText("")
        self.resume_note.setVisible(bool(self.resume_note.text()))
        self.start_button.setEnabled(not self.running and step is None)
        self.start_button.setToolTip(f"A run is saved for this model: Resume continues it (to start over, delete "
                                     f"{folder})" if step is not None else "Train for the time above")
        self.resume_button.setEnabled(not self.running and step is not None)
        self.cancel_button.setEnabled(self.running and not self.cancel_event.is_set())
        self.minutes.setEnabled(not self.running)
        self.from_history.setEnabled(not self.running)

    # ------------------------------------------------------------------ a run
    def start(self) -> bool:
        """Start (or resume: the same folder continues from its checkpoint) a run; False when refused."""
        if self.running:
            return False
        try:  # the same options again: the trainer resumes from the checkpoint in the model's own folder
            options = run_options(self._base, self.model, self.minutes.value(), self.from_history.isChecked())
        except ConfigError as exc:
            self._show_problem(str(exc))
            return False
        self.run, self._drawn = TrainRun(checkpoint_points(self.folder())), -1
        cancel, fold = threading.Event(), self.run.fold
        self.cancel_event = cancel
        self._show_problem(None)
        self.result.clear()
        self.use_button.hide()
        self.phase.setText("Starting…")
        self._job = self.jobs.submit(lambda: run_training(self._train, options, fold, cancel))
        self.timer.start()
        self._update_resume()
        return True

    def cancel(self) -> None:
        if self.running and self.cancel_event is not None:
            self.cancel_event.set()
            self.phase.setText("Cancelling… (the checkpoint is kept)")
            self._update_resume()

    def refresh(self) -> None:
        """Redraw from the run's state, when it changed (the timer's slot)."""
        state = self.run.snapshot()
        if state.version == self._drawn:
            return
        self._drawn = state.version
        loading = self.running and state.phase in ("", "loading")  # no fraction yet: a busy bar
        self.bar.setRange(0, 0 if loading else 1000)
        self.bar.setValue(int(1000 * min(1.0, max(0.0, state.fraction))))
        if not (self.cancel_event is not None and self.cancel_event.is_set() and self.running):
            self.phase.setText(progress_line(state) if state.version else "")
        self.figures.setText(figures_line(state))
        series = self.run.series()
        for curve, (steps, values) in zip(self.curves, series):
            curve.setData(steps, values)
        self.empty_note.setVisible(not series[0][0])
        self._set_x_range(max([float(state.step), *series[0][0]]))  # the axis follows training between evaluations

    def plotted(self) -> list[tuple[list[float], list[float]]]:
        """What each position's curve draws (for tests and the screenshots)."""
        data = [curve.getData() for curve in self.curves]
        return [([] if x is None else list(map(float, x)), [] if y is None else list(map(float, y))) for x, y in data]

    def _job_finished(self, job_id: int, outcome) -> None:
        if job_id != self._job:
            return
        phase, out, card = outcome
        self._end_run()
        if out is not None:
            self.out = Path(out)
            self.settings.set_eagle_head_folder(self.model, str(out))
        if phase == "cancelled" and card is None:
            self.phase.setText("Cancelled before training began: the replies written so far are kept, and Resume "
                               "or Start continues from them.")
        elif card is not None:
            self.phase.setText("Done" if phase == "done" else "Cancelled")
            self.result.setText(result_words(out, card, phase == "cancelled"))
            self.use_button.show()
        self._update_resume()
        self.training_finished.emit(phase)

    def _job_failed(self, job_id: int, exc) -> None:
        if job_id != self._job:
            return
        self._end_run()
        self.phase.setText("Stopped")
        self._show_problem(error_message(exc))
        self._update_resume()
        self.training_finished.emit("failed")

    def _end_run(self) -> None:
        self._job = None
        self.timer.stop()
        self.refresh()

    def _show_problem(self, message: str | None) -> None:
        line = " ".join(str(message).split()) if message else ""
        self.problem.setText(f"⚠ {line[:1].upper()}{line[1:]}" if line else "")
        self.problem.setVisible(bool(line))

    # ------------------------------------------------------------------ closing
    def closeEvent(self, event) -> None:  # noqa: N802
        # closing mid-run cancels (the checkpoint is kept); the thread ends on its own, the app's shutdown waits
        self.cancel()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Cancel a run and wait for its thread. Safe to call twice."""
        if self.cancel_event is not None:
            self.cancel_event.set()
        self.timer.stop()
        self.jobs.shutdown()


def run_training(train: Callable, options, report: Callable, cancel: threading.Event):
    """The job: the trainer with the engine's thread count, as (phase, head folder, card); a cancel that ends
    before the trainer could write a head is (cancelled, None, None). Errors go up as they are."""
    from engine.host import limit_torch_threads
    limit_torch_threads()
    try:
        out, card = train(options, report, cancel)
    except KeyboardInterrupt:  # the trainer's way of saying "cancelled while reading features"
        return ("cancelled", None, None)
    except ConfigError:
        if cancel.is_set():  # cancelled while writing replies: "too little time" is not the user's problem
            return ("cancelled", None, None)
        raise
    return ("cancelled" if cancel.is_set() else "done", out, card)


class TrainingFront:
    """The main window's side of training: one dialog (made on first use), the offer, "Use eagle now"."""

    def __init__(self, window, *, train: Callable | None = None, base_options=None,
                 ask: Callable[[str, str], bool] | None = None) -> None:
        """`train(options, report, cancel)`: the trainer (engine.training.train.train when None); `base_options`:
        its TrainOptions before the dialog's choices; `ask(title, text)`: the offer's question (a Train… / Not now
        box when None)."""
        self.window = window
        self.dialog: TrainDialog | None = None
        self._train, self._base_options = train, base_options
        self._ask = ask if ask is not None else lambda title, text: ask_train(window, title, text)
        self._offered: set[str] = set()

    def open(self, model: str, label: str) -> TrainDialog:
        if self.dialog is None:
            self.dialog = TrainDialog(model, label, self.window.settings, self.window.palette_, train=self._train,
                                      base_options=self._base_options, parent=self.window)
            self.dialog.setWindowFlag(Qt.WindowType.Window, True)
            self.dialog.use_eagle_requested.connect(self.use_eagle)
        elif not self.dialog.set_model(model, label):
            self.dialog.resume_note.setText(f"Training {self.dialog.label} now: cancel it first to train {label}.")
            self.dialog.resume_note.show()
        show_window(self.dialog)  # within the screen, as every top-level window
        return self.dialog

    # ------------------------------------------------------------------ the offer
    def method_picked(self, method: str) -> None:
        """The user picked a method in the settings panel: eagle for a loaded model with no head is offered."""
        info = self.window.session.model_info
        if (method != head_method() or info is None or not is_local_backend(info.backend)
                or head_for(info.name) is not None):
            return
        self.offer(info.requested, info.name)

    def generation_failed(self, message: str) -> None:
        """A reply refused for want of a head (a remembered eagle setting) gets the same offer, once."""
        info = self.window.session.model_info
        if info is not None and message.startswith(f"{info.name} has no eagle head yet"):
            self.offer(info.requested, info.name)

    def offer(self, model: str, label: str) -> bool:
        """Ask once per model (never in a scripted run, never again once declined); otherwise say it in the
        settings panel's message line. True when the dialog was opened."""
        settings = self.window.settings
        if self.window.persist and not settings.training_offer_declined(model) and model not in self._offered:
            self._offered.add(model)
            if self._ask("Train an eagle head?", offer_text(label, default_minutes())):
                self.open(model, label)
                return True
            settings.set_training_offer_declined(model)
        line = (f"{label} has no eagle head yet: train one in Tools ▸ Models… ▸ Train a drafter…, or pick another "
                "method.")
        self.window.controls.show_runtime_problem(line)
        self.window.status_label.setText(line)
        return False

    # ------------------------------------------------------------------ use it
    def use_eagle(self, model: str) -> None:
        """Select method eagle for `model` in the chat's settings: on the transformers backend, the model loaded
        (again) when it is not the loaded one or runs on another backend."""
        window, controls = self.window, self.window.controls
        info = window.session.model_info
        reload = info is None or info.requested != model
        if controls.effective_backend() != "transformers":
            reload = True
            window.set_backend("transformers")
            if window.tools.model_manager is not None:
                window.tools.model_manager.set_backend("transformers")
        controls.apply(model=model, method=head_method())
        if reload:
            window.load_model(model, force=True)
        window.status_label.setText(f"Method eagle selected for {model}: it applies from the next message.")

    def set_palette(self, palette: theme.Palette) -> None:
        if self.dialog is not None:
            self.dialog.set_palette(palette)

    def shutdown(self) -> None:
        if self.dialog is not None:
            self.dialog.shutdown()


def offer_box(parent, title: str, text: str) -> tuple[QMessageBox, QPushButton]:
    """The question with its two answers, Train… and Not now; (the box, its Train… button)."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text, QMessageBox.StandardButton.NoButton, parent)
    train = box.addButton("Train…", QMessageBox.ButtonRole.AcceptRole)
    box.setDefaultButton(box.addButton("Not now", QMessageBox.ButtonRole.RejectRole))
    return box, train


def ask_train(parent, title: str, text: str) -> bool:
    box, train = offer_box(parent, title, text)
    box.exec()
    return box.clickedButton() is train
