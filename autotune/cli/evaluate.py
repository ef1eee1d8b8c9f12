"""``autotune evaluate``: what the emulator's model expects of every config of a space, no servers.

It prints what the model expects a trial of every config in a search space to measure: output
tok/s, accept length, phase profile, the baseline of its non-speculative group, speedup and
break-even accept length; a table, or with ``--json`` one JSON object (``configs``, and
``records``: one per config). With ``--optimum`` it prints only the best feasible config (the
baseline when nothing beats it). ``-o FILE`` writes either to FILE. The model is
:class:`autotune.simtools.evaluate.ModelEvaluator`; this module is its command line (also
``python -m autotune.simtools.evaluate``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from autotune import command_line as cli
from autotune.errors import AutotuneError
from autotune.simtools.evaluate import ModelEvaluator, render, workload_shape
from autotune.space.packaged import SPACE_HELP
from autotune.space.search_space import load_space

#: The command's name when it is run as a module (``autotune evaluate`` passes its own).
PROG = "python -m autotune.simtools.evaluate"


@dataclass(frozen=True, kw_only=True)
class EvaluateArgs:
    """``autotune evaluate``'s command line.

    Attributes:
        space: The space file, or a packaged space's name.
        profile: A built-in profile's name or a YAML path (None: the space's).
        optimum: Print only the best feasible config.
        concurrency: Overrides the workload's concurrency.
        timing: Print configs/s to stderr.
        json: Print the records as JSON.
        output: Write the result to this file instead of stdout.
    """

    space: str
    profile: str | None = None
    optimum: bool = False
    concurrency: int | None = None
    timing: bool = False
    json: bool = False
    output: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune evaluate``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(prog, __doc__ or "", examples=[
        "{prog} --space demo --optimum",
        "{prog} --space demo --json -o expected.json",
        "{prog} --space kimi-k2.5-eagle3-tp8-sim --profile my-profile.yaml"])
    parser.add_argument("--space", required=True, help=SPACE_HELP)
    parser.add_argument("--profile", help="built-in profile name or YAML path (default: the space's)")
    parser.add_argument("--optimum", action="store_true", help="print only the best feasible config")
    parser.add_argument("--concurrency", type=cli.positive_int, help="override the workload concurrency (1 or more)")
    parser.add_argument("--timing", action="store_true", help="print configs/s to stderr")
    cli.add_output(parser, record="{configs, records: one per config} (with --optimum: the best record)")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> EvaluateArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`EvaluateArgs`; exits 2 on a bad flag, as argparse does."""
    return EvaluateArgs(**vars(build_parser(prog).parse_command(argv)))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune evaluate --space S [--profile P] [--optimum] [--concurrency N]``."""
    args = parse_args(argv, prog=prog)
    try:
        space = load_space(args.space)
        shape = workload_shape(space, concurrency=args.concurrency)
        ev = ModelEvaluator(space, profile=args.profile, shape=shape)
        t0 = time.perf_counter()
        if args.optimum:
            records = [{**ev.optimum(), "configs": sum(1 for _ in space.enumerate())}]
            record: Any = records[0]
        else:
            records = list(ev.evaluate_all())
            record = {"configs": len(records), "records": records}
        dt = time.perf_counter() - t0
        if args.timing:
            count = records[0]["configs"] if args.optimum else len(records)
            print(f"{count} configs in {dt:.3f} s: {count / dt:,.0f} configs/s", file=sys.stderr)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    return cli.emit(args, text=render(records, optimum=args.optimum), record=record)
