"""``python -m autotune.search``."""

import sys

from autotune import command_line as cli
from autotune.cli.search import main

sys.exit(cli.run_main(main))
