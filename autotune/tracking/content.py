"""What one trial run holds in MLflow, and what can be rebuilt from it. No MLflow import here.

:func:`trial_metrics` and :func:`trial_params` decide a trial run's metrics and params;
:func:`spec_from_argv` rebuilds a launch from the argv a result carries; :func:`study_from_runs`
rebuilds an Optuna study from runs read back, for the search-level plots; :func:`context_tags` says
who ran a search and from what code.
"""

from __future__ import annotations

import functools
import getpass
import json
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.backend import BACKENDS
from autotune.command_line import versions
from autotune.figures import finite
from autotune.launch.spec import LaunchSpec
from autotune.tracking.runs import (
    KIND_SEARCH,
    KIND_TRIAL,
    TAG_BACKEND,
    TAG_KIND,
    TAG_OBJECTIVE,
    TAG_SEARCH_NAME,
    TrialRun,
)
from autotune.trial.gpu_time import flat
from autotune.trial.level_results import LoadLevel, metric_suffix

if TYPE_CHECKING:
    from optuna import Study

    from autotune.trial.result import TrialResult

MAX_PARAM = 6000
"""MLflow's longest param value (mlflow.utils.validation)."""

_RESULT_METRICS = (
    "output_tok_s", "output_tok_s_spread", "decode_tok_s_p50", "decode_tok_s_p90",
    "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p90", "itl_ms_p99",
    "e2e_ms_p50", "e2e_ms_p90", "e2e_ms_p99", "completed", "failed_requests",
    "accept_length", "accept_length_meta_info", "accept_length_server_info",
    "break_even_accept_length", "speedup", "baseline_tok_s", "baseline_decode_step_ms",
    "duration_s", "startup_s",
    "gpu_util_pct_mean", "gpu_mem_peak_gib", "gpu_power_w_mean", "gpu_energy_j", "tok_s_per_w",
    "j_per_token",
    # The load the server really ran (autotune.profile.load.trial_load); capped_windows 0: none was.
    "load_asked", "load_cap", "load_ran", "load_queued", "load_tail_pct", "load_client_tail_pct",
    "load_capped_windows", "input_tokens_p10", "input_tokens_p50", "input_tokens_p90",
    # Both windows' figures (autotune.trial.window): output_tok_s is the one the tag autotune.window names.
    "output_tok_s_whole", "output_tok_s_steady", "output_tok_s_whole_spread_pct", "output_tok_s_whole_range_pct",
    "output_tok_s_steady_spread_pct", "output_tok_s_steady_range_pct", "steady_share_pct", "steady_waves",
)
# PhaseProfile.to_dict keys logged as phase_<key>.
_PHASE_METRICS = (
    "cycle_ms", "decode_cycle_ms", "draft_ms", "verify_ms", "extend_ms", "decode_ms", "prefill_ms",
    "gpu_other_ms", "other_ms", "draft_pct", "verify_pct", "extend_pct", "decode_pct", "prefill_pct",
    "gpu_other_pct", "other_pct", "cycles",
)


def search_tags(name: str, *, objective: tuple[str, str] | None, backend: str | None,
                more: Mapping[str, str]) -> dict[str, str]:
    """A new search run's tags: its kind and name, the context, the objective it ranks by (read
    back by the winner tags and the export) and its backend; ``more`` on top."""
    tags = {TAG_KIND: KIND_SEARCH, TAG_SEARCH_NAME: name, **context_tags(), **dict(more)}
    if objective is not None:
        tags[TAG_OBJECTIVE] = f"{objective[0]}:{objective[1]}"
    if backend:
        tags[TAG_BACKEND] = backend
    return tags


