"""``python -m autotune.bench_search`` (the command lives in :mod:`autotune.search.benchmark.command`)."""

import sys

from autotune.search.benchmark.command import main

if __name__ == "__main__":
    sys.exit(main())
