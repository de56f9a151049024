"""The window's every way out stops and joins the engine's thread: an error after the window is made (here,
a settings panel that raises) ends the process with that error, never with Qt's abort ("QThread: Destroyed
while thread 'engine' is still running", SIGABRT), which a too-large --seed used to cause."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = textwrap.dedent("""
    import sys
    from fakes import FakeEngine
    from gui import app

    def broken_apply(window, args):
        raise RuntimeError("the settings panel broke")

    app.apply_args = broken_apply
    try:
        app.main(["--prompt", "hi", "--quit-when-done"], loader=lambda name, progress=None, **options: FakeEngine())
    except RuntimeError as exc:
        print(f"raised: {exc}", flush=True)
        sys.exit(3)
""")


def test_an_error_after_the_window_opens_joins_the_engine_thread(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECSCOPE_DATA_DIR": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests" / "gui")))}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr  # not -6 (SIGABRT)
    assert "raised: the settings panel broke" in done.stdout
    assert "QThread: Destroyed" not in done.stderr


COPY_THEN_QUIT = textwrap.dedent("""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication
    from gui import theme
    from gui.views.chat.transcript import TranscriptView

    app = QApplication([])
    view = TranscriptView(lambda serial: None, theme.LIGHT)
    view.setPlainText("a reply to copy")
    view.show()
    view.selectAll()
    QTest.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    print("copied:", QGuiApplication.clipboard().text(), flush=True)
""")


def test_quitting_after_a_copy_exits_cleanly(tmp_path):
    """The clipboard keeps the transcript's copy until the app ends; the copy is Qt's own, so it is freed once
    (a QMimeData made in Python was freed twice then: a segfault as the process exited)."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", COPY_THEN_QUIT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert "copied: a reply to copy" in done.stdout, done.stderr
    assert done.returncode == 0, done.stderr  # not -11 (SIGSEGV)
