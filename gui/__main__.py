"""`python -m gui [gui options]`: the same as `specscope gui`."""

import sys

from gui.app import main

sys.exit(main())
