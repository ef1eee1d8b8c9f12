"""``python -m autotune.export``."""

import sys

from autotune.export.main import main

sys.exit(main())
