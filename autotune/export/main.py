"""``python -m autotune.export`` (``autotune export``): the command line of the export.

The single winner's launch is :mod:`autotune.export.launch_command`'s, the per-level exports are
:mod:`autotune.export.level_exports`' (which builds on the former); this module sits above both.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from autotune import command_line as cli
from autotune.errors import AutotuneError
from autotune.export import level_exports
from autotune.export.launch_command import (
    FORMATS,
    NothingToExport,
    choose,
    provenance,
    render,
    search_default,
    winner_spec,
)
from autotune.tracking.tracker import Tracker


def main(argv: list[str] | None = None) -> int:
    """``python -m autotune.export --name NAME [--run-id ID] [--format sh|yaml|json | --json] [-o FILE]``."""
    parser = cli.command_parser(
        "python -m autotune.export",
        "Write the winning launch command of a search, checked by SGLang's parser. "
                    "The winner is the best confirmed feasible trial by the search's objective "
                    "(else the best feasible one; the no-speculation baseline when nothing beats "
                    "it) of the newest search run, or of --run-id.",
        examples=["python -m autotune.export --name demo --format sh",
                  "python -m autotune.export --name demo --format yaml -o winner.yaml",
                  "python -m autotune.export --name demo --json -o winner.json",
                  "python -m autotune.export --name levels --per-level -o per-level.json",
                  "python -m autotune.export --name levels --adaptive-config adaptive.json -o launch.sh"])
    parser.add_argument("--name", required=True, help="search name (the MLflow experiment)")
    parser.add_argument("--run-id", help="a search run to choose within, or a trial run to export as is")
    parser.add_argument("--format", choices=FORMATS,
                        help="sh (default): export lines + command; yaml: SGLang --config file; json: argv "
                             "and env (what --json prints)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: the store under <root>/mlruns)")
    parser.add_argument("--root", help="project directory of the local store (default: the working directory)")
    parser.add_argument("--strip-metrics", action="store_true",
                        help="drop --enable-metrics and SGLANG_ENABLE_METRICS_DEVICE_TIMER (kept by default: "
                             "the numbers were measured with them)")
    parser.add_argument("--host", help="bind address of the exported server (default: the trial's)")
    parser.add_argument("--port", type=int, help="port of the exported server (default: SGLang's)")
    levels = parser.add_mutually_exclusive_group()
    levels.add_argument("--per-level", action="store_true",
                        help="a search with workload.concurrency: [..] or request_rate: [..]: the best "
                             "config at each level, "
                             "its figures there and its launch, as JSON (--format does not apply)")
    levels.add_argument("--adaptive-config", metavar="FILE",
                        help="a search with concurrency levels (not rates: the table is keyed by batch "
                             "size): write SGLang's per-batch-size adaptive "
                             "speculation table to FILE (read back by SGLang's loader) and export the "
                             "launch that uses it (sh; --format does not apply)")
    cli.add_output(parser, record="the launch (argv, env and where it came from; --format json)")
    args = parser.parse_args(argv)
    if args.json and args.format not in (None, "json"):
        return _failed(ValueError(f"--json prints the json format; it does not go with --format {args.format}"))
    if args.per_level or args.adaptive_config:
        return _main_levels(args)
    fmt = "json" if args.json else args.format or "sh"
    try:
        tracker = Tracker(args.name, root=args.root, tracking_uri=args.tracking_uri).connect(create=False)
        winner = choose(tracker, run_id=args.run_id)
        spec = winner_spec(tracker, winner, strip_metrics=args.strip_metrics, host=args.host, port=args.port)
        default = search_default(tracker, winner)
        text = render(spec, fmt, winner=winner, search=args.name, default=default)
    except (AutotuneError, ValueError) as exc:
        return _failed(exc)
    for line in provenance(winner, search=args.name, spec=spec, default=default):
        print(line, file=sys.stderr)
    return cli.emit(args, text=text, record=json.loads(text) if fmt == "json" else None, what=fmt,
                    executable=fmt == "sh")


def _failed(exc: BaseException) -> int:
    """Say why an export could not be made; exit 1 when the search has nothing to export, 2 for
    bad input (the one exit-code table of every command)."""
    print(f"error: {exc}", file=sys.stderr)
    return cli.NO_RESULT if isinstance(exc, NothingToExport) else cli.BAD_INPUT


def _main_levels(args: Any) -> int:
    """``--per-level`` and ``--adaptive-config``: the per-level exports (:mod:`autotune.export.level_exports`)."""
    if args.adaptive_config and args.json:
        return _failed(ValueError("--json does not go with --adaptive-config: its export is a launch script"))
    spec_kw = {"strip_metrics": args.strip_metrics, "host": args.host, "port": args.port}
    try:
        tracker = Tracker(args.name, root=args.root, tracking_uri=args.tracking_uri).connect(create=False)
        if args.per_level:
            text = level_exports.per_level_json(tracker, run_id=args.run_id, **spec_kw)
        else:
            text = level_exports.adaptive_export(tracker, args.adaptive_config, run_id=args.run_id, **spec_kw)
    except (AutotuneError, ValueError) as exc:
        return _failed(exc)
    if args.per_level:
        return cli.emit(args, text=text, record=json.loads(text), what="the per-level table")
    return cli.emit(args, text=text, record=None, what="the adaptive launch", executable=True)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
