"""``python -m autotune.bench_search``: the sampler benchmark, which lives in the source checkout.

The benchmark (its peers' strategies, landscapes and recorded H200 data) is research code, kept out
of the package in the repository's ``benchmarks/search/`` (``python -m benchmarks.search``). This
entry runs it when that folder is importable (a checkout, run from its root) and otherwise says so
in one line, exit 2: an installed wheel does not carry it. It is the one autotune module that may
import ``benchmarks`` (``tests/unit/test_layout.py``).
"""

from __future__ import annotations

import sys

from autotune import command_line as cli

NEEDS_CHECKOUT = ("bench_search needs a source checkout of autotune: run it from the repository's root "
                  "(python -m benchmarks.search); the installed package does not carry the benchmark")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark's command with ``argv``, or say that it needs a checkout (exit 2)."""
    try:
        from benchmarks.search.command import main as bench_main
    except ModuleNotFoundError as exc:
        # Only a missing benchmarks package means "no checkout"; a module missing inside it is a bug.
        if exc.name not in ("benchmarks", "benchmarks.search", "benchmarks.search.command"):
            raise
        print(f"error: {NEEDS_CHECKOUT}", file=sys.stderr)
        return cli.BAD_INPUT
    return bench_main(argv)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
