"""``autotune acceptance``: a draft's measured per-position acceptance, overall and per category.

Reads one short measured run of the real draft on the real prompts (any config): a trial record
written by ``python -m autotune.trial --json --records``, a ``requests.jsonl`` (one request
record a line, as a search's MLflow trial run keeps it), or a folder holding ``requests.jsonl``
(and ``result.json`` for the config's shape). Estimates the per-position rates
(:func:`autotune.search.acceptance_profile.profile_of`) with their spreads, overall and per
prompt category, and prints them, or (``--json``) writes the profile that ``autotune repick
--acceptance-file F [--by-category]`` reads.

``--name SEARCH --trial ID`` reads the same files from the search's MLflow store instead: the
newest search run's trial run of that id (as the search's table and ``trials.csv`` print it, or
the run's MLflow id), its ``requests.jsonl`` and ``result.json`` artifacts.

Exit code 0 with a profile, 2 for bad input (a file that is not a run, histograms that disagree
with the steps, no such search or trial, a trial run without request records).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import command_line as cli
from autotune.errors import AutotuneError
from autotune.search.acceptance_profile import profile_of, profile_text
from autotune.tracking.tracker import Tracker

#: The command's name in usage lines.
PROG = "autotune acceptance"

#: SGLang's flags for the shape, as the trial record's ``argv`` has them.
_STEPS_FLAG, _TOPK_FLAG = "--speculative-num-steps", "--speculative-eagle-topk"


@dataclass(frozen=True, kw_only=True)
class AcceptanceArgs:
    """``autotune acceptance``'s command line.

    Attributes:
        run: A trial record (JSON), a ``requests.jsonl`` or a folder holding one; None with
            ``name`` and ``trial``.
        name: A search's name (its MLflow experiment), to read ``trial``'s run from.
        trial: The trial's id in that search (or its MLflow run id).
        tracking_uri: The MLflow store (None: the one under ``root``'s ``mlruns/``).
        root: The project directory of the local store.
        steps: The run's speculative steps, when the run does not say.
        topk: The run's top-k, when the run does not say.
        json: Print the profile as JSON (what ``repick --acceptance-file`` reads).
        output: Write the result to this file instead of stdout.
    """

    run: str | None = None
    name: str | None = None
    trial: str | None = None
    tracking_uri: str | None = None
    root: str | None = None
    steps: int | None = None
    topk: int | None = None
    json: bool = False
    output: str | None = None


def build_parser(prog: str = PROG) -> cli.CommandParser:
    """The command line of ``autotune acceptance``, named ``prog`` in its usage lines."""
    parser = cli.command_parser(
        prog, "A draft's measured per-position acceptance, overall and per prompt category, from one "
              "short run's request records.",
        examples=["autotune trial --space S --params '{...}' --json --records -o run.json",
                  "{prog} run.json --json -o profile.json",
                  "{prog} mlruns-artifacts/requests.jsonl --steps 3 --topk 1",
                  "{prog} --name my-search --trial 07a13fb5 --json -o profile.json   # from MLflow",
                  "autotune repick --name S --acceptance-file profile.json --by-category"])
    parser.add_argument("run", metavar="RUN", nargs="?",
                        help="a trial record (--json --records), a requests.jsonl, or a folder with one")
    parser.add_argument("--name", help="a search's name: read --trial's run from its MLflow store instead of RUN")
    parser.add_argument("--trial", metavar="ID",
                        help="with --name: the trial's id as the search prints it (or its MLflow run id)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: the store under <root>/mlruns)")
    parser.add_argument("--root", help="project directory of the local store (default: the working directory)")
    parser.add_argument("--steps", type=cli.positive_int,
                        help="the run's --speculative-num-steps (default: the trial record's, else the "
                             "histograms' length)")
    parser.add_argument("--topk", type=cli.positive_int,
                        help="the run's --speculative-eagle-topk (default: the trial record's)")
    cli.add_output(parser, record="the acceptance profile (what repick --acceptance-file reads)")
    return parser


def parse_args(argv: list[str] | None = None, *, prog: str = PROG) -> AcceptanceArgs:
    """``argv`` (else ``sys.argv[1:]``) as :class:`AcceptanceArgs`; exits 2 on a bad flag."""
    return AcceptanceArgs(**vars(build_parser(prog).parse_command(argv)))


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """``autotune acceptance RUN [--steps N] [--topk K] [--json] [-o FILE]``."""
    args = parse_args(argv, prog=prog)
    if (args.run is None) == (args.name is None) or (args.name is None) != (args.trial is None):
        print(f"{prog}: error: give RUN (a file or folder), or --name SEARCH with --trial ID",
              file=sys.stderr)
        return cli.BAD_INPUT
    try:
        with tempfile.TemporaryDirectory(prefix="autotune-acceptance-") as tmp:
            if args.run is not None:
                path, source = Path(args.run), args.run
            else:
                path, source = fetch_trial_run(args, Path(tmp))
            records, trial = load_run(path)
        steps, topk = shape_of(trial)
        profile = profile_of(records, steps=args.steps or steps, topk=args.topk or topk, source=source)
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    return cli.emit(args, text=profile_text(profile), record=profile, what="the acceptance profile")


def fetch_trial_run(args: AcceptanceArgs, dest: Path) -> tuple[Path, str]:
    """Download ``--trial``'s ``requests.jsonl`` and ``result.json`` from the newest run of search
    ``--name`` into ``dest``; the folder and how the profile names its source.

    Raises:
        ValueError: No such search, search run or trial (the message lists the trials there), or
            the trial's run kept no request records.
    """
    tracker = Tracker(str(args.name), root=args.root, tracking_uri=args.tracking_uri).connect(create=False)
    parent = tracker.latest_parent_run_id()
    if parent is None:
        raise ValueError(f"search {args.name!r} has no search run in {tracker.tracking_uri}")
    runs = tracker.trial_runs(parent)
    wanted = str(args.trial)
    found = [r for r in runs if wanted in (r.trial_id, r.run_id)]
    if len(found) != 1:
        ids = [f"{r.trial_id} ({r.kind})" for r in runs if r.trial_id]
        shown = ", ".join(ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
        raise ValueError(f"--trial {wanted}: search {args.name!r} (run {parent}) has "
                         f"{'no such trial' if not found else f'{len(found)} runs of it'}; its trials: "
                         f"{shown or 'none'}")
    run = found[0]
    for name in ("requests.jsonl", "result.json"):
        try:
            tracker.client.download_artifacts(run.run_id, name, str(dest))
        except Exception:  # noqa: BLE001 - MLflow raises its own for a missing artifact
            if name == "requests.jsonl":
                raise ValueError(f"trial {wanted} of {args.name!r} (run {run.run_id}, {run.status}) kept no "
                                 "requests.jsonl: a trial that failed before measuring, or one "
                                 "logged without request records") from None
    return dest, f"{args.name}/{run.trial_id} (MLflow run {run.run_id})"


def load_run(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A run's request records and its trial record (None when the run has none).

    Raises:
        ValueError: No such file, a line that is not a record, a trial record without records.
    """
    trial: dict[str, Any] | None = None
    if path.is_dir():
        result = path / "result.json"
        trial = _json_object(result) if result.exists() else None
        path = path / "requests.jsonl"
    if path.suffix == ".jsonl":
        return _jsonl(path), trial
    trial = _json_object(path)
    records = trial.get("records")
    if not isinstance(records, list) or not records:
        raise ValueError(f"{path}: a trial record without request records; write it with "
                         "python -m autotune.trial ... --json --records, or give the run's requests.jsonl")
    if not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{path}: 'records' must be a list of request records (objects)")
    return records, trial


def shape_of(trial: Mapping[str, Any] | None) -> tuple[int | None, int | None]:
    """(steps, topk) of a trial record's launch (its ``argv``), None for what it does not say."""
    argv = (trial or {}).get("argv") or []
    found: dict[str, int | None] = {_STEPS_FLAG: None, _TOPK_FLAG: None}
    for i, arg in enumerate(argv):
        name, eq, value = str(arg).partition("=")
        if name in found:
            raw = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            try:
                found[name] = int(str(raw))
            except ValueError:
                found[name] = None
    return found[_STEPS_FLAG], found[_TOPK_FLAG]


def _json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc}); expected a trial record "
                         "(python -m autotune.trial --json --records) or a requests.jsonl") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a trial record (a JSON object), got {type(value).__name__}")
    return value


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    out: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc}); expected one request record a line") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}:{n}: expected a request record (a JSON object), got "
                             f"{type(value).__name__}")
        out.append(value)
    return out
