"""The worker frees the loaded model before loading another (issue 22, item 8: a GPU holds one model, not two,
and torch's cached memory goes back to the device), and a load that fails brings the previous model back."""

from __future__ import annotations

from gui import worker as worker_module
from gui.worker import LoadOptions, WorkerThread
from PySide6.QtCore import QObject, Signal

from tests.gui.fakes import FakeEngine, FakeModel
from engine.core.errors import OutOfMemoryError

WAIT_MS = 20_000


class Window(QObject):
    load_options_changed = Signal(object)  # LoadOptions
    load_requested = Signal(str)


def test_the_old_model_is_freed_before_the_new_one_loads_and_comes_back_if_it_fails(qtbot, monkeypatch):
    log = []
    engines = {}
    monkeypatch.setattr(worker_module, "free_cached_memory", lambda: log.append("free cached memory"))

    def loader(name, progress=None, *, on_status=None, consent=None, **options):
        held = [f"{n} (released {e.releases}×)" for n, e in engines.items() if not e.releases]
        log.append(f"load {name}; still held: {', '.join(held) or 'none'}")
        if name == "too-big":
            raise OutOfMemoryError("not enough cuda memory to load too-big")
        engines[name] = FakeEngine(target=FakeModel(name=name))
        return engines[name]

    thread = WorkerThread(loader)
    window = Window()
    window.load_options_changed.connect(thread.worker.set_load_options)
    window.load_requested.connect(thread.worker.load)
    try:
        window.load_options_changed.emit(LoadOptions(device="cpu"))
        for name in ("first", "second"):
            with qtbot.waitSignal(thread.worker.model_loaded, timeout=WAIT_MS):
                window.load_requested.emit(name)
        assert log == ["load first; still held: none",
                       "free cached memory", "load second; still held: none"]
        assert engines["first"].releases == 1
        log.clear()
        failures = []
        thread.worker.load_failed.connect(lambda name, message: failures.append((name, message)))
        with qtbot.waitSignal(thread.worker.model_loaded, timeout=WAIT_MS) as back:
            window.load_requested.emit("too-big")
        assert failures == [("too-big", "not enough cuda memory to load too-big")]
        assert back.args[0].requested == "second"  # the model that was loaded is loaded again
        assert log == ["free cached memory", "load too-big; still held: none", "free cached memory",
                       "load second; still held: none"]
    finally:
        thread.shutdown()
