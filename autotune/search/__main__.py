"""``python -m autotune.search``."""

import sys

from autotune.cli.search import main

sys.exit(main())
