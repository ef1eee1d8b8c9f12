"""What a trial's nested run gets when its result is logged: tags, metrics, params and artifacts.

:meth:`autotune.tracking.tracker.Tracker.log_trial` finds or creates the run (it keeps the
trial-id cache); :func:`log_result` writes the result on it, so the tracker holds the runs'
bookkeeping and this module the shape of one trial run. Also the checks on a trial id and a run
kind that every trial call makes first.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.figures import finite, shown
from autotune.launch.spec import LaunchSpec
from autotune.tracking.content import context_tags, level_statuses, param_text, trial_metrics, trial_params
from autotune.tracking.runs import (
    METRIC_RANK,
    TAG_ACCEPTANCE,
    TAG_ATTEMPT,
    TAG_BACKEND,
    TAG_CONFIRMED,
    TAG_IS_BASELINE,
    TAG_KIND,
    TAG_LEVEL_STATUS,
    TAG_LOAD,
    TAG_LOAD_CAPPED,
    TAG_LOAD_COMPARISON,
    TAG_PARENT,
    TAG_REASON,
    TAG_SEARCH_NAME,
    TAG_SEARCHED,
    TAG_STALE_METRICS,
    TAG_STATUS,
    TAG_SYNTHETIC_ACCEPT,
    TAG_TRIAL_ID,
    TRIAL_KINDS,
)
from autotune.tracking.store import MAX_TAG, log_batch, new_params, retry
from autotune.trial.level_results import LoadLevel
from autotune.trial.outcome import Status

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from autotune.trial.result import TrialResult

_TRIAL_ID = re.compile(r"[A-Za-z0-9_.:@+-]{1,200}")


def check_trial_id(trial_id: str) -> None:
    """Raise ValueError unless ``trial_id`` is 1-200 characters MLflow filters can quote."""
    if not isinstance(trial_id, str) or not _TRIAL_ID.fullmatch(trial_id):
        raise ValueError(f"trial id {trial_id!r} must be 1-200 letters, digits or _.:@+- characters")


def check_kind(kind: str) -> None:
    """Raise ValueError unless ``kind`` is a trial run's kind."""
    if kind not in TRIAL_KINDS:
        raise ValueError(f"run kind {kind!r} is unknown; use one of {', '.join(TRIAL_KINDS)}")


def start_params(spec: LaunchSpec | None, params: Mapping[str, Any] | None) -> dict[str, str]:
    """The params a trial's run gets when it starts: its launch's args and env, and its sampled values."""
    logged = {}
    if spec is not None:
        logged["model_path"] = spec.model_path
        logged.update({k: param_text(v) for k, v in spec.server_args.items() if v is not None})
        logged.update(spec.env)
    logged.update({k: param_text(v) for k, v in (params or {}).items() if v is not None})
    return logged


def create_run(client: MlflowClient, experiment_id: str, parent: str, trial_id: str, *, kind: str, search: str,
               params: Mapping[str, Any], run_name: str | None, started_ms: int | None) -> str:
    """Make a trial's nested run under the search run ``parent``; returns its id.

    Its name is ``run_name``, else ``<kind> <trial_id> <params>``; it starts at ``started_ms`` (the
    trial's own start, :func:`run_times`; now if None): MLflow cannot move a run's start later.
    """
    label = " ".join(f"{k}={v}" for k, v in params.items() if v is not None)
    name = run_name or f"{kind} {trial_id}" + (f" {label}" if label else "")
    tags = {TAG_PARENT: parent, TAG_TRIAL_ID: trial_id, TAG_KIND: kind, TAG_SEARCH_NAME: search, **context_tags()}
    run = retry(lambda: client.create_run(experiment_id, tags=tags, run_name=name[:250], start_time=started_ms))
    return str(run.info.run_id)


def run_times(result: TrialResult) -> tuple[int | None, int | None]:
    """A trial run's start and end in milliseconds since the epoch: the trial's own, as it measured
    them (``started_at``, plus ``duration_s`` for the end); None for what it does not know.

    MLflow's Duration column is end minus start: set from these, it is the trial's, not the
    moment its result reached MLflow (under a second for a trial of many).
    """
    start = finite(result.started_at)
    if start is None:
        return None, None
    took = finite(result.duration_s)
    return int(start * 1000), (int((start + took) * 1000) if took is not None and took >= 0 else None)


