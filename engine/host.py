"""This machine: how many CPU threads the engine's compute uses (all cores but one, left to the interface or
the terminal) and what its CPU computes natively (bfloat16 in hardware?).

A leaf module (imports nothing of the engine): anything may ask it. Touches torch's thread setting
(torch.set_num_threads) when told to and reads /proc/cpuinfo when asked; nothing at import time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


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


__all__ = ["engine_threads", "limit_torch_threads", "cpu_flags", "native_bf16", "BF16_FLAGS"]
