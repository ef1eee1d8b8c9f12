"""``python -m autotune.trial``."""

import sys

from autotune.cli.trial import main

sys.exit(main())
