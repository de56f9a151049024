"""`specscope gui --prompt ... --screenshot PNG --quit-when-done`, a clean exit mid-generation, and one run on
the real built-in model."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from engine.core.events import TokenStatus
from gui import app as gui_app
from gui import theme
from fakes import FakeEngine

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent  # the test doubles (fakes.py) for scripts run in a subprocess


def count_pixels(path: Path, colour: str, tolerance: int = 2) -> int:
    """How many pixels of the PNG are `colour` (± tolerance per channel)."""
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
    assert not image.isNull(), f"{path} is not an image"
    width, height, stride = image.width(), image.height(), image.bytesPerLine()
    data = bytes(image.constBits())[: stride * height]
    target = bytes.fromhex(colour.lstrip("#"))
    import numpy as np
    pixels = np.frombuffer(data, dtype=np.uint8).reshape(height, stride)[:, : width * 3].reshape(height, width, 3)
    close = np.all(np.abs(pixels.astype(int) - np.frombuffer(target, dtype=np.uint8).astype(int)) <= tolerance, axis=2)
    return int(close.sum())


def status_pixels(path: Path, status: TokenStatus, palette=theme.LIGHT) -> int:
    style = palette.status(status)
    return count_pixels(path, style.background) + count_pixels(path, style.background_alt)


def subprocess_env():
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(HERE), env.get("PYTHONPATH")]))
    return env


def run_gui(*args, timeout=120):
    """`python -m gui ARGS` offscreen, as `specscope gui ARGS` runs it."""
    return subprocess.run([sys.executable, "-m", "gui", *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_scripted_mode_screenshot_shows_the_colours_and_prints_stats(tmp_path):
    png = tmp_path / "window.png"
    # --demo: a recorded stream of the built-in model replayed instead of a model, so this runs in seconds
    result = run_gui("gui", "--demo", "--theme", "light", "--method", "prompt-lookup", "--k", "4",
                     "--max-new-tokens", "60", "--prompt", "Explain it", "--screenshot", str(png), "--quit-when-done")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["committed_tokens"] == 60 and record["stop_reason"] == "max-new-tokens"
    assert record["spec"] == "prompt-lookup:k=4" and 0 < record["acceptance_rate"] < 1
    assert record["text"].strip() and "(recorded)" in record["model"]
    image = QImage(str(png))
    assert image.width() >= 1000 and image.height() >= 700  # the whole window, not a widget
    assert status_pixels(png, TokenStatus.ACCEPTED) > 300
    assert status_pixels(png, TokenStatus.SUBSTITUTED) > 100
    assert status_pixels(png, TokenStatus.BONUS) > 50


def test_scripted_mode_refuses_bad_settings_before_opening(capsys):
    assert gui_app.main(["--k", "0", "--prompt", "x", "--quit-when-done"]) == 2
    assert "k must be an integer" in capsys.readouterr().err
    assert gui_app.main(["--method", "early-exit", "--layers", "0", "--prompt", "x", "--quit-when-done"]) == 2
    assert "early-exit layers must be ≥ 1" in capsys.readouterr().err


def test_method_parameters_and_adaptive_reach_the_settings(qtbot):
    from gui.views.main.window import MainWindow

    args = gui_app.parse_args(["gui", "--method", "prompt-lookup", "--ngram-max", "5", "--adaptive", "--k", "3"])
    window = MainWindow(loader=lambda name, progress=None, **options: FakeEngine(), palette=theme.LIGHT)
    qtbot.addWidget(window)
    try:
        gui_app.apply_args(window, args)
        assert window.controls.read().spec.label() == "prompt-lookup:k=3,ngram_max=5,adaptive=1"
    finally:
        window.shutdown()


def test_options_not_given_keep_the_last_setting():
    """engine.cli.arguments with unset=True: every option the command line leaves out is None, so the window keeps
    what it restored from the last session."""
    args = gui_app.parse_args(["gui"])
    assert all(getattr(args, name) is None for name in ("model", "device", "method", "draft", "k", "layers",
                                                         "temperature", "top_p", "top_k", "seed",
                                                         "max_new_tokens", "system"))
    assert gui_app.parse_args(["--method", "draft-model"]).draft == "default"


REFUSED_BY_THE_ENGINE = textwrap.dedent("""
    import sys
    from fakes import FakeEngine
    from gui import app

    sys.exit(app.main(sys.argv[1:], loader=lambda name, progress=None, **options: FakeEngine()))
