"""``autotune repick``: a search's configs ranked for another acceptance, from its cost surface.

Reads the cost surface the search logged (``report/cost_surface.json`` on its newest search run in
MLflow, or ``--surface FILE``: the file written beside ``-o``), predicts every measured config and
every unmeasured one the surface can interpolate at the acceptance given (``--acceptance
rates:[0.8,0.7,...]`` or ``--acceptance-file F``) at one load level (``--level C``; by default the
search's primary level, said on the first line), names the predictions too uncertain to trust and
prints the ``python -m autotune.trial`` commands that confirm the top ones on a GPU. No server
runs. Every tok/s it prints is a prediction. ``--phase-costs FILE`` writes the phase-cost table
(batch size x steps x draft tokens -> draft, verify, re-extend ms) and ``--adaptive-config FILE``
SGLang's adaptive speculation table from it (every measured batch size), checked by SGLang's loader.

Exit code 0 with a ranking, 1 when no prediction can be trusted, 2 for bad input.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import command_line as cli
from autotune.errors import AutotuneError
from autotune.search.acceptance_profile import TOP1
from autotune.search.cost_surface import COST_SURFACE_JSON, at_level, levels_of
from autotune.search.phase_costs import adaptive_candidates, phase_cost_table
from autotune.search.repick import MAX_SD_PCT, Prediction, parse_acceptance, parse_categories, predict_all, ranking_text
from autotune.sglang.adaptive import check_table
from autotune.space.load_levels import LoadLevel
from autotune.space.synthetic import SyntheticAcceptance
from autotune.tracking.tracker import Tracker

#: The command's name in usage lines (``autotune repick``, or as the dispatcher was run).
PROG = "autotune repick"


@dataclass(frozen=True, kw_only=True)
class RepickArgs:
    """``autotune repick``'s command line.

    Attributes:
        name: The search's name (its MLflow experiment).
        surface: A cost surface file instead of the one in MLflow.
        acceptance: ``rates:[0.8,0.7,...]``.
        acceptance_file: A JSON file of per-position rates (a list or ``{"rates": [...]}``), or
            the profile ``autotune acceptance --json`` writes.
        by_category: Rank for each category of ``acceptance_file``'s ``by_category``.
        level: The load level to rank at (``"8"``, ``"r2.5"``); None: the search's primary level.
        max_sd_pct: The largest relative spread of a trusted prediction, percent.
        top: Rows of the ranking to print.
        confirm: How many top configs get a confirm command.
        phase_costs: Write the phase-cost table to this file.
        adaptive_config: Write SGLang's adaptive speculation table to this file.
        tracking_uri: The MLflow store (None: the one under ``root``'s ``mlruns/``).
        root: The project directory of the local store.
        json: Print the ranking as JSON.
        output: Write the result to this file instead of stdout.
    """

    name: str | None = None
    surface: str | None = None
    acceptance: str | None = None
    acceptance_file: str | None = None
    by_category: bool = False
    level: str | None = None
    max_sd_pct: float = MAX_SD_PCT
    top: int = 10
    confirm: int = 2
    phase_costs: str | None = None
    adaptive_config: str | None = None
    tracking_uri: str | None = None
    root: str | None = None
    json: bool = False
    output: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune repick``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(
        prog, "Rank a search's configs for another acceptance from its measured cost surface "
              "(predictions, no GPU).",
        examples=["{prog} --name demo --acceptance 'rates:[0.8,0.7,0.6]'",
                  "{prog} --name demo --acceptance-file draft-v2.json --json -o repick.json",
                  "{prog} --name demo --acceptance-file profile.json --by-category   # autotune acceptance's",
                  "{prog} --surface out/s.cost_surface.json --acceptance 'rates:[0.7,0.6]'",
                  "{prog} --name levels --level 64 --acceptance 'rates:[0.8,0.7,0.6]'   # concurrency: [1, 64]",
                  "{prog} --name demo --phase-costs costs.json --adaptive-config adaptive.json"])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--name", help="search name (the MLflow experiment)")
    source.add_argument("--surface", metavar="FILE", help="a cost surface file (written beside the search's -o)")
    acc = parser.add_mutually_exclusive_group()
    acc.add_argument("--acceptance", metavar="rates:[R1,R2,...]",
                     help="per-position acceptance of the draft's top-1 candidate")
    acc.add_argument("--acceptance-file", metavar="F",
                     help="a JSON file: [R1, ...], {\"rates\": [...]}, or autotune acceptance's profile")
    parser.add_argument("--by-category", action="store_true",
                        help="rank for each prompt category of --acceptance-file's by_category")
    parser.add_argument("--level", metavar="C",
                        help="the load level to rank at, for a search with load levels: a concurrency "
                             "(8) or a request rate (r2.5); default: the search's primary level")
    parser.add_argument("--max-sd-pct", type=cli.positive_float, default=MAX_SD_PCT,
                        help=f"largest spread of a trusted prediction, percent (default {MAX_SD_PCT:g})")
    parser.add_argument("--top", type=cli.positive_int, default=10, help="rows to print (default 10)")
    parser.add_argument("--confirm", type=cli.non_negative_int, default=2, help="confirm commands to print (default 2)")
    parser.writes(parser.add_argument("--phase-costs", metavar="FILE",
                                      help="write the phase-cost table (batch size x steps x draft tokens)"))
    parser.writes(parser.add_argument("--adaptive-config", metavar="FILE",
                                      help="write SGLang's --speculative-adaptive-config from the table"))
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: the store under <root>/mlruns)")
    parser.add_argument("--root", help="project directory of the local store (default: the working directory)")
    cli.add_output(parser, record="the ranking (every prediction, labelled)")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> RepickArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`RepickArgs`; exits 2 on a bad flag, as argparse does."""
    return RepickArgs(**vars(build_parser(prog).parse_command(argv)))


def load_surface(args: RepickArgs) -> dict[str, Any]:
    """The cost surface: ``--surface``, else the newest search run's ``report/cost_surface.json``.

    Raises:
        ValueError: No such file or run, or not a cost surface.
    """
    if args.surface:
        try:
            return dict(json.loads(Path(args.surface).read_text()))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--surface {args.surface}: {exc}") from None
    tracker = Tracker(str(args.name), root=args.root, tracking_uri=args.tracking_uri).connect(create=False)
    parent = tracker.latest_parent_run_id()
    if parent is None:
        raise ValueError(f"search {args.name!r} has no search run in {tracker.tracking_uri}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = tracker.client.download_artifacts(parent, f"report/{COST_SURFACE_JSON}", tmp)
        except Exception:  # noqa: BLE001 - MLflow raises its own for a missing artifact
            raise ValueError(f"search run {parent} of {args.name!r} has no report/{COST_SURFACE_JSON} "
                             "(a search that measured no speculative config with phases, or one from "
                             "before the cost surface)") from None
        return dict(json.loads(Path(path).read_text()))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune repick --name NAME --acceptance rates:[...] [--json] [-o FILE]``."""
    args = parse_args(argv, prog=prog)
    if args.acceptance is None and args.acceptance_file is None and not (args.phase_costs or args.adaptive_config):
        print(f"{prog}: error: give --acceptance or --acceptance-file (or --phase-costs/--adaptive-config)",
              file=sys.stderr)
        return cli.BAD_INPUT
    if args.by_category and args.acceptance_file is None:
        print(f"{prog}: error: --by-category reads the categories of --acceptance-file (a profile "
              "written by autotune acceptance --json)", file=sys.stderr)
        return cli.BAD_INPUT
    try:
        acceptance = None
        categories: dict[str, SyntheticAcceptance] = {}
        if args.acceptance is not None or args.acceptance_file is not None:
            text = args.acceptance if args.acceptance is not None else _read(str(args.acceptance_file))
            where = "--acceptance" if args.acceptance is not None else f"--acceptance-file {args.acceptance_file}"
            try:
                acceptance = parse_acceptance(text)
                categories = parse_categories(text) if args.by_category else {}
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            _warn_shape(text)
        whole = load_surface(args)
        surface, level = at_level(whole, args.level)
        notes = _tables(args, whole)
        if acceptance is None:
            print("\n".join(notes))
            return cli.OK
        preds = predict_all(surface, acceptance, max_sd_pct=args.max_sd_pct)
        per_cat = {name: predict_all(surface, acc, max_sd_pct=args.max_sd_pct) for name, acc in categories.items()}
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    for line in notes:
        print(line, file=sys.stderr)
    space = str(surface.get("space") or "SPACE")
    text = ranking_text(preds, space=space, top=args.top, confirm=args.confirm)
    record: dict[str, Any] = {"label": "predicted", "search": surface.get("search"),
                              "level": level.field() if level is not None else None,
                              "batch_size": surface.get("batch_size"),
                              "acceptance": list(acceptance.rates), "predictions": [p.to_dict() for p in preds]}
    if per_cat:
        text = f"all prompts: rates {[round(r, 3) for r in acceptance.rates]}\n" + text
        record["by_category"] = {}
        for name, cat_preds in per_cat.items():
            rates = list(categories[name].rates)
            text += f"\n\ncategory {name}: rates {[round(r, 3) for r in rates]}\n" + ranking_text(
                cat_preds, space=space, top=args.top, confirm=args.confirm)
            record["by_category"][name] = {"acceptance": rates, "pick": _pick(cat_preds),
                                           "predictions": [p.to_dict() for p in cat_preds]}
        record["pick"] = _pick(preds)
    if level is not None:
        text = _level_line(whole, level, chosen=args.level is not None) + "\n" + text
    trusted = any(p.trusted for p in preds) or any(p.trusted for ps in per_cat.values() for p in ps)
    return cli.emit(args, text=text, record=record, what="the ranking",
                    code=cli.OK if trusted else cli.NO_RESULT)


def _level_line(surface: dict[str, Any], level: LoadLevel, *, chosen: bool) -> str:
    """Which level's costs the ranking used, and the others the surface keeps."""
    others = [lv.key for lv in levels_of(surface) if lv != level]
    why = "--level" if chosen else "the search's primary level"
    return (f"costs at {level.describe()} ({why}); other levels: --level "
            f"{' | '.join(others) if others else '(none)'}")


def _pick(preds: list[Prediction]) -> dict[str, Any] | None:
    """The top trusted prediction's params (``predict_all`` puts it first), or None."""
    return next((dict(p.params) for p in preds if p.trusted), None)


def _warn_shape(text: str) -> None:
    """Say on stderr when a measured profile's rates are not top-1 rates (a tree's accepted path)."""
    try:
        value = json.loads(text.removeprefix("rates:"))
    except ValueError:
        return
    if isinstance(value, dict) and value.get("rates_are") not in (None, TOP1):
        print(f"note: the profile's rates are not the draft's top-1 rates: {value.get('note')}; "
              "predictions for other shapes are off by the difference", file=sys.stderr)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"--acceptance-file {path}: {exc}") from None


def _tables(args: RepickArgs, surface: dict[str, Any]) -> list[str]:
    """Write ``--phase-costs`` and ``--adaptive-config``; a line for each file written."""
    notes: list[str] = []
    if not (args.phase_costs or args.adaptive_config):
        return notes
    table = phase_cost_table(surface)
    if args.phase_costs:
        Path(args.phase_costs).write_text(json.dumps(table, indent=2) + "\n")
        notes.append(f"wrote the phase-cost table ({len(table['entries'])} entries, batch sizes "
                     f"{table['batch_sizes']}) to {args.phase_costs}")
    if args.adaptive_config:
        adaptive = adaptive_candidates(table)
        Path(args.adaptive_config).write_text(json.dumps(adaptive, indent=2) + "\n")
        steps, checker = check_table(args.adaptive_config)
        notes.append(f"wrote SGLang's adaptive config to {args.adaptive_config} (batch sizes "
                     f"{', '.join(adaptive)}; candidate steps {steps}, read back by {checker})")
    notes += [f"phase-cost table: {why}" for why in table["skipped"]]
    return notes
