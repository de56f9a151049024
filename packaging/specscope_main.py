"""Entry point of the frozen bundle (PyInstaller): the same `specscope` command as the console script."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()
    from engine.cli import main

    sys.exit(main())
