"""``autotune sync``: write to MLflow what a search spooled but MLflow did not take while it ran.

What each run folder gave goes to stderr as it is written; the result (what still waits) to
stdout. Exit codes: 0 when MLflow holds everything, 1 when records are still pending (the store
still fails, or a spool line could not be read: each is named with its file and line), 2 for bad
input. The replay is :func:`autotune.search.sync.sync_search`; this module
is its command line (also ``python -m autotune.search.sync``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from autotune import command_line as cli
from autotune.errors import AutotuneError
from autotune.search.sync import sync_search

#: The command's name when it is run as a module (``autotune sync`` passes its own).
PROG = "python -m autotune.search.sync"


@dataclass(frozen=True, kw_only=True)
class SyncArgs:
    """``autotune sync``'s command line.

    Attributes:
        name: The search's name.
        root: The directory the search ran from.
        tracking_uri: The MLflow store to write to (None: the search's own).
        json: Print the result as JSON.
        output: Write the result to this file instead of stdout.
    """

    name: str
    root: str = "."
    tracking_uri: str | None = None
    json: bool = False
    output: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune sync``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(prog, __doc__ or "", examples=[
        "{prog} --name demo", "{prog} --name demo --tracking-uri http://127.0.0.1:5000 --json"])
    parser.add_argument("--name", required=True, help="the search name")
    parser.add_argument("--root", default=".", help="the directory the search ran from (default: here)")
    parser.add_argument("--tracking-uri", help="the MLflow store to write to (default: the search's own)")
    cli.add_output(parser, record="{name, pending: the records MLflow still lacks}")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> SyncArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`SyncArgs`; exits 2 on a bad flag, as argparse does."""
    return SyncArgs(**vars(build_parser(prog).parse_command(argv)))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune sync --name NAME [--root DIR] [--tracking-uri URI]``."""
    args = parse_args(argv, prog=prog)
    try:
        done = sync_search(args.name, root=args.root, tracking_uri=args.tracking_uri, out=sys.stderr)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    if done.complete:
        text = f"MLflow holds every record of search {args.name!r}"
    elif done.pending:
        text = (f"{done.pending} record(s) of search {args.name!r} still wait for MLflow; run {prog} again "
                "when it answers")
    else:
        text = ""
    if done.unreadable:
        text += ("; " if text else "") + (f"{len(done.unreadable)} spool line(s) of search {args.name!r} could not "
                                          "be read, so MLflow may lack what they held (each named above)")
    return cli.emit(args, text=text, record={"name": args.name, "pending": done.pending,
                                             "unreadable": [str(b) for b in done.unreadable]},
                    code=cli.OK if done.complete else cli.NO_RESULT)
