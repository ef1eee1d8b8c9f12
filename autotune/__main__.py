"""``autotune COMMAND [ARGS]`` (also ``python -m autotune``): every command of the tool under one name.

Each subcommand is a command of :mod:`autotune.cli`, given the rest of the arguments, with the
same flags, output and exit codes as its module entry: ``autotune search --space S`` is
``python -m autotune.search --space S``. Its usage lines name it as it was run (``autotune search``).
"""

from __future__ import annotations

import functools
import importlib
import sys
import textwrap
from pathlib import Path

from autotune import command_line as cli

#: Subcommand -> (the module whose ``main(argv)`` runs it, what it does).
COMMANDS: dict[str, tuple[str, str]] = {
    "search": ("autotune.cli.search", "run a search over a space (Ray Tune + Optuna + MLflow)"),
    "trial": ("autotune.cli.trial", "measure one config of a space and its baseline"),
    "export": ("autotune.cli.export", "the winning launch command of a search"),
    "repick": ("autotune.cli.repick", "rank a search's configs for another acceptance (predicted, no GPU)"),
    "acceptance": ("autotune.cli.acceptance", "a draft's measured per-position acceptance per prompt category"),
    "probe": ("autotune.cli.probe", "rank NCCL settings by all-reduce latency"),
    "evaluate": ("autotune.cli.evaluate", "the emulator's model of every config of a space, no servers"),
    "bench-search": ("autotune.cli.bench_search", "trials each search strategy needs (a source checkout)"),
    "sync": ("autotune.cli.sync", "write a search's spooled results to MLflow when it answers again"),
    "store-copy": ("autotune.cli.store_copy", "a brought-back MLflow store, readable here"),
    "spaces": ("autotune.cli.spaces", "the example spaces shipped with autotune (--space NAME)"),
}


def usage() -> str:
    """The list of subcommands, as ``--help`` prints it."""
    width = max(len(name) for name in COMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    return (f"usage: autotune COMMAND [ARGS]   (or python -m autotune COMMAND [ARGS])\n\n"
            f"commands:\n{rows}\n\n"
            "autotune COMMAND --help shows a command's own flags; autotune --version the versions.\n\n"
            f"output, the same for every command:\n{textwrap.indent(textwrap.fill(cli.CONVENTION, 86), '  ')}\n\n"
            "examples:\n"
            "  autotune search --space demo        # the packaged demo space, on the emulator\n"
            "  autotune search --space my-space.yaml --address auto\n"
            "  autotune spaces                     # the packaged spaces, by name\n"
            "  autotune search --space demo --json -o winner.json   # the summary as JSON, in a file")


def invoked_as() -> str:
    """How the user ran this dispatcher: ``python -m autotune``, else the console script's name
    (``autotune``), so that a subcommand's usage lines name it as it was typed."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "python -m autotune" if name in ("", "__main__.py", "-m", "-c") else name


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """Run the subcommand ``argv[0]`` with the rest; returns its exit code.

    Args:
        argv: The command line after the program's name (default: ``sys.argv[1:]``).
        prog: The dispatcher's name in usage lines (default: as it was run, :func:`invoked_as`).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return cli.BAD_INPUT
    name, rest = argv[0], argv[1:]
    if name in ("-h", "--help"):
        print(usage())
        return cli.OK
    if name == "--version":
        print(cli.version_text())
        return cli.OK
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; use one of {', '.join(COMMANDS)} "
              "(autotune --help lists them)", file=sys.stderr)
        return cli.BAD_INPUT
    module = importlib.import_module(COMMANDS[name][0])
    return cli.run_main(functools.partial(module.main, prog=f"{prog or invoked_as()} {name}"), rest)


if __name__ == "__main__":
    sys.exit(main())