def trial_metrics(result: TrialResult) -> dict[str, float]:
    """The metrics of a trial run: every known figure, and nothing for an unknown one.

    Names are the :class:`~autotune.trial.result.TrialResult` field names, plus ``phase_<key>`` for the
    phase profile (``phase_draft_ms``, ``phase_draft_pct``, ``phase_cycle_ms``, ...) and the GPU
    time record's ``gpus``, ``gpu_s`` and ``time_<part>_s`` (:func:`autotune.trial.gpu_time.flat`).
    """
    out: dict[str, float] = {}
    for name in _RESULT_METRICS:
        value = finite(getattr(result, name, None))
        if value is not None:
            out[name] = value
    for key in _PHASE_METRICS:
        value = finite((result.phases or {}).get(key))
        if value is not None:
            out[f"phase_{key}"] = value
    for name, gpu_value in flat(getattr(result, "gpu_time", None)).items():
        if (value := finite(gpu_value)) is not None:
            out[name] = value
    out.update(level_metrics(result))
    return out


def level_metrics(result: TrialResult) -> dict[str, float]:
    """Each load level's known figures, named with the level's suffix (``speedup_c8``, ``speedup_r2``,
    :func:`autotune.trial.level_results.metric_suffix`); nothing for a single-level result."""
    out: dict[str, float] = {}
    for level in getattr(result, "levels", None) or []:
        suffix = metric_suffix(LoadLevel.of_record(level))
        for name in _RESULT_METRICS:
            value = finite(level.get(name))
            if value is not None:
                out[name + suffix] = value
        cycle = finite((level.get("phases") or {}).get("cycle_ms"))
        if cycle is not None:
            out["phase_cycle_ms" + suffix] = cycle
    return out


def level_statuses(result: TrialResult) -> dict[str, str]:
    """``{level key: verdict}`` of a result's levels (the tag ``autotune.level_status``; keys are
    :attr:`~autotune.trial.level_results.LoadLevel.key`: ``"8"``, ``"r2.5"``)."""
    return {LoadLevel.of_record(level).key: str(level["status"])
            for level in getattr(result, "levels", None) or []}


def param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def trial_params(result: TrialResult, spec: LaunchSpec | None) -> dict[str, str]:
    """The params of a trial run: every server arg and env var of its launch, by its own name.

    Server args use ServerArgs underscore names (``speculative_num_steps``, ``model_path``,
    ``speculative_draft_model_path``), env vars their own (``NCCL_ALGO``); the same names the search
    space uses. The port is left out: it is picked per run. Searched values with no launch
    (a trial that failed before it had one) come from ``result.params``.
    """
    out: dict[str, str] = {}
    if spec is not None:
        out["model_path"] = spec.model_path
        if spec.draft_model_path:
            out["speculative_draft_model_path"] = spec.draft_model_path
        for name, value in spec.server_args.items():
            if value is not None:
                out[name] = param_text(value)
        for name, value in spec.env.items():
            out[name] = value
    for name, value in (result.params or {}).items():
        if value is not None:
            out.setdefault(name, param_text(value))
    return {k: v[:MAX_PARAM] for k, v in out.items()}


def spec_from_argv(argv: list[str], env: Mapping[str, str] | None = None) -> LaunchSpec:
    """Rebuild a :class:`LaunchSpec` from the argv it rendered (``[python, "-m", module, ...]``).

    Values are typed by SGLang's flag table (int, float, switch); unknown flags keep their text.

    Raises:
        ValueError: For an argv that is not ``python -m <backend module> ...``.
    """
    from autotune.sglang import _parser_twin as builtin

    backends = {b.module: b.name for b in BACKENDS.values()}
    if len(argv) < 3 or argv[1] != "-m" or argv[2] not in backends:
        raise ValueError(f"not a server command (python -m {' | '.join(backends)} ...): {argv[:3]}")
    options = builtin.flags_by_option()
    words = argv[3:]
    args: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            raise ValueError(f"unexpected word {word!r} in the server command")
        info = options.get(word)
        values: list[str] = []
        i += 1
        while i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
        if info is None:
            name = word[2:].replace("-", "_")
            args[name] = values[0] if len(values) == 1 else (values or True)
            continue
        if info.arity in ("0", "D"):
            args[info.dest] = True
        elif info.arity == "B":
            args[info.dest] = not word.startswith("--no-")
        else:
            cast: Callable[[str], Any] = {"i": int, "f": float}.get(info.type_code, str)
            typed = [cast(v) for v in values]
            args[info.dest] = typed if info.arity in ("+", "*") else (typed[0] if typed else True)
    model = args.pop("model_path", None)
    if not model:
        raise ValueError("the server command has no --model-path")
    return LaunchSpec(model_path=str(model), draft_model_path=args.pop("speculative_draft_model_path", None),
                      host=str(args.pop("host", "127.0.0.1")), port=args.pop("port", None),
                      server_args=args, env=dict(env or {}), backend=backends[argv[2]])


