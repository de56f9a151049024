"""The one place where numbers and text given by a user are checked at the edge of their type, for the CLI
and the GUI alike: seeds, temperatures, top-p/top-k, token budgets, counts, and the paths a run will write.

Every check refuses (ConfigError with the range and the value given); none clamps or rounds silently. The
ranges are the ones every front end can hold: the GUI's seed box is a 32-bit integer, so the seed's range
is 0…2³¹−1 on the command line too. engine.core.config calls these from its dataclasses, engine.cli.arguments from
its argparse types. Pure Python: imports nothing but the errors (and os/pathlib for output paths).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from engine.core.errors import ConfigError

MAX_SEED = 2**31 - 1  # the GUI's seed box is a signed 32-bit integer; torch takes any of these
MIN_TEMPERATURE = 0.01  # below it, logits / T overflow float32 for large logits; the GUI keeps 2 decimals
MAX_TEMPERATURE = 5.0
MAX_TOP_K = 100_000  # beyond any vocabulary we load; the GUI's box holds it
MAX_NEW_TOKENS = 1_000_000
MAX_COUNT = 1_000_000  # --limit, --context and other sizes: beyond it is a typo, not a plan
MIN_TRAIN_MINUTES, MAX_TRAIN_MINUTES = 0.5, 24 * 60  # a `drafter train` budget (the CLI's and the GUI's)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value, low: int, high: int) -> int:
    """An integer from `low` to `high` inclusive."""
    if not _is_int(value) or not low <= value <= high:
        raise ConfigError(f"{name} must be a whole number from {low:,} to {high:,}, got {_shown(value)}")
    return value


def check_float(name: str, value, low: float, high: float, *, low_open: bool = False) -> float:
    """A finite number in [low, high] ((low, high] with low_open)."""
    if _is_int(value):
        value = float(value)
    bracket = "(" if low_open else "["
    if not isinstance(value, float) or not math.isfinite(value) \
            or (value <= low if low_open else value < low) or value > high:
        raise ConfigError(f"{name} must be in {bracket}{low:g}, {high:g}], got {_shown(value)}")
    return value


def check_seed(seed) -> int | None:
    """None (random) or a whole number from 0 to MAX_SEED."""
    return None if seed is None else check_int("seed", seed, 0, MAX_SEED)


def check_temperature(temperature) -> float:
    """0 (greedy) or from MIN_TEMPERATURE to MAX_TEMPERATURE; a tiny positive value is refused, not made 0."""
    value = float(temperature) if _is_int(temperature) else temperature
    if not isinstance(value, float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"temperature must be ≥ 0 (0 is greedy) and finite, got {_shown(temperature)}")
    if 0 < value < MIN_TEMPERATURE or value > MAX_TEMPERATURE:
        raise ConfigError(f"temperature must be 0 (greedy) or from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}, "
                          f"got {value:g}")
    return value


def check_top_p(top_p) -> float:
    return check_float("top-p", top_p, 0.0, 1.0, low_open=True)


def check_top_k(top_k) -> int:
    return check_int("top-k (0 turns it off)", top_k, 0, MAX_TOP_K)


def check_train_minutes(minutes: float, name: str = "minutes") -> float:
    """A drafter-training time budget in minutes; `name` is the option as the user knows it."""
    if not MIN_TRAIN_MINUTES <= minutes <= MAX_TRAIN_MINUTES:
        raise ConfigError(f"{name} must be from {MIN_TRAIN_MINUTES:g} to {MAX_TRAIN_MINUTES}, got {minutes:g}")
    return minutes


def check_max_new_tokens(max_new_tokens) -> int:
    if _is_int(max_new_tokens) and max_new_tokens < 1:
        raise ConfigError(f"max new tokens must be ≥ 1, got {max_new_tokens}")
    return check_int("max new tokens", max_new_tokens, 1, MAX_NEW_TOKENS)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def parse_int(text: str) -> int:
    """argparse type: a whole number, with a one-line error (no float, no 1e3, no 80-digit surprise)."""
    import argparse
    stripped = str(text).strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not digits.isascii() or not digits.isdigit() or len(digits) > 30:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {_shown(text)}")
    return int(stripped)


def parse_float(text: str) -> float:
    """argparse type: a finite number (nan, inf and numbers beyond float's range are refused here)."""
    import argparse
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {_shown(text)}")
    return value


def check_output_path(path: str | os.PathLike, what: str) -> Path:
    """A file a run will write (--json, --screenshot, an export): its folder exists and is writable and the
    path is not a folder, checked before the work starts. Returns the path."""
    target = Path(path).expanduser()
    if str(path).strip() == "":
        raise ConfigError(f"{what}: the file name is empty")
    if target.is_dir():
        raise ConfigError(f"{what}: {target} is a folder; give a file name")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        state = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(f"{what}: {folder} {state}")
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"{what}: {target} is not writable")
    import tempfile
    try:  # the one sure test (root passes os.access, a read-only mount does not): create a file there
        handle, probe = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write in the folder {folder} ({exc.strerror or exc})") from None
    return target


def write_text_atomic(path: str | os.PathLike, text: str, mode: int = 0o644) -> None:
    """Write a whole file or nothing: a temporary file beside it, then one rename (no half-written file)."""
    import tempfile
    target = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def decode_argument(text: str) -> tuple[str, bool]:
    """Text from argv as valid Unicode: bytes that aren't UTF-8 arrive as lone surrogates
    (surrogateescape); they become U+FFFD. Returns (text, whether anything was replaced)."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogateescape") if _escapable(text) else text.encode("utf-8", "replace")
        return raw.decode("utf-8", "replace"), True


def _escapable(text: str) -> bool:
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


__all__ = ["check_int", "check_float", "check_seed", "check_temperature", "check_top_p", "check_top_k",
           "check_max_new_tokens", "check_output_path", "write_text_atomic", "decode_argument", "parse_int",
           "parse_float", "MAX_SEED", "MIN_TEMPERATURE", "MAX_TEMPERATURE", "MAX_TOP_K", "MAX_NEW_TOKENS",
           "MAX_COUNT"]
