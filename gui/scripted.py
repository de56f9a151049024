"""The window's scripted mode (`specscope gui --prompt TEXT … --quit-when-done`, `--compare SPEC…`): send one
prompt (or run one comparison) once the model is ready, then screenshot, print the result as one JSON line and
quit with the exit status. gui.app parses and checks the options (the SPECs, the models) and starts the window;
this module drives it.

A scripted run never asks: the flags answer the safety questions up front (`grant_flags`), and a question that
still comes up ends the run (`UnaskedQuestions`, the window's `confirm`).

May touch: the main and compare windows' public methods and signals, engine.models.consent (the kinds of
question). It holds no chat state: the windows' sessions do.
"""

from __future__ import annotations

import argparse
import json
import sys

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication

from engine.core.config import SAMPLING_FIELDS, SpecConfig
from engine.models.consent import PICKLE, REMOTE_CODE

EXIT_OK, EXIT_FAILED = 0, 2
OWN_DRAFTER_WAIT_MS = 5000  # the longest a scripted run waits for the model's own drafter to be looked up


def grant_flags(window, args: argparse.Namespace, models: tuple[str, ...]) -> None:
    """A scripted run: the flags' answers hold for this run only, for `models` (the target and the drafts); the
    worker loads with them."""
    for name in models:
        if args.trust_remote_code:
            window.session.answer_consent(REMOTE_CODE, name, True)
        if args.allow_pickle:
            window.session.answer_consent(PICKLE, name, True)
    window.loading.sync()


class UnaskedQuestions(QObject):
    """The window's `confirm` in a scripted run: a question the flags did not answer (a model they did not name)
    is refused with the flag that answers it, and `refused` ends the run instead of a dialog."""

    refused = Signal(str)  # the question

    def __call__(self, _title: str, question: str) -> bool:
        print(f"specscope gui: error: {' '.join(question.split())} (a scripted run does not ask: give "
              "--trust-remote-code or --allow-pickle)", file=sys.stderr, flush=True)
        self.refused.emit(question)
        return False


class ScriptedRun:
    """Send one prompt once the model is ready; on the reply, screenshot, print stats, quit."""

    def __init__(self, app, window, args: argparse.Namespace, questions: UnaskedQuestions | None = None,
                 specs: list[SpecConfig] | None = None) -> None:
        """`specs`: the --compare settings, parsed (gui.app.compare_specs)."""
        self.app, self.window, self.args, self.specs = app, window, args, specs or []
        self.exit_code = EXIT_OK
        self._sent = False
        # the model's catalog entry: the method the settings pick for it without --method (its own drafter),
        # and for any method, where it runs (auto moves one its backend can't serve) or why it can't
        self._waiting_for_own = True
        self._ready = False
        window.model_ready.connect(self._send)
        window.own_drafter_looked_up.connect(self._own_looked_up)
        window.reply_finished.connect(self._finished)
        window.request_failed.connect(self._failed)
        if questions is not None:
            questions.refused.connect(lambda _question: self.quit(EXIT_FAILED))

    def _own_looked_up(self, _entry=None) -> None:
        self._waiting_for_own = False
        if self._ready:
            self._send(None)

    def _send(self, info) -> None:
        if info is not None:
            self._ready = True
            if self._waiting_for_own:  # its catalog entry is read on a thread: a look-up that fails mustn't hang
                QTimer.singleShot(OWN_DRAFTER_WAIT_MS, self._own_looked_up)
        if self._sent or not self._ready or self._waiting_for_own:
            return
        self._sent = True
        if not self.window.send(self.args.prompt):
            self._failed(self.window.controls.config_problem() or "the message could not be sent")

    def _finished(self, turn) -> None:
        problem = self._show_rounds(turn)
        self.window.refresh_live_views()
        if not self.args.quit_when_done:
            if problem is not None:
                self.window.set_status(problem)
            self._save_screenshot()
            return
        if problem is not None:
            self._failed(problem)
            return
        self._save_screenshot()
        minimum = self.window.minimumSizeHint().expandedTo(self.window.minimumSize())
        record = {**self.window.session.finish_record(turn), "window_min_size": [minimum.width(), minimum.height()],
                  "window_size": [self.window.width(), self.window.height()]}
        print(json.dumps(record, ensure_ascii=False), flush=True)
        self.quit(EXIT_OK)

    def _show_rounds(self, turn) -> str | None:
        """--panel and --select-round, after the reply; the problem in words, or None."""
        if self.args.select_round is not None:
            if not self.window.round_focus.select_index(self.args.select_round):
                indices = [r.index for r in turn.rounds]
                return (f"--select-round {self.args.select_round}: this reply has no round {self.args.select_round} "
                        + (f"(its rounds are {indices[0]}–{indices[-1]})" if indices else "(it has no rounds)"))
        if self.args.panel:
            self.window.live.show_named(self.args.panel)
        return None

    def _failed(self, message: str) -> None:
        if not self.args.quit_when_done:
            return
        print(f"specscope gui: error: {message}", file=sys.stderr, flush=True)
        self._save_screenshot()
        self.quit(EXIT_FAILED)

    def _save_screenshot(self, widget=None) -> None:
        if not self.args.screenshot:
            return
        QApplication.processEvents()
        if not (widget or self.window).grab().save(self.args.screenshot):
            print(f"specscope gui: could not write {self.args.screenshot}", file=sys.stderr, flush=True)
            self.exit_code = EXIT_FAILED

    def quit(self, code: int) -> None:
        self.exit_code = max(self.exit_code, code)
        self.window.close()
        self.app.exit(self.exit_code)


