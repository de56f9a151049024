"""Entry point of the frozen bundle (PyInstaller): the same `specscope` command as the console script
(gui.launch: the engine's commands without Qt, the window's with it)."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()
    from gui.launch import main

    sys.exit(main())
