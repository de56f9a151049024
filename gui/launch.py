"""The `specscope` command (console script and desktop bundle): the engine's commands go to engine.cli.main, the
window's to gui.app and gui.benchmark.

`specscope generate | bench | models …`, `--help` and `--version` run engine.cli.main.main, which imports no Qt,
so they work where the Qt libraries are missing. `specscope` alone, `specscope gui …` and `specscope --option …`
open the window (gui.app.main); `specscope bench-gui …` measures it (gui.benchmark.main). Qt is imported
only on those paths, after the command is known. Touches nothing itself: it only picks the front end.
"""

from __future__ import annotations

import sys
from typing import Sequence

# the window's commands, listed in `specscope --help` beside the engine's (engine.cli.main never imports gui)
WINDOW_COMMANDS = {
    "gui": "open the chat window (the default)",
    "bench-gui": "measure what the visualiser costs",
}
_ENGINE_OPTIONS = ("-h", "--help", "--version")


def opens_window(argv: Sequence[str]) -> bool:
    """No command, `gui`, or options for the window (`specscope --model X`) open the chat window."""
    return not argv or argv[0] == "gui" or (argv[0].startswith("-") and argv[0] not in _ENGINE_OPTIONS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `specscope` with `argv` (without the program name); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if opens_window(argv):
        from gui.app import main as window_main

        return window_main(argv[1:] if argv and argv[0] == "gui" else argv)
    if argv[0] == "bench-gui":
        from gui.benchmark import main as bench_gui_main

        return bench_gui_main(argv[1:])
    from engine.cli.main import main as engine_main

    return engine_main(argv, other_commands=WINDOW_COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