""")


def test_scripted_mode_exits_2_when_the_engine_refuses(tmp_path):
    result = subprocess.run([sys.executable, "-c", REFUSED_BY_THE_ENGINE, "--method", "draft-model", "--draft",
                             "mismatch", "--prompt", "x", "--quit-when-done", "--screenshot", str(tmp_path / "x.png")],
                            cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "tokenizer differs" in result.stderr and result.stdout == ""
    assert (tmp_path / "x.png").is_file()


def test_the_demo_refuses_a_method_it_has_no_recording_of(tmp_path):
    result = run_gui("--demo", "--method", "draft-model", "--prompt", "x", "--quit-when-done")
    assert result.returncode == 2
    assert "the demo replays recordings of" in result.stderr and result.stdout == ""


def test_arguments_reach_the_settings(qtbot):
    from gui.views.main.window import MainWindow

    args = gui_app.parse_args(["gui", "--method", "early-exit", "--layers", "5", "--k", "3", "--temperature",
                               "0.5", "--top-p", "0.9", "--top-k", "40", "--seed", "11", "--max-new-tokens",
                               "77", "--system", "Be brief.", "--model", "other"])
    window = MainWindow(loader=lambda name, progress=None, **options: FakeEngine(), palette=theme.LIGHT, model=args.model)
    qtbot.addWidget(window)
    try:
        gui_app.apply_args(window, args)
        settings = window.controls.read()
        assert settings.model == "other" and settings.spec.label() == "early-exit:k=3,layers=5"
        assert (settings.sampling.temperature, settings.sampling.top_p, settings.sampling.top_k,
                settings.sampling.seed) == (0.5, 0.9, 40, 11)
        assert settings.max_new_tokens == 77 and settings.system_prompt == "Be brief."
    finally:
        window.shutdown()


CLOSE_MID_GENERATION = textwrap.dedent("""
    import sys
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication
    from gui import theme
    from fakes import FakeEngine
    from gui.views.main.window import MainWindow

    app = QApplication(sys.argv)
    engine = FakeEngine(delay=0.01, pause_after=8)  # never finishes on its own
    window = MainWindow(loader=lambda name, progress=None, **options: engine, palette=theme.LIGHT)
    window.show()
    window.model_ready.connect(lambda info: window.send("go"))
    def close_mid_generation():
        if window.session.live.accumulator.rounds >= 5:
            poll.stop()
            window.close()  # mid-generation: the worker is inside the generator
    poll = QTimer()
    poll.timeout.connect(close_mid_generation)
    poll.start(5)
    window.start()
    code = app.exec()
    print("rounds", window.session.live.accumulator.rounds, "running", window.worker_thread.thread.isRunning(), flush=True)
    sys.exit(code)
""")


def test_closing_mid_generation_exits_cleanly_without_a_qt_abort():
    result = subprocess.run([sys.executable, "-c", CLOSE_MID_GENERATION], cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "running False" in result.stdout
    assert "QThread" not in result.stderr and "Destroyed while" not in result.stderr
    assert "Traceback" not in result.stderr


def default_model_available() -> bool:
    try:
        from engine.models import sources as models
    except ImportError:
        return False
    return importlib.util.find_spec(models.DEFAULT_PACKAGE) is not None


@pytest.mark.model
@pytest.mark.skipif(not default_model_available(), reason="the built-in default model is not installed")
def test_real_default_model_gives_a_coloured_reply_and_stats(tmp_path):
    """One message on the real built-in model, through `specscope gui` scripted mode."""
    png = tmp_path / "real.png"
    command = [sys.executable, "-m", "gui", "gui", "--theme", "light", "--method", "prompt-lookup", "--k", "4",
               "--max-new-tokens", "48", "--prompt",
               "List the days of the week, then list them again in reverse order.",
               "--screenshot", str(png), "--quit-when-done"]
    result = subprocess.run(command, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["model"] and record["committed_tokens"] > 10 and record["text"].strip()
    assert record["tok_per_s"] > 0 and record["drafted_tokens"] > 0
    # prompt lookup on a repetitive answer: some drafts kept, some corrected
    assert 0 < record["accepted_tokens"] < record["drafted_tokens"]
    assert status_pixels(png, TokenStatus.ACCEPTED) > 30
    assert status_pixels(png, TokenStatus.SUBSTITUTED) > 30
    assert "QThread" not in result.stderr
