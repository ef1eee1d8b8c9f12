"""``python -m autotune.trial``."""

import sys

from autotune.trial.measure import main

sys.exit(main())