class ScriptedCompare(ScriptedRun):
    """--compare: once the model is ready, run the comparison in the compare window; on its end, screenshot
    the compare window, print the summary (one JSON line) and quit."""

    def _send(self, _info) -> None:
        if self._sent:
            return
        self._sent = True
        try:
            self._start_comparison()
        except Exception as exc:  # noqa: BLE001 — a scripted run must end, never hang on a broken slot
            self._failed(f"the comparison could not start ({type(exc).__name__}: {exc})")

    def _start_comparison(self) -> None:
        args = self.args
        compare = self.window.open_compare()
        compare.comparison_finished.connect(self._compared)
        compare.comparison_failed.connect(self._failed)
        compare.set_specs(self.specs)
        compare.prompt.setPlainText(args.prompt)
        if args.max_new_tokens is not None:
            compare.max_new_tokens.setValue(args.max_new_tokens)
        compare.sampling_row.set_values(**{field.name: getattr(args, field.name) for field in SAMPLING_FIELDS})
        compare.resize(compare.sizeHint())
        if not compare.run_comparison():
            self._failed(compare.status_label.text())

    def _finished(self, turn) -> None:  # no chat reply in this mode
        pass

    def _compared(self, session) -> None:
        compare = self.window.tools.compare_window
        self._save_screenshot(compare)
        if not self.args.quit_when_done:
            return
        if session.cancelled:
            self._failed("the comparison was stopped")
            return
        print(json.dumps([row.as_dict() for row in session.rows()], ensure_ascii=False), flush=True)
        self.quit(EXIT_OK)

    def _failed(self, message: str) -> None:
        if self.args.quit_when_done and self.window.tools.compare_window is not None:
            print(f"specscope gui: error: {message}", file=sys.stderr, flush=True)
            self._save_screenshot(self.window.tools.compare_window)
            self.quit(EXIT_FAILED)
            return
        super()._failed(message)


def start_scripted(app, window, args: argparse.Namespace, questions: UnaskedQuestions, models: tuple[str, ...],
                   specs: list[SpecConfig]) -> ScriptedRun:
    """The scripted run of `args` on `window` (`specs`: --compare's, parsed), the flags granted for `models`."""
    scripted = (ScriptedCompare if args.compare else ScriptedRun)(app, window, args, questions, specs)
    grant_flags(window, args, models)
    return scripted
