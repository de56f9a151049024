"""How many CPU threads the engine's compute uses: all cores but one, left to the interface or the terminal.

A leaf module (imports nothing of the engine), so the backends and engine.runtime can both ask it. Touches
torch's thread setting (torch.set_num_threads) when told to; nothing at import time.
"""

from __future__ import annotations

import os
import sys


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


__all__ = ["engine_threads", "limit_torch_threads"]
