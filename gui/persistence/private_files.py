"""Owner-only files for what holds chat text (the history database and the files beside it, its locks, exports):
created under umask 077 and chmod 0600 after. Pure Python; touches only the modes of the files it is given.
"""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

PRIVATE = stat.S_IRUSR | stat.S_IWUSR


@contextmanager
def owner_only() -> Iterator[None]:
    """Files created inside are owner-only (umask 077): sqlite's own -wal/-shm files and copies included."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


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
