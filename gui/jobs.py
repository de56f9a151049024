"""Run slow, blocking calls (catalog scans, tokenizer checks, downloads) on a thread of their own, one at a
time, and hear back on the GUI thread.

`BackgroundJobs.submit(fn)` queues `fn()` to the thread and returns a job id; `finished(job_id, result)` or
`failed(job_id, exception)` comes back through a queued signal. `submit(fn, reporting=True)` calls
`fn(report)` instead: `report(value)` may be called from the job's thread or from any thread the call starts
(a download's file threads), and comes back as `progressed(job_id, value)` on the GUI thread. `shutdown()`
quits the thread and waits for it (a running call finishes first: give it a way to stop, such as a download's
cancel event).

Every signal a caller connects to is emitted on the GUI thread, so connecting and disconnecting there (a
test's waitSignal, a lambda) never races a worker. The threads only emit the runner's own signals, which are
connected once, here, and stay connected until the thread has stopped.

May touch: QtCore (a QObject and a QThread) and engine.core.errors; it knows nothing of what it runs.
"""

from __future__ import annotations

import itertools
import traceback
from functools import partial
from typing import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.core.errors import SpecScopeError


class _Runner(QObject):
    """Lives on the jobs' thread; its signals reach BackgroundJobs (GUI thread) through queued connections."""

    finished = Signal(int, object)
    failed = Signal(int, object)
    reported = Signal(int, object)  # emitted from whichever thread reports

    def report(self, job_id: int, value: object) -> None:
        self.reported.emit(job_id, value)

    @Slot(int, object)
    def run(self, job_id: int, fn: Callable[[], object]) -> None:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 — reported to the GUI as a message, never a crash
            if not isinstance(exc, SpecScopeError):
                traceback.print_exc()
            self.failed.emit(job_id, exc)
            return
        self.finished.emit(job_id, result)


class BackgroundJobs(QObject):
    finished = Signal(int, object)  # job id, result
    failed = Signal(int, object)  # job id, exception
    progressed = Signal(int, object)  # job id, what a reporting job reported
    _submitted = Signal(int, object)

    def __init__(self, name: str, parent=None) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self.thread = QThread()
        self.thread.setObjectName(name)
        self._runner = _Runner()
        self._runner.moveToThread(self.thread)
        self._submitted.connect(self._runner.run)
        self._runner.finished.connect(self.finished)
        self._runner.failed.connect(self.failed)
        self._runner.reported.connect(self.progressed)
        self.thread.start()

    def submit(self, fn: Callable[..., object], *, reporting: bool = False) -> int:
        """Queue `fn()` (with `reporting`: `fn(report)`, see the module docstring); returns the job id."""
        job_id = next(self._ids)
        self._submitted.emit(job_id, partial(fn, partial(self._runner.report, job_id)) if reporting else fn)
        return job_id

    def shutdown(self) -> None:
        """Finish the running call, drop the queued ones, stop the thread. Safe to call twice."""
        if self.thread.isRunning():
            self.thread.quit()
            self.thread.wait()
