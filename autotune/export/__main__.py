"""``python -m autotune.export``."""

import sys

from autotune import command_line as cli
from autotune.cli.export import main

sys.exit(cli.run_main(main))