def spec_of(result: TrialResult) -> LaunchSpec | None:
    """The launch of a result, rebuilt from its argv and env; None when it never had one."""
    if not result.argv:
        return None
    try:
        return spec_from_argv(list(result.argv), result.env)
    except ValueError:
        return None


@functools.cache
def context_tags() -> dict[str, str]:
    """Who ran a search and from what code, as tags on every run: MLflow's own ``mlflow.user`` and
    ``mlflow.source.git.commit`` (the checkout autotune runs from; left out for an installed
    package or without git), ``autotune.version`` and ``autotune.sglang_version``."""
    from autotune import __version__

    tags = {"autotune.version": __version__}
    sglang = versions().get("sglang")
    if sglang and sglang != "not installed":
        tags["autotune.sglang_version"] = sglang
    try:
        tags["mlflow.user"] = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name (a container without one): leave it out
        pass
    try:
        proc = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[2]), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        proc = None
    if proc is not None and proc.returncode == 0 and proc.stdout.strip():
        tags["mlflow.source.git.commit"] = proc.stdout.strip()
    return tags


def trial_point(run: TrialRun) -> Any:
    """The figures of a run that the search-level plots use (an ``autotune.tracking._plots.TrialPoint``)."""
    from autotune.tracking._plots import TrialPoint

    def as_int(name: str) -> int | None:
        try:
            return int(run.params[name])
        except (KeyError, ValueError):
            return None

    return TrialPoint(trial_id=run.trial_id or run.run_id, kind=run.kind, status=run.status,
                      steps=as_int("speculative_num_steps"), topk=as_int("speculative_eagle_topk"),
                      output_tok_s=run.output_tok_s, accept_length=run.metric("accept_length"),
                      break_even_accept_length=run.metric("break_even_accept_length"))


def study_from_runs(runs: Iterable[TrialRun]) -> Study | None:
    """An Optuna study rebuilt from trial runs, for the importance and slice plots.

    Searched parameters (``autotune.searched_params``) that took more than one value become
    distributions inferred from the logged values (int, float, or categorical text); the value
    is ``output_tok_s``. Trials without it are left out.

    Returns:
        The study, or None with fewer than two usable trials or no varying parameter.
    """
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    usable = [r for r in runs if r.kind == KIND_TRIAL and r.output_tok_s is not None]
    names = sorted({n for r in usable for n in r.searched})
    values = {n: [r.params[n] for r in usable if n in r.params] for n in names}
    dists: dict[str, Any] = {}
    for name, texts in values.items():
        if len(set(texts)) < 2:
            continue
        try:
            ints = [int(t) for t in texts]
            dists[name] = IntDistribution(min(ints), max(ints))
            continue
        except ValueError:
            pass
        try:
            floats = [float(t) for t in texts]
            dists[name] = FloatDistribution(min(floats), max(floats))
        except ValueError:
            dists[name] = CategoricalDistribution(sorted(set(texts)))
    if len(usable) < 2 or not dists:
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", study_name="from-mlflow")
    for run in usable:
        params, own = {}, {}
        for name, dist in dists.items():
            if name not in run.params:
                continue
            text = run.params[name]
            params[name] = (int(text) if isinstance(dist, IntDistribution) else
                            float(text) if isinstance(dist, FloatDistribution) else text)
            own[name] = dist
        study.add_trial(optuna.trial.create_trial(params=params, distributions=own, value=run.output_tok_s))
    return study


__all__ = ["MAX_PARAM", "context_tags", "param_text", "spec_from_argv", "spec_of", "study_from_runs",
           "trial_metrics", "trial_params", "trial_point"]
