"""``python -m autotune.simtools.fit``."""

import sys

from autotune.cli.fit import main

sys.exit(main())
