"""``python -m autotune.trial``."""

import sys

from autotune import command_line as cli
from autotune.cli.trial import main

sys.exit(cli.run_main(main))
