"""What this machine's CPU computes natively, read from its flags: whether bfloat16 matrix work runs in
hardware (AVX512-BF16 or AMX), which makes bf16 the faster dtype on the CPU (engine.sources' resolver asks).

Reads /proc/cpuinfo (Linux) once per call and nothing else; on a system without it nothing is native, so
the resolver keeps float32 there. No torch, no Qt.
"""

from __future__ import annotations

from pathlib import Path

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


__all__ = ["cpu_flags", "native_bf16", "BF16_FLAGS"]
