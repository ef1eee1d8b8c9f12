"""``python -m autotune.sim.fit``."""

import sys

from autotune.sim.fit.command import main

sys.exit(main())
