"""GUI tests run offscreen, against the scripted FakeEngine unless they say otherwise."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from gui import theme  # noqa: E402
from gui.fake_engine import FakeEngine  # noqa: E402
from gui.views.main_window import MainWindow  # noqa: E402

WAIT_MS = 10_000  # generous: a slow CI machine is not a failure


@pytest.fixture
def make_window(qtbot):
    """Build a MainWindow driven by `engine` (a FakeEngine by default), loaded and ready to chat."""
    windows = []

    def make(engine: FakeEngine | None = None, palette=theme.LIGHT) -> MainWindow:
        engine = engine if engine is not None else FakeEngine()
        window = MainWindow(loader=lambda name, progress=None: engine, palette=palette)
        window.engine = engine  # for the test's convenience
        qtbot.addWidget(window)
        windows.append(window)
        window.resize(1300, 850)
        window.show()
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.start()
        return window

    yield make
    for window in windows:
        window.engine.resume.set()
        window.shutdown()
        assert not window.worker_thread.thread.isRunning()


@pytest.fixture
def send_and_wait(qtbot):
    """send_and_wait(window, text): send and wait for the reply; returns the finished Turn."""

    def send(window: MainWindow, text: str = "Tell me about speculative decoding"):
        with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as blocker:
            assert window.send(text)
        return blocker.args[0]

    return send
