"""``python -m autotune.export``."""

import sys

from autotune.export.command import main

sys.exit(main())
