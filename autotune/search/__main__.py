"""``python -m autotune.search``."""

import sys

from autotune.search.run import main

sys.exit(main())