def log_result(client: MlflowClient, run_id: str, trial_id: str, result: TrialResult, *, kind: str,
               spec: LaunchSpec | None, confirmed: bool | None, tags: Mapping[str, str] | None,
               finish: bool, attempt: int | None = None, at_ms: int | None = None) -> None:
    """Write a trial's result on its run (the arguments are :meth:`Tracker.log_trial`'s).

    The run gets params (every server arg and env var of the launch), the known metrics
    (:func:`~autotune.tracking.content.trial_metrics`), the status and reason tags, and the
    artifacts ``launch.sh``, ``launch.json`` (what export reads), ``result.json``, ``phases.json``,
    ``phases.png``, ``server_log_tail.txt`` and ``requests.jsonl`` (each only when there is
    something to put in it). A run logged again keeps one run: tags and artifacts are replaced,
    metrics get a new step (each value rounded by :func:`autotune.figures.shown`), and metrics the
    new result does not know are listed in
    ``autotune.stale_metrics`` so readers ignore their old values. Every attempt's
    ``result.json`` is also kept as ``attempts/<n>/result.json``, so a retried trial loses none.

    ``attempt`` and ``at_ms`` (the spool's, :mod:`autotune.tracking.durable`) make a replay write
    the same values again (MLflow keeps one copy of a metric with the same step, time and value);
    without them the attempt is the run's last plus one, at the present time. The run ends at the
    trial's own end (:func:`run_times`) when it knows it.
    """
    existing = retry(lambda: client.get_run(run_id))
    if attempt is None:
        attempt = int(existing.data.tags.get(TAG_ATTEMPT, "0")) + 1
    metrics = trial_metrics(result)
    # The rank is the search's (its end sets it), not the result's: not stale when a result lacks it.
    stale = sorted(set(existing.data.metrics) - set(metrics) - {"output_tok_s_repeat", METRIC_RANK})
    run_tags = {
        TAG_KIND: kind, TAG_STATUS: result.status, TAG_REASON: (result.reason or "")[:MAX_TAG],
        TAG_IS_BASELINE: str(bool(result.is_baseline)).lower(), TAG_ATTEMPT: str(attempt),
        TAG_SEARCHED: json.dumps(sorted(result.params or {})),
        TAG_STALE_METRICS: json.dumps(stale),
        "mlflow.note.content": _note(result)[:MAX_TAG],
    }
    if result.feasible is not None:
        run_tags["autotune.feasible"] = str(bool(result.feasible)).lower()
    if result.failure:
        run_tags["autotune.failure"] = result.failure
    if result.slo_violations:
        run_tags["autotune.slo_violations"] = "; ".join(result.slo_violations)[:MAX_TAG]
    if spec is not None:
        run_tags[TAG_BACKEND] = spec.backend
    if result.phases and "device_timer" in result.phases:
        run_tags["autotune.device_timer"] = str(bool(result.phases["device_timer"])).lower()
    if confirmed is not None:
        run_tags[TAG_CONFIRMED] = str(bool(confirmed)).lower()
    if result.acceptance is not None:
        run_tags[TAG_ACCEPTANCE] = result.acceptance
    if result.synthetic_accept_length is not None:
        run_tags[TAG_SYNTHETIC_ACCEPT] = f"{result.synthetic_accept_length:g}"
    if result.load_capped is not None:
        run_tags[TAG_LOAD_CAPPED] = str(bool(result.load_capped)).lower()
    if result.load_note:
        run_tags[TAG_LOAD] = result.load_note[:MAX_TAG]
    if result.load_comparison:
        run_tags[TAG_LOAD_COMPARISON] = result.load_comparison[:MAX_TAG]
    if result.window is not None:
        # Which window output_tok_s is over (autotune.trial.window), and why whole where steady was asked.
        run_tags["autotune.window"] = (result.window + (f": {result.window_reason}" if result.window_reason
                                                        else ""))[:MAX_TAG]
    if result.levels:
        run_tags[TAG_LEVEL_STATUS] = json.dumps(level_statuses(result))
    if result.sequential:
        # How its rounds ended (autotune.trial.sequential): stop-worse is a trial aborted early.
        run_tags["autotune.sequential"] = str(result.sequential.get("decision"))
        run_tags["autotune.rounds"] = str(result.sequential.get("rounds"))
    level_rounds = {LoadLevel.of_record(lv).label: {k: lv["sequential"].get(k) for k in ("decision", "rounds")}
                    for lv in result.levels or [] if isinstance(lv.get("sequential"), dict)}
    if level_rounds:
        # The other load levels measure in rounds too, each against its own incumbent.
        run_tags["autotune.level_rounds"] = json.dumps(level_rounds)[:MAX_TAG]
    run_tags.update(tags or {})
    now = at_ms or int(time.time() * 1000)
    from mlflow.entities import Metric

    metric_list = [Metric(k, shown(v), now, attempt - 1) for k, v in metrics.items()]
    metric_list += [Metric("output_tok_s_repeat", shown(x), now, i)
                    for i, v in enumerate(result.output_tok_s_repeats or []) if (x := finite(v)) is not None]
    log_batch(client, run_id, metrics=metric_list, tags=run_tags,
              params=new_params(existing, trial_params(result, spec)))
    _log_artifacts(client, run_id, trial_id, result, spec, attempt)
    if finish:
        status = run_status(result.status)
        ended = run_times(result)[1]
        retry(lambda: client.set_terminated(run_id, status=status, end_time=ended))


