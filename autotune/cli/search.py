"""``autotune search``: Ray Tune + constrained Optuna over speculative and TP/NCCL settings.

The search space file is the source of truth. Ray Tune schedules one trial per suggestion, each
asking for one bundle of ``tp_size`` GPUs on one node; Optuna (the space's ``search.sampler``; left out,
the phase-model sampler where it applies, else TPE) proposes the configs and learns from constraint
values (break-even, SLOs, failures).
The search itself is :func:`autotune.search.run.run_search`; this module is its command line
(also ``python -m autotune.search``).
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass

from autotune import command_line as cli
from autotune.errors import AutotuneError
from autotune.search.console import print_summary
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from autotune.search.summary_files import write_beside
from autotune.space.packaged import SPACE_HELP

#: The command's name when it is run as a module (``autotune search`` passes its own).
PROG = "python -m autotune.search"


@dataclass(frozen=True, kw_only=True)
class SearchArgs:
    """``autotune search``'s command line.

    Attributes:
        space: The space file, or a packaged space's name.
        trials: Number of trials (None: the space's ``budget.trials``).
        concurrency: Trials at once (None: GPU-limited).
        name: The search's name (None: the space's name).
        address: A Ray cluster's address (None: ``RAY_ADDRESS`` or an embedded Ray).
        resume: Continue the latest search of ``name``.
        seed: The sampler's seed (None: ``search.seed``).
        tracking_uri: The MLflow store (None: ``mlruns/`` sqlite).
        no_tracking: Do not log to MLflow.
        json: Print the summary as JSON.
        output: Write the summary to this file instead of stdout.
        json_also: The earlier ``--summary-json FILE``.
    """

    space: str
    trials: int | None = None
    concurrency: int | None = None
    name: str | None = None
    address: str | None = None
    resume: bool = False
    seed: int | None = None
    tracking_uri: str | None = None
    no_tracking: bool = False
    json: bool = False
    output: str | None = None
    json_also: str | None = None

    def options(self) -> SearchOptions:
        """What the search library is asked to do."""
        return SearchOptions(space=self.space, trials=self.trials, concurrency=self.concurrency, name=self.name,
                             address=self.address, resume=self.resume, seed=self.seed,
                             tracking_uri=self.tracking_uri, tracking=not self.no_tracking)


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune search``; apart from :func:`main` so that command lines
    written elsewhere (the cluster recipes in ``deploy/``) can be checked against it."""
    parser = cli.command_parser(prog, __doc__ or "", examples=[
        "{prog} --space demo",
        "{prog} --space demo --json -o winner.json   # and winner.md, winner.trials.csv",
        "{prog} --space my-space.yaml --address auto --tracking-uri http://mlflow-host:5000",
        "{prog} --space my-space.yaml --name NAME --resume"])
    parser.add_argument("--space", required=True, help=SPACE_HELP)
    parser.add_argument("--trials", type=cli.positive_int, help="number of trials (default: budget.trials)")
    parser.add_argument("--concurrency", type=cli.positive_int, help="trials at once (default: GPU-limited)")
    parser.add_argument("--name", help="search name (default: the space's name)")
    parser.add_argument("--address", help="Ray cluster: auto, HOST:6379 or ray://HOST:10001 "
                        "(default: RAY_ADDRESS or embedded)")
    parser.add_argument("--resume", action="store_true", help="continue the latest search of --name")
    parser.add_argument("--seed", type=cli.seed, help=f"sampler seed, 0 to {cli.MAX_SEED} (default: search.seed)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: mlruns/ sqlite)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    cli.add_output(parser, record="the summary (winner, trial counts, phases)", json_also="--summary-json")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> SearchArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`SearchArgs`; exits 2 on a bad flag, as argparse does."""
    return SearchArgs(**vars(build_parser(prog).parse_command(argv)))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune search --space S [...]``: progress on stderr, the summary as the output convention
    says (:func:`autotune.command_line.emit`); ``summary.md`` and ``trials.csv`` beside ``-o FILE``."""
    args = parse_args(argv, prog=prog)
    cli.interruptible()
    try:
        outcome = run_search(args.options(), out=sys.stderr)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    text = io.StringIO()
    print_summary(outcome, out=text)
    # Ran, but nothing usable: no config (not even a baseline) ran feasibly.
    code = cli.stopped_code() if outcome.interrupted else cli.OK if outcome.winner is not None else cli.NO_RESULT
    code = cli.emit(args, text=text.getvalue().lstrip("\n"), record=outcome.summary(), code=code)
    if (beside := args.output or args.json_also) and code != cli.BAD_INPUT:  # FILE's folder is writable
        written = write_beside(beside, outcome.report_files)
        if written:
            print(f"summary files: {beside}, {', '.join(str(p) for p in written)}", file=sys.stderr)
    return code
