"""GUI tests run offscreen, against the scripted FakeEngine unless they say otherwise."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

import engine.drafters  # noqa: E402,F401  (registers the methods the tests name)
from gui import theme  # noqa: E402
from fakes import FakeEngine  # noqa: E402
from gui.views.main.window import MainWindow  # noqa: E402

WAIT_MS = 10_000  # generous: a slow CI machine is not a failure


@pytest.fixture(autouse=True)
def private_app_dirs(tmp_path, monkeypatch):
    """Every GUI test writes its chat history and settings under tmp_path, never the user's real ones, and
    sees an empty in-memory keyring."""
    import keyring

    from engine.models import secrets
    from memory_keyring import MemoryKeyring

    data, settings = tmp_path / "app-data", tmp_path / "app-settings"
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(data))
    monkeypatch.setenv("SPECSCOPE_SETTINGS_DIR", str(settings))
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    monkeypatch.setattr(secrets, "_default", None)
    yield {"data": data, "settings": settings, "keyring": backend}
    keyring.set_keyring(previous)


@pytest.fixture
def make_window(qtbot):
    """Build a MainWindow driven by `engine` (a FakeEngine by default), loaded and ready to chat. It keeps its
    history and settings (persist=True) in the test's private folders."""
    windows = []

    def make(engine: FakeEngine | None = None, palette=theme.LIGHT, persist: bool = True) -> MainWindow:
        engine = engine if engine is not None else FakeEngine()
        def loader(name, progress=None, on_status=None, **options):
            engine.on_status = on_status  # what the worker builds a real engine with
            return engine

        window = MainWindow(loader=loader, palette=palette, persist=persist)
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
