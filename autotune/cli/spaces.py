"""``autotune spaces``: the example spaces shipped inside the package, and ``--space NAME`` for them.

It lists them; ``--path NAME`` prints one's file, to copy and edit. The spaces are
:mod:`autotune.space.packaged`'s; this module is their command line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from autotune import command_line as cli
from autotune.space.packaged import EXAMPLES, bare_name, is_benchmark, names, packaged

#: The command's name when it is run as a module (``autotune spaces`` passes its own).
PROG = "python -m autotune.space.packaged"


@dataclass(frozen=True, kw_only=True)
class SpacesArgs:
    """``autotune spaces``'s command line.

    Attributes:
        path: Print the file of this packaged space instead of the list.
        json: Print the result as JSON.
        output: Write the result to this file instead of stdout.
    """

    path: str | None = None
    json: bool = False
    output: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune spaces``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(
        prog, __doc__ or "",
        examples=["{prog}", "autotune search --space demo",
                  "cp \"$({prog} --path kimi-k2.5-eagle3-tp8)\" my-space.yaml", "{prog} --json"])
    parser.add_argument("--path", metavar="NAME", help="print the file of the packaged space NAME")
    cli.add_output(parser, record="{spaces: [{name, description, path, benchmark}], folder} "
                                  "(with --path: {name, path})")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> SpacesArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`SpacesArgs`; exits 2 on a bad flag, as argparse does."""
    return SpacesArgs(**vars(build_parser(prog).parse_command(argv)))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune spaces [--path NAME]``."""
    args = parse_args(argv, prog=prog)
    if args.path is not None:
        name = bare_name(args.path)
        if name is None or name not in packaged():
            print(f"error: --path: no packaged space {args.path!r}; packaged spaces: "
                  f"{', '.join(names())}", file=sys.stderr)
            return cli.BAD_INPUT
        path = packaged()[name][0]
        return cli.emit(args, text=str(path), record={"name": name, "path": str(path)})
    width = max(len(n) for n in names())
    listed = [(name, f"{name:<{width}}  {description}") for name, (_, description) in packaged().items()]
    rows = [row for name, row in listed if not is_benchmark(name)]
    bench = [row for name, row in listed if is_benchmark(name)]
    text = "\n".join(rows)
    if bench:
        text += ("\n\nBenchmark spaces (the sampler benchmark's landscapes, python -m autotune.bench_search; "
                 "kept as benchmarked, not starting points for tuning):\n" + "\n".join(bench))
    text += f"\n\nfiles in {EXAMPLES}; use one with --space NAME, or copy it (--path NAME) to edit"
    record = {"spaces": [{"name": name, "description": description, "path": str(path),
                          "benchmark": is_benchmark(name)}
                         for name, (path, description) in packaged().items()], "folder": str(EXAMPLES)}
    return cli.emit(args, text=text, record=record)
