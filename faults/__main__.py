"""``python -m faults --cycles N``."""

import sys

from faults.run import cli

sys.exit(cli())
