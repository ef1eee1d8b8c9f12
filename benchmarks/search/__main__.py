"""``python -m benchmarks.search``: the sampler benchmark's command (:mod:`benchmarks.search.command`)."""

import sys

from benchmarks.search.command import main

if __name__ == "__main__":
    sys.exit(main())
