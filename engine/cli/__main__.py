"""`python -m engine.cli …`: the engine's commands without the GUI launcher."""

import sys

from engine.cli.main import main

sys.exit(main())
