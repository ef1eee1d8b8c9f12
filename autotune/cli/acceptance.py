"""``autotune acceptance``: a draft's measured per-position acceptance, overall and per category.

Reads one short measured run of the real draft on the real prompts (any config): a trial record
written by ``python -m autotune.trial --json --records``, a ``requests.jsonl`` (one request
record a line, as a search's MLflow trial run keeps it), or a folder holding ``requests.jsonl``
(and ``result.json`` for the config's shape). Estimates the per-position rates
(:func:`autotune.search.acceptance_profile.profile_of`) with their spreads, overall and per
prompt category, and prints them, or (``--json``) writes the profile that ``autotune repick
--acceptance-file F [--by-category]`` reads.

Exit code 0 with a profile, 2 for bad input (a file that is not a run, histograms that disagree
with the steps).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import command_line as cli
from autotune.search.acceptance_profile import profile_of, profile_text

#: The command's name in usage lines.
PROG = "autotune acceptance"

#: SGLang's flags for the shape, as the trial record's ``argv`` has them.
_STEPS_FLAG, _TOPK_FLAG = "--speculative-num-steps", "--speculative-eagle-topk"


@dataclass(frozen=True, kw_only=True)
class AcceptanceArgs:
    """``autotune acceptance``'s command line.

    Attributes:
        run: A trial record (JSON), a ``requests.jsonl`` or a folder holding one.
        steps: The run's speculative steps, when the run does not say.
        topk: The run's top-k, when the run does not say.
        json: Print the profile as JSON (what ``repick --acceptance-file`` reads).
        output: Write the result to this file instead of stdout.
    """

    run: str
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
                  "autotune repick --name S --acceptance-file profile.json --by-category"])
    parser.add_argument("run", metavar="RUN",
                        help="a trial record (--json --records), a requests.jsonl, or a folder with one")
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
    try:
        records, trial = load_run(Path(args.run))
        steps, topk = shape_of(trial)
        profile = profile_of(records, steps=args.steps or steps, topk=args.topk or topk, source=args.run)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    return cli.emit(args, text=profile_text(profile), record=profile, what="the acceptance profile")


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
