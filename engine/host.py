"""This machine: how many CPU threads the engine's compute uses (all cores but one, left to the interface or
the terminal), what its CPU computes natively (bfloat16 in hardware?), which GPUs torch sees, how much memory
is free on a device, where SpecScope's caches live (`cache_root`) and where the user's own data lives
(`data_root`, and the chat history's database in it, `history_path`).

A leaf module (imports nothing of the engine): anything may ask it. Touches torch's thread setting
(torch.set_num_threads) when told to, and reads /proc/cpuinfo, /proc/meminfo, the cgroup limit, the CUDA
driver's free memory and the environment (SPECSCOPE_CACHE_DIR, SPECSCOPE_DATA_DIR) when asked; nothing at import
time.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator


def engine_threads() -> int:
    """Threads for the engine: (cores − 1), at least 1."""
    return max(1, (os.cpu_count() or 2) - 1)


def limit_torch_threads(import_torch: bool = True) -> int | None:
    """Set torch to engine_threads() threads; call it on the thread that runs the engine. With
    import_torch=False it does nothing until something else has imported torch (returns None then)."""
    if "torch" not in sys.modules and not import_torch:
        return None
    import torch

    n = engine_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


# ---- CPU flags: read once per call from /proc/cpuinfo (Linux); elsewhere nothing is native
CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # the kernel's names for AVX512-BF16 and AMX-BF16


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The feature flags of the first CPU listed (every core of a machine shares them); empty where the file
    is missing or unreadable."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):  # x86 says flags, ARM says Features
            return frozenset(value.split())
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether the CPU computes bfloat16 products in hardware (AVX512-BF16 or AMX-BF16)."""
    return bool(BF16_FLAGS & (cpu_flags() if flags is None else flags))


# ---- where SpecScope keeps derived files (converted models, cached facts, trained heads, verify costs)

def cache_root() -> Path:
    """Where SpecScope keeps derived files (SPECSCOPE_CACHE_DIR overrides, e.g. in tests)."""
    override = os.environ.get("SPECSCOPE_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs
    return Path(platformdirs.user_cache_dir("specscope", appauthor=False))


DATA_DIR_VARIABLE = "SPECSCOPE_DATA_DIR"


_DATA_ROOT_HERE: ContextVar[Path | None] = ContextVar("specscope_data_root", default=None)


@contextmanager
def data_root_set_to(folder: str | os.PathLike) -> Iterator[Path]:
    """`data_root()` is `folder` within the block, in this thread alone (a benchmark's throwaway store): the
    environment, other threads and child processes never see it."""
    token = _DATA_ROOT_HERE.set(Path(folder))
    try:
        yield Path(folder)
    finally:
        _DATA_ROOT_HERE.reset(token)


def data_root() -> Path:
    """Where SpecScope keeps the user's own data (the chat history, what suffix decoding learned): the folder
    of an enclosing data_root_set_to (a benchmark's own store), else SPECSCOPE_DATA_DIR (tests), else the
    platform's."""
    here = _DATA_ROOT_HERE.get()
    if here is not None:
        return here
    override = os.environ.get(DATA_DIR_VARIABLE)
    if override:
        return Path(override).expanduser()
    import platformdirs
    return Path(platformdirs.user_data_dir("specscope", appauthor=False))


HISTORY_FILE = "history.sqlite3"  # the chat history's database, in the data folder


@contextmanager
def owner_only() -> Iterator[None]:
    """Files created inside are the user's alone (umask 077): what holds chat text in the data folder (the
    history, what suffix decoding learned, exports), SQLite's own -wal/-shm files and copies included."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def history_path() -> Path:
    """The chat history's database: the GUI writes it, drafter training (--from-history) reads it."""
    return data_root() / HISTORY_FILE


# ---- GPUs and memory

def mps_available() -> bool:
    """Whether torch can run on Apple's Metal (MPS) here."""
    import torch
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def free_memory(device: str = "cpu") -> int | None:
    """Bytes free on `device` now: CUDA from the driver, CPU (and MPS's unified memory) from the operating
    system (MemAvailable, within a cgroup limit if any). None when unknown."""
    kind = str(device).split(":")[0]
    if kind == "cuda":
        import torch
        if not torch.cuda.is_available():
            return None
        index = torch.device(device).index
        free, _total = torch.cuda.mem_get_info(index if index is not None else torch.cuda.current_device())
        return int(free)
    if kind == "mps":
        import torch
        mps = getattr(torch, "mps", None)
        try:
            return int(mps.recommended_max_memory() - mps.driver_allocated_memory())
        except Exception:  # older torch: unified memory, so the system's figure is the right one
            pass
    return _system_available_memory()


def _system_available_memory() -> int | None:
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None and sys.platform == "win32":
        available = _windows_available_memory()
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    limit = _cgroup_room()
    if limit is not None:
        available = limit if available is None else min(available, limit)
    return available


def _cgroup_room() -> int | None:
    """Room left under a cgroup v2 memory limit (containers), or None without one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def _windows_available_memory() -> int | None:
    import ctypes

    class MemoryStatus(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                    ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                    ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                    ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                    ("sullAvailExtendedVirtual", ctypes.c_ulonglong)]
    status = MemoryStatus()
    status.dwLength = ctypes.sizeof(MemoryStatus)
    try:
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
            return int(status.ullAvailPhys)
    except (AttributeError, OSError):
        pass
    return None


__all__ = ["engine_threads", "limit_torch_threads", "cpu_flags", "native_bf16", "BF16_FLAGS", "cache_root",
           "mps_available", "free_memory"]
