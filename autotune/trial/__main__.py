"""``python -m autotune.trial``."""

import sys

from autotune.trial.command import main

sys.exit(main())
