"""``python -m autotune.trial``: one config of a search space and its baseline, from the shell.

Loads the space, builds the trial config and its group's baseline config from ``--params``,
measures and judges them (:func:`autotune.trial.measure.evaluate`, baselines reused from
``--baseline-store DIR`` when given) and prints the phase table, or (``--json``) the record that the
landscapes, the emulator fit and the GPU scripts read; ``-o FILE`` writes either to FILE
(:func:`autotune.command_line.emit`). Exit code 0 when the trial ran, 1 when it failed, 2 for bad input.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from autotune import command_line as cli
from autotune.backend import get_backend
from autotune.errors import AutotuneError
from autotune.space.packaged import SPACE_HELP
from autotune.space.search_space import load_space
from autotune.space.workload import Workload
from autotune.trial.baselines import shared_store
from autotune.trial.measure import PHASES, evaluate
from autotune.trial.measure_settings import settings_for, slos_of
from autotune.trial.report import phase_table, summary_json

#: The command's name when it is run as a module (``autotune trial`` passes its own).
PROG = "python -m autotune.trial"


@dataclass(frozen=True, kw_only=True)
class TrialArgs:
    """``python -m autotune.trial``'s command line.

    Attributes:
        space: The space file, or a packaged space's name.
        params: A JSON object of parameters, named as in ``ServerArgs`` or env vars.
        repeats: Overrides the space's ``measure.repeats``.
        workdir: Where server logs go.
        baseline_store: A folder of baselines to reuse and share.
        records: Put every request's record (``records``) in the JSON record, for
            ``autotune acceptance``.
        json: Print the record as JSON.
        output: Write the result to this file instead of stdout.
    """

    space: str
    params: str = "{}"
    repeats: int | None = None
    workdir: str | None = None
    baseline_store: str | None = None
    records: bool = False
    json: bool = False
    output: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune trial``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(
        prog, "Evaluate one config of a search space and its no-speculation baseline.",
        examples=["{prog} --space demo --params "
                  "'{\"speculative_num_steps\": 2, \"speculative_eagle_topk\": 1, \"NCCL_ALGO\": \"Ring\"}'",
                  "{prog} --space demo --params '{\"speculative_algorithm\": null}' --json",
                  "{prog} --space demo --params '{}' --json -o trial.json"])
    parser.add_argument("--space", required=True, help=SPACE_HELP)
    parser.add_argument("--params", default="{}",
                        help="JSON object of parameters, named as in ServerArgs or env vars")
    parser.add_argument("--repeats", type=cli.positive_int, help="override measure.repeats (1 or more)")
    parser.add_argument("--workdir", help="where server logs go")
    parser.add_argument("--baseline-store", metavar="DIR",
                        help="reuse baselines kept in DIR (measured once, then shared by every "
                             "later call that names the same DIR; one workload a DIR)")
    parser.add_argument("--records", action="store_true",
                        help="put every request's record in the JSON record (its spec_* fields and "
                             "prompt category: what autotune acceptance reads)")
    cli.add_output(parser, record="the trial's record (what the landscapes and the emulator fit read)")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> TrialArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`TrialArgs`; exits 2 on a bad flag, as argparse does."""
    return TrialArgs(**vars(build_parser(prog).parse_command(argv)))


class _Elapsed(logging.Formatter):
    """``[  12.3 s] message``: the time since the command began, then the phase."""

    def __init__(self) -> None:
        super().__init__()
        self.t0 = time.monotonic()

    def format(self, record: logging.LogRecord) -> str:
        return f"[{time.monotonic() - self.t0:6.1f} s] {record.getMessage()}"


def show_phases(stream: TextIO) -> logging.Handler:
    """Print the trial's phases (:data:`autotune.trial.measure.PHASES`) on ``stream``; returns the
    handler, for the caller to remove."""
    handler: logging.Handler = logging.StreamHandler(stream)
    handler.setFormatter(_Elapsed())
    PHASES.addHandler(handler)
    PHASES.setLevel(logging.INFO)
    return handler


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune trial --space FILE --params JSON [--json] [-o FILE]``; its phases on stderr."""
    args = parse_args(argv, prog=prog)
    cli.interruptible()
    handler = show_phases(sys.stderr)
    try:
        return _run(args)
    finally:
        PHASES.removeHandler(handler)


def _run(args: TrialArgs) -> int:
    """The trial of ``args``, once parsed."""
    try:
        params = json.loads(args.params)
        if not isinstance(params, dict):
            raise ValueError("--params must be a JSON object")
    except ValueError as exc:
        print(f"error: --params: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    try:
        space = load_space(args.space)
        reason = space.validate_config(params)
        if reason:
            print(f"error: --params: {reason}", file=sys.stderr)
            return cli.BAD_INPUT
        if not get_backend(space.backend).emulated:
            space.check_paths()
        config = space.trial_config(params)
        base_cfg = None if config.is_baseline else space.trial_config(space.baseline_params(params))
        settings = settings_for(space, workdir=args.workdir, repeats=args.repeats)
        workload = Workload.from_spec(space.workload, file=space.file)
        store = (shared_store(args.baseline_store, workload=space.workload, settings=settings)
                 if args.baseline_store else None)
        result = evaluate(config, workload=workload, baseline_config=base_cfg, settings=settings,
                          store=store, slos=slos_of(space), min_speedup=space.constraints.min_speedup)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    text = f"{phase_table(result)}\n\nLaunch command as measured:\n{result.launch_command}"
    if result.serve_command:
        text += f"\n\nLaunch command to serve with (what python -m autotune.export writes):\n{result.serve_command}"
    if not result.ok and result.log_tail:
        text += "\n\nServer log tail:\n" + result.log_tail
    record = summary_json(result)
    if args.records:
        record["records"] = result.records
    return cli.emit(args, text=text, record=record, code=cli.OK if result.ok else cli.NO_RESULT)
