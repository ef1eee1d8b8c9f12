"""``python -m autotune.export``."""

import sys

from autotune import command_line as cli
from autotune.export.main import main

sys.exit(cli.run_main(main))
