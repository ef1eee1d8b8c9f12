"""``python -m autotune.bench_search``: the module entry of ``autotune bench-search``
(:mod:`autotune.cli.bench_search`), the thin entry to the repository's sampler benchmark."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from autotune import command_line as cli
    from autotune.cli.bench_search import main

    sys.exit(cli.run_main(main))
