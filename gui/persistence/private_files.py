"""Owner-only files for what holds chat text (the history database and the files beside it, its locks, exports):
created under umask 077 (engine.host.owner_only) and chmod 0600 after. Pure Python; touches only the modes of the
files it is given.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE = stat.S_IRUSR | stat.S_IWUSR


def make_private(*paths: Path) -> None:
    """chmod 0600 the files of `paths` that exist (POSIX; elsewhere a no-op)."""
    if os.name != "posix":
        return
    for path in paths:
        try:
            if path.exists():
                os.chmod(path, PRIVATE)
        except OSError:
            pass
