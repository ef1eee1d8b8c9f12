"""The winning launch command of a search, checked by SGLang's parser (``python -m autotune.export``
is :mod:`autotune.cli.export`).

The winner is chosen from the search's recorded runs, read back by :mod:`autotune.tracking.search_reader`
(the local sqlite store without importing MLflow, else MLflow's client), by the one policy
(:func:`autotune.tracking.runs.select_winner`, :mod:`autotune.trial.winner`, the search's objective):
the best confirmed feasible speculative config, else the best feasible one, else the no-speculation
baseline. It is
written as a shell script (``export`` lines, then ``python -m sglang.launch_server ...``), an SGLang
``--config`` YAML, or JSON (argv and env). Every output is parsed back with SGLang's own argument
parser before it is written.

The command is always the real SGLang one, also after a search on the emulator: the module is
``sglang.launch_server`` and the emulator's own variables are dropped. By default
``--enable-metrics`` and ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`` stay, because the measured numbers
were taken with them (the device timer records CUDA events and its cost is part of the measurement);
``--strip-metrics`` drops both for a server that nobody scrapes.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.backend import BACKENDS
from autotune.errors import AutotuneError, ConfigError, LaunchArgsError
from autotune.launch.serving import serving_spec
from autotune.launch.spec import LaunchSpec
from autotune.sglang import args as sglang_args
from autotune.sglang.metrics import DEVICE_TIMER_ENV
from autotune.space import synthetic
from autotune.space.warm_start import versus_default
from autotune.tracking.runs import (
    KIND_SEARCH,
    TAG_KIND,
    TAG_PARENT,
    TAG_SGLANG_DEFAULT,
    TAG_SYNTHETIC_ACCEPT,
    TRIAL_KINDS,
    TrialRun,
    Winner,
    objective_of,
    select_winner,
)
from autotune.tracking.search_reader import LaunchSource, SearchReader

if TYPE_CHECKING:
    from autotune.tracking.tracker import Tracker

FORMATS = ("sh", "yaml", "json")
SGLANG_MODULE = BACKENDS["sglang"].module


class NothingToExport(AutotuneError):
    """The search has no feasible trial and no baseline to fall back on."""


def without_speculation(spec: LaunchSpec) -> LaunchSpec:
    """The no-speculation twin of a launch: no draft model, no ``speculative_*`` args."""
    args = {k: v for k, v in spec.server_args.items() if not k.startswith("speculative_")}
    return replace(spec, draft_model_path=None, server_args=args)


def winner_spec(source: LaunchSource, winner: Winner, *, strip_metrics: bool = False,
                host: str | None = None, port: int | None = None) -> LaunchSpec:
    """The real-SGLang launch of a winner, from its run's ``launch.json`` (read by a
    :class:`~autotune.tracking.search_reader.SearchReader`, or a search's own tracker)."""
    spec = source.load_spec(winner.run.run_id)
    if winner.derived_baseline:
        spec = without_speculation(spec)
    return serving_spec(spec, strip_metrics=strip_metrics, host=host, port=port)


def winner_files(tracker: Tracker, winner: Winner) -> dict[str, str]:
    """The winner's real-SGLang launch as the files a search logs on its MLflow run (``winner/``):
    ``launch.sh``, ``config.yaml`` (SGLang ``--config``) and ``launch.json``, each checked as
    :func:`render` checks it. A format that cannot be rendered is ``NAME.error.txt`` with the
    reason, so one format's failure never loses the others.

    Raises:
        LaunchArgsError: No format could be rendered (the reason of the first).
    """
    spec = winner_spec(tracker, winner)
    files: dict[str, str] = {}
    errors: list[LaunchArgsError] = []
    for name, fmt in (("launch.sh", "sh"), ("config.yaml", "yaml"), ("launch.json", "json")):
        try:
            files[name] = render(spec, fmt, winner=winner, search=tracker.name)
        except LaunchArgsError as exc:
            errors.append(exc)
            files[f"{name}.error.txt"] = f"{type(exc).__name__}: {exc}\n"
    if len(errors) == 3:
        raise errors[0]
    return files


