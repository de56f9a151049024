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