def run_status(status: str | None) -> str:
    """The MLflow ``RunStatus`` a trial run ends with, from autotune's verdict: ``FAILED`` for a failed
    trial, ``KILLED`` for one Ray Tune stopped from outside (a scheduler, ``budget.wall_time_s``: its
    objective is unknown, so the MLflow UI must not show it as a finished trial), else ``FINISHED``."""
    if status == Status.FAILED:
        return "FAILED"
    return "KILLED" if status == Status.STOPPED else "FINISHED"


def log_lost(client: MlflowClient, run_id: str, *, attempt: int | None, reason: str) -> None:
    """Record an attempt of a trial that ended without a result (Ray runs the trial again).

    The run gets ``attempts/<n>/lost.txt`` and, until a later attempt is logged over them, the
    tags of a failed trial; it is ended FAILED, so it is never left RUNNING. ``attempt`` None is
    the run's last plus one (as in :func:`log_result`).
    """
    if attempt is None:
        attempt = int(retry(lambda: client.get_run(run_id)).data.tags.get(TAG_ATTEMPT, "0")) + 1
    log_batch(client, run_id, tags={TAG_STATUS: Status.FAILED, TAG_REASON: reason[:MAX_TAG],
                                    TAG_ATTEMPT: str(attempt)})
    with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
        Path(tmp, "lost.txt").write_text(f"attempt {attempt} ended without a result: {reason}\n")
        retry(lambda: client.log_artifacts(run_id, tmp, f"attempts/{attempt}"))
    retry(lambda: client.set_terminated(run_id, status="FAILED"))


def _log_artifacts(client: MlflowClient, run_id: str, trial_id: str, result: TrialResult,
                   spec: LaunchSpec | None, attempt: int) -> None:
    from autotune.tracking import _plots

    with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
        out = Path(tmp)
        command = spec.shell_command() if spec is not None else result.launch_command
        if command:
            (out / "launch.sh").write_text("#!/usr/bin/env bash\n" + command)
        if spec is not None:
            (out / "launch.json").write_text(json.dumps(spec.to_json(), indent=2))
        (out / "result.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
        if result.phases:
            (out / "phases.json").write_text(json.dumps(result.phases, indent=2, default=str))
            # A picture is a convenience: a plotting library that cannot draw here (seen on
            # the GPU machine) must not cost the trial, which Ray would then run again.
            try:
                fig = _plots.phase_figure(result.phases, title=f"{trial_id} ({result.status})")
                if fig is not None:
                    fig.savefig(out / "phases.png", dpi=100)
            except Exception as exc:  # noqa: BLE001 - any plotting failure
                (out / "phases_png_error.txt").write_text(f"{type(exc).__name__}: {exc}\n")
        if result.log_tail:
            (out / "server_log_tail.txt").write_text(result.log_tail)
        if result.records:
            with open(out / "requests.jsonl", "w") as fh:
                fh.writelines(json.dumps(record, default=str) + "\n" for record in result.records)
        retry(lambda: client.log_artifacts(run_id, tmp))
        kept = Path(tmp, "attempt")
        kept.mkdir()
        (kept / "result.json").write_text((out / "result.json").read_text())
        retry(lambda: client.log_artifacts(run_id, str(kept), f"attempts/{attempt}"))


def _note(result: TrialResult) -> str:
    lines = [f"**{result.status}**" + (f": {result.reason}" if result.reason else "")]
    if result.status == Status.FAILED and result.log_tail:
        tail = "\n".join(result.log_tail.splitlines()[-20:])
        lines.append("Server log tail (full tail in server_log_tail.txt):\n\n```\n" + tail + "\n```")
    return "\n\n".join(lines)