def choose(reader: SearchReader, *, run_id: str | None = None) -> Winner:
    """The run to export.

    Args:
        reader: The search's recorded runs (:func:`autotune.tracking.search_reader.open_reader`).
        run_id: A search run (choose within it) or a trial run (export exactly it); the
            experiment's newest search run if None.

    Raises:
        ConfigError: The run does not exist or belongs to another experiment.
        NothingToExport: Nothing feasible was measured.
    """
    parent: str | None
    if run_id is not None:
        parent = run_id
        run = reader.get_run(run_id)
        if run.info.experiment_id != reader.experiment_id:
            raise ConfigError(f"run {run_id} is not in the experiment of search {reader.name!r}",
                              field="run_id")
        kind = run.data.tags.get(TAG_KIND)
        if kind in TRIAL_KINDS:
            return Winner(TrialRun.from_run(run), False, "the run chosen with --run-id")
        if kind != KIND_SEARCH:
            raise ConfigError(f"run {run_id} is not an autotune search or trial run", field="run_id")
    else:
        parent = reader.latest_search_run_id()
        if parent is None:
            raise NothingToExport(f"search {reader.name!r} has no search run in {reader.tracking_uri}")
    metric, maximize = objective_of(reader.get_run(parent).data.tags)
    winner = select_winner(reader.trial_runs(parent), objective=metric, maximize=maximize)
    if winner is None:
        raise NothingToExport(f"search run {parent} has no feasible trial and no baseline to export")
    return winner


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "unknown" if value is None else format(value, spec) + suffix


#: The search run's tag with the winner's margin over the runner-up, with its interval and whether
#: the two are separated (:meth:`autotune.search.evidence.WinnerEvidence.line`); the export's header
#: repeats it.
TAG_WINNER_MARGIN = "autotune.winner_margin"


#: The search run's tag naming the SGLang flag table its trials were checked against
#: (:func:`autotune.sglang.flags.share_installed_flags`); the export checks with it when it is the
#: installed SGLang's, instead of importing SGLang (:func:`autotune.sglang.flags.installed_table`).
TAG_FLAG_TABLE = "autotune.sglang_flag_table"


def search_tags(reader: SearchReader, winner: Winner | None) -> dict[str, str]:
    """The tags of the winner's search run (one read), empty when there is none or it is unreadable."""
    parent = (winner.run.tags.get(TAG_PARENT) if winner is not None else None)
    if not parent:
        return {}
    try:
        return dict(reader.get_run(parent).data.tags)
    except ConfigError:  # an older store, an unreadable run: the lines are left out
        return {}


def default_of(tags: Mapping[str, str]) -> dict[str, Any] | None:
    """SGLang's default speculative config as a search run's tags record it, or None."""
    raw = tags.get(TAG_SGLANG_DEFAULT)
    try:
        return json.loads(raw) if raw else None
    except ValueError:  # an unreadable tag: the line is left out
        return None


def search_default(reader: SearchReader, winner: Winner | None) -> dict[str, Any] | None:
    """SGLang's default speculative config as the winner's search measured it, or None."""
    return default_of(search_tags(reader, winner))


def provenance(winner: Winner | None, *, search: str | None, spec: LaunchSpec,
               default: Mapping[str, Any] | None = None, margin: str | None = None) -> list[str]:
    """Lines saying where an export came from and what it measured (with ``default``, how it
    compares with SGLang's default speculative config in the same search; with ``margin``, the
    search's margin of its winner over the runner-up, :data:`TAG_WINNER_MARGIN`)."""
    if winner is None:
        return []
    run = winner.run
    confirmed = ", confirmed by re-measurement" if run.confirmed else ""
    accept = "n/a (no speculation)" if winner.is_baseline else _fmt(winner.accept_length, ".2f")
    measured = (f"measured: {_fmt(winner.output_tok_s, '.1f')} output tok/s, speedup "
                f"{_fmt(winner.speedup, '.3f', 'x')} over the no-speculation baseline "
                f"({_fmt(winner.baseline_tok_s, '.1f')} tok/s), accept length {accept}")
    lines = [f"autotune export of search {search!r}" if search else "autotune export",
             f"from {run.kind} {run.trial_id} (MLflow run {run.run_id}{confirmed})",
             f"why: {winner.note}", measured]
    if margin and not winner.is_baseline:
        lines.append(f"how sure: {margin}")
    if default is not None:
        lines.append(versus_default(default, winner={"output_tok_s": winner.output_tok_s,
                                                      "speedup": winner.speedup}))
    forced = None if winner.is_baseline else synthetic.forced_accept_length(
        {synthetic.ENV: run.tags.get(TAG_SYNTHETIC_ACCEPT) or run.params.get(synthetic.ENV)})
    if forced is not None:
        lines.append(f"{synthetic.LABEL}: measured with {synthetic.ENV}={forced:g} forced on dummy "
                     "weights (dropped here); with real weights the accept length is your draft's")
    tagged = BACKENDS.get(run.tags.get("autotune.backend") or "")
    if tagged is not None and tagged.emulated:
        lines.append("measured on the sim backend (the SGLang emulator): re-measure on real GPUs")
    kept = "enable_metrics" in spec.server_args or DEVICE_TIMER_ENV in spec.env
    if kept:
        lines.append("--enable-metrics and the device timer are kept as measured (--strip-metrics drops them)")
    return lines


