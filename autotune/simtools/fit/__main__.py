"""``python -m autotune.simtools.fit``."""

import sys

from autotune.simtools.fit.command import main

sys.exit(main())
