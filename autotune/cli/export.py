"""``autotune export`` (``python -m autotune.export``): the winning launch command of a search.

The single winner's launch is :mod:`autotune.export.launch_command`'s, the per-level exports are
:mod:`autotune.export.level_exports`'; this module is their command line.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass

from autotune import command_line as cli
from autotune.errors import AutotuneError
from autotune.export import level_exports
from autotune.export.launch_command import (
    FORMATS,
    TAG_FLAG_TABLE,
    TAG_WINNER_MARGIN,
    NothingToExport,
    choose,
    default_of,
    provenance,
    render,
    search_tags,
    winner_spec,
)
from autotune.sglang.flags import using_flags
from autotune.sglang.saved_flags import installed_table
from autotune.tracking.search_reader import SearchReader, open_reader

#: The command's name when it is run as a module (``autotune export`` passes its own).
PROG = "python -m autotune.export"


@dataclass(frozen=True, kw_only=True)
class ExportArgs:
    """``autotune export``'s command line.

    Attributes:
        name: The search's name (its MLflow experiment).
        run_id: A search run to choose within, or a trial run to export as is.
        format: ``sh``, ``yaml`` or ``json`` (None: ``sh``, or ``json`` with ``--json``).
        tracking_uri: The MLflow store (None: the one under ``root``'s ``mlruns/``).
        root: The project directory of the local store (None: the working directory).
        strip_metrics: Drop the metrics flags the trials were measured with.
        host: Bind address of the exported server (None: the trial's).
        port: Port of the exported server (None: SGLang's).
        per_level: The best config at each level, as JSON.
        adaptive_config: Write SGLang's adaptive speculation table to this file.
        json: Print the launch as JSON.
        output: Write the result to this file instead of stdout.
        via_mlflow: Read a local sqlite store through MLflow's client too (slower, same answer).
    """

    name: str
    run_id: str | None = None
    format: str | None = None
    tracking_uri: str | None = None
    root: str | None = None
    strip_metrics: bool = False
    host: str | None = None
    port: int | None = None
    per_level: bool = False
    adaptive_config: str | None = None
    json: bool = False
    output: str | None = None
    via_mlflow: bool = False


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune export``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(
        prog,
        "Write the winning launch command of a search, checked by SGLang's parser. "
        "The winner is the best confirmed feasible trial by the search's objective "
        "(else the best feasible one; the no-speculation baseline when nothing beats "
        "it) of the newest search run, or of --run-id.",
        examples=["{prog} --name demo --format sh",
                  "{prog} --name demo --format yaml -o winner.yaml",
                  "{prog} --name demo --json -o winner.json",
                  "{prog} --name levels --per-level -o per-level.json",
                  "{prog} --name levels --adaptive-config adaptive.json -o launch.sh"])
    parser.add_argument("--name", required=True, help="search name (the MLflow experiment)")
    parser.add_argument("--run-id", help="a search run to choose within, or a trial run to export as is")
    parser.add_argument("--format", choices=FORMATS,
                        help="sh (default): export lines + command; yaml: SGLang --config file; json: argv "
                             "and env (what --json prints)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: the store under <root>/mlruns)")
    parser.add_argument("--root", help="project directory of the local store (default: the working directory)")
    parser.add_argument("--via-mlflow", action="store_true",
                        help="read a local sqlite store through MLflow's client as well (by default it is read "
                             "directly, without importing MLflow: seconds faster, the same answer; a tracking "
                             "server is always read through MLflow)")
    parser.add_argument("--strip-metrics", action="store_true",
                        help="drop --enable-metrics and SGLANG_ENABLE_METRICS_DEVICE_TIMER (kept by default: "
                             "the numbers were measured with them)")
    parser.add_argument("--host", help="bind address of the exported server (default: the trial's)")
    parser.add_argument("--port", type=cli.port, help="port of the exported server, 1 to 65535 (default: SGLang's)")
    levels = parser.add_mutually_exclusive_group()
    levels.add_argument("--per-level", action="store_true",
                        help="a search with workload.concurrency: [..] or request_rate: [..]: the best "
                             "config at each level, "
                             "its figures there and its launch, as JSON (--format does not apply)")
    parser.writes(levels.add_argument("--adaptive-config", metavar="FILE",
                        help="a search with concurrency levels (not rates: the table is keyed by batch "
                             "size): write SGLang's per-batch-size adaptive "
                             "speculation table to FILE (read back by SGLang's loader) and export the "
                             "launch that uses it (sh; --format does not apply)"))
    cli.add_output(parser, record="the launch (argv, env and where it came from; --format json)")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> ExportArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`ExportArgs`; exits 2 on a bad flag, as argparse does."""
    return ExportArgs(**vars(build_parser(prog).parse_command(argv)))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune export --name NAME [--run-id ID] [--format sh|yaml|json | --json] [-o FILE]``."""
    args = parse_args(argv, prog=prog)
    if args.json and args.format not in (None, "json"):
        return _failed(ValueError(f"--json prints the json format; it does not go with --format {args.format}"))
    if args.per_level or args.adaptive_config:
        return _main_levels(args)
    fmt = "json" if args.json else args.format or "sh"
    try:
        reader = open_reader(args.name, root=args.root, tracking_uri=args.tracking_uri, fast=not args.via_mlflow)
        winner = choose(reader, run_id=args.run_id)
        tags = search_tags(reader, winner)
        default = default_of(tags)
        # The search's margin is of the winner it chose: not of a run picked by --run-id.
        margin = tags.get(TAG_WINNER_MARGIN) if args.run_id is None else None
        # SGLang's flags as the search's trials were checked against them, when that is the
        # installed SGLang: the same check without importing SGLang again (seconds).
        table = installed_table(tags.get(TAG_FLAG_TABLE))
        with using_flags(table) if table is not None else contextlib.nullcontext():
            spec = winner_spec(reader, winner, strip_metrics=args.strip_metrics, host=args.host, port=args.port)
            text = render(spec, fmt, winner=winner, search=args.name, default=default, margin=margin)
    except (AutotuneError, ValueError) as exc:
        return _failed(exc)
    # The sh and yaml exports carry the provenance in their header: on a terminal it is shown
    # there, once; into a file or a pipe it goes to stderr too, for the person running it.
    if fmt == "json" or args.output is not None or not sys.stdout.isatty():
        for line in provenance(winner, search=args.name, spec=spec, default=default, margin=margin):
            print(line, file=sys.stderr)
    return cli.emit(args, text=text, record=json.loads(text) if fmt == "json" else None, what=fmt,
                    executable=fmt == "sh")


def _failed(exc: BaseException) -> int:
    """Say why an export could not be made; exit 1 when the search has nothing to export, 2 for
    bad input (the one exit-code table of every command)."""
    print(f"error: {exc}", file=sys.stderr)
    return cli.NO_RESULT if isinstance(exc, NothingToExport) else cli.BAD_INPUT


def _main_levels(args: ExportArgs) -> int:
    """``--per-level`` and ``--adaptive-config``: the per-level exports (:mod:`autotune.export.level_exports`)."""
    if args.adaptive_config and args.json:
        return _failed(ValueError("--json does not go with --adaptive-config: its export is a launch script"))
    adaptive = args.adaptive_config  # else --per-level: the two are exclusive, and one is given
    try:
        reader: SearchReader = open_reader(args.name, root=args.root, tracking_uri=args.tracking_uri,
                                           fast=not args.via_mlflow)
        if adaptive is None:
            text = level_exports.per_level_json(reader, run_id=args.run_id, strip_metrics=args.strip_metrics,
                                                host=args.host, port=args.port)
        else:
            text = level_exports.adaptive_export(reader, adaptive, run_id=args.run_id,
                                                 strip_metrics=args.strip_metrics, host=args.host, port=args.port)
    except (AutotuneError, ValueError) as exc:
        return _failed(exc)
    if adaptive is None:
        return cli.emit(args, text=text, record=json.loads(text), what="the per-level table")
    return cli.emit(args, text=text, record=None, what="the adaptive launch", executable=True)

