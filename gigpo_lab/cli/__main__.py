"""``python -m gigpo_lab.cli <command> …``: the console script without its installed wrapper."""

import sys

from gigpo_lab.cli import main

sys.exit(main())
