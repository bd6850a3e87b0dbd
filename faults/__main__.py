"""``python -m faults --cycles N [--workers N]``."""

import sys

from faults.run import cli

sys.exit(cli())
