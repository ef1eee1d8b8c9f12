"""``python -m autotune.export``."""

import sys

from autotune.cli.export import main

sys.exit(main())
