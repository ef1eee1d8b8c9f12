"""``autotune store-copy``: a working copy of an MLflow sqlite store brought back from another machine.

A store written on a GPU machine records absolute artifact locations of that machine; the copy
made here points each experiment (and its runs) at the folder of the same name under the store's
``mlruns/artifacts`` or ``artifacts``, so that ``autotune export`` can read its launches here; the
original is never written. The copy is :func:`autotune.tracking.store_copy.relocated_copy`'s; this
module is its command line (also ``python -m autotune.tracking.store_copy``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from autotune import command_line as cli
from autotune.errors import ConfigError
from autotune.tracking.store_copy import find_db, relocated_copy

#: The command's name when it is run as a module (``autotune store-copy`` passes its own).
PROG = "python -m autotune.tracking.store_copy"


@dataclass(frozen=True, kw_only=True)
class StoreCopyArgs:
    """``autotune store-copy``'s command line.

    Attributes:
        store: The folder holding ``mlflow.db``, or the file.
        into: The folder of the working copy.
        json: Print the result as JSON.
        output: Write the result to this file instead of stdout.
    """

    store: Path
    into: Path
    json: bool = False
    output: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune store-copy``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(prog, __doc__ or "", examples=[
        "{prog} --store brought-back/mlruns --into /tmp/store",
        "autotune export --name NAME --tracking-uri sqlite:////tmp/store/mlflow.db"])
    parser.add_argument("--store", required=True, type=Path, help="folder holding mlflow.db, or the file")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--into", type=Path, metavar="DIR", help="folder for the working copy")
    where.add_argument("--out", dest="into", type=Path, metavar="DIR", help="earlier spelling of --into, kept")
    cli.add_output(parser, record="{tracking_uri, db}")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> StoreCopyArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`StoreCopyArgs`; exits 2 on a bad flag, as argparse does."""
    return StoreCopyArgs(**vars(build_parser(prog).parse_command(argv)))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune store-copy --store DIR_OR_DB --into DIR``: the copy's tracking URI."""
    args = parse_args(argv, prog=prog)
    try:
        copy = relocated_copy(db=find_db(store=args.store), into=args.into)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    uri = f"sqlite:///{copy.resolve()}"
    return cli.emit(args, text=f"tracking URI: {uri}", record={"tracking_uri": uri, "db": str(copy.resolve())})