def render(spec: LaunchSpec, fmt: str, *, winner: Winner | None = None, search: str | None = None,
           default: Mapping[str, Any] | None = None, margin: str | None = None) -> str:
    """One export, checked by SGLang's parser (the built-in twin without SGLang).

    Args:
        spec: The launch (see :func:`autotune.launch.serving.serving_spec`).
        fmt: ``sh``, ``yaml`` or ``json``.
        winner: Where it came from, for the header (sh and yaml comments, a json key).
        search: The search name, for the header.
        default: SGLang's default config as the search measured it (:func:`search_default`).
        margin: The search's margin of its winner (:data:`TAG_WINNER_MARGIN`), for the header.

    Raises:
        LaunchArgsError: The parser rejects it.
        ValueError: Unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is unknown; use one of {', '.join(FORMATS)}")
    spec = spec.without_trial_only()  # an export is what a user runs, never a trial's shortcut
    expected = spec.validate()
    notes = provenance(winner, search=search, spec=spec, default=default, margin=margin)
    if fmt == "sh":
        head = ["#!/usr/bin/env bash", *(f"# {line}" for line in notes)]
        text = "\n".join(head) + "\n" + spec.shell_command()
        _check_sh(text, spec, expected)
    elif fmt == "yaml":
        text = "".join(f"# {line}\n" for line in notes) + spec.to_config_yaml()
        _check_yaml(text, expected, rest=spec.config_rest())
    else:
        data: dict[str, Any] = {"argv": spec.argv(python="python"), "env": dict(sorted(spec.env.items()))}
        if notes and winner is not None:  # notes come from a winner
            data["autotune"] = _json_provenance(winner, search, notes)
        text = json.dumps(data, indent=2) + "\n"
        sglang_args.parse_server_args(data["argv"][3:])
    return text


def _json_provenance(winner: Winner, search: str | None, notes: list[str]) -> dict[str, Any]:
    return {"search": search, "run_id": winner.run.run_id, "trial_id": winner.run.trial_id,
            "kind": winner.run.kind, "confirmed": winner.run.confirmed, "is_baseline": winner.is_baseline,
            "output_tok_s": winner.output_tok_s, "speedup": winner.speedup,
            "baseline_tok_s": winner.baseline_tok_s, "accept_length": winner.accept_length,
            "notes": notes}


def _check_sh(text: str, spec: LaunchSpec, expected: dict[str, Any]) -> None:
    """Read the script back as bash would and parse its command with SGLang's parser."""
    env: dict[str, str] = {}
    command: list[str] = []
    joined = text.replace("\\\n", " ")
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export" and len(words) == 2 and "=" in words[1]:
            name, value = words[1].split("=", 1)
            env[name] = value
        elif command:
            raise LaunchArgsError(f"the script has more than one command: {line!r}")
        else:
            command = words
    if command[:3] != ["python", "-m", SGLANG_MODULE] or env != dict(spec.env):
        raise LaunchArgsError(f"the script does not run {SGLANG_MODULE} with the launch's environment",
                              argv=command)
    if sglang_args.parse_server_args(command[3:]) != expected:
        raise LaunchArgsError("the script's command line parses differently from the launch", argv=command)


def _check_yaml(text: str, expected: dict[str, Any], *, rest: list[str]) -> None:
    """Parse the config the way ``launch_server --config FILE [REST]`` does and compare with the argv."""
    with tempfile.TemporaryDirectory(prefix="autotune-export-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(text)
        parsed = sglang_args.parse_server_args(["--config", str(path), *rest])
    if parsed != expected:
        diff = sorted(k for k in set(parsed) | set(expected) if parsed.get(k) != expected.get(k))
        raise LaunchArgsError(f"the --config file parses differently from the command line: {diff}")
