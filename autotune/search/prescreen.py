"""The NCCL pre-screen of a search: probe the space's NCCL_* combinations, keep the best K.

A space with ``nccl_prescreen: {keep: K}`` is probed before its first trial: every allowed
combination of its NCCL_* parameters is measured by :mod:`autotune.nccl.probe` in a Ray task
holding the GPUs of one trial of the largest tp_size (the ``sim`` backend models the emulator's
NCCL term instead; ``gloo`` measures CPU processes). The best K combinations by decode-size
all-reduce latency are written as ``nccl_prescreen.kept`` into a narrowed copy of the space in
the search's experiment directory, which every trial then loads (``autotune.space._nccl``). The
probe report, its table, the best and default latencies and the kept list go to the search's
MLflow parent run. A failed probe stops the search with :class:`PrescreenError`, and the parent
run is ended FAILED with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from autotune.backend import get_backend
from autotune.errors import AutotuneError
from autotune.nccl.probe import ProbeSettings, format_table, run_probe
from autotune.space.nccl_candidates import candidates_from_space, hidden_of_space
from autotune.space.search_space import load_space

if TYPE_CHECKING:
    from autotune.nccl.candidates import NcclCandidate
    from autotune.nccl.probe import ProbeSettings
    from autotune.space._schema_prescreen import NcclPrescreen
    from autotune.space.search_space import SearchSpace
from autotune.tracking.interface import SearchTracker

NARROWED_NAME = "space-nccl-prescreen.yaml"
REPORT_NAME = "nccl-probe.json"
_READY_ALLOWANCE_S = 180.0


class PrescreenError(AutotuneError):
    """The NCCL pre-screen could not rank any candidate; the search does not start."""


@dataclass(frozen=True)
class PrescreenOutcome:
    """What the pre-screen did.

    Attributes:
        kept: Kept candidate names, best first.
        report: The probe report (None when the space was narrowed already).
        narrowed_path: The narrowed space file the trials load.
        reused: True when a resumed search took the narrowed copy of its first session.
    """

    kept: tuple[str, ...]
    report: dict[str, Any] | None
    narrowed_path: str
    reused: bool = False


def _probe_task(candidates: list[NcclCandidate], settings: ProbeSettings,
                forbidden_env: dict[str, Any]) -> dict[str, Any]:
    """Runs in a Ray worker on the GPUs Ray gave it (CUDA_VISIBLE_DEVICES is set by Ray)."""
    return run_probe(candidates, settings, forbidden_env=forbidden_env)


def _section(space: SearchSpace) -> NcclPrescreen:
    """The space's ``nccl_prescreen`` section: only a space that has one is prescreened."""
    if space.nccl_prescreen is None:
        raise ValueError(f"space {space.name} has no nccl_prescreen section")
    return space.nccl_prescreen


def probe_backend(space: SearchSpace) -> str:
    """The probe backend of a space: ``auto`` is sim on the emulator and nccl otherwise."""
    backend = _section(space).backend
    if backend == "auto":
        return "sim" if get_backend(space.backend).emulated else "nccl"
    return backend


def probe_space(space: SearchSpace) -> dict[str, Any]:
    """Run the NCCL probe on ``space``'s candidates as a Ray task; returns the report.

    Ray must be initialised. The task asks for ``tp`` GPUs with the nccl backend, none
    otherwise.
    """
    import ray

    pre = _section(space)
    tp = max(space.tp_sizes())
    backend = probe_backend(space)
    candidates = candidates_from_space(space)
    settings = ProbeSettings(tp=tp, hidden=hidden_of_space(space), tokens=tuple(pre.tokens),
                             iters=pre.iters, warmup=pre.warmup, rounds=pre.rounds,
                             backend=backend,
                             timeout_s=pre.timeout_s, profile=space.profile)
    try:
        settings.check()
    except ValueError as exc:
        raise PrescreenError(f"cannot probe this space: {exc}") from None
    task = ray.remote(num_cpus=1, num_gpus=tp if backend == "nccl" else 0,
                      max_retries=0)(_probe_task)
    ref = task.remote(candidates, settings, dict(space.forbidden.env))
    limit = pre.rounds * len(candidates) * (pre.timeout_s + _READY_ALLOWANCE_S) + 120.0
    try:
        return ray.get(ref, timeout=limit)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        raise PrescreenError(f"the NCCL probe did not finish within {limit:.0f} s") from None
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        raise PrescreenError(f"the NCCL probe failed: {type(cause).__name__}: {cause}") from None
    except ray.exceptions.RayError as exc:  # its worker died (OOM kill, node lost), say
        raise PrescreenError(f"the NCCL probe's Ray task was lost: {type(exc).__name__}: "
                             f"{exc}") from None


def choose_kept(report: dict[str, Any], keep: int) -> list[str]:
    """The best ``keep`` candidates; unless the best beat the default in every round of the probe
    (``spread.separated`` True), the default stays in, in place of the last one, so neither noise
    nor a single round (separation unknown) narrows the search away from what runs without any
    NCCL setting."""
    kept = list(report["ranking"][:keep])
    default = (report.get("default") or {}).get("name")
    if (report["spread"].get("separated") is not True and default in report["ranking"]
            and default not in kept):
        kept[-1] = default
    return kept


def narrowed_data(space: SearchSpace, kept: list[str]) -> dict[str, Any]:
    """The space file's content with ``nccl_prescreen.kept`` set and its paths made absolute.

    The copy lives in another folder, so every path the original resolved against its own
    folder is written resolved.
    """
    data = json.loads(json.dumps(space.raw))
    data["name"] = space.name
    data["model_path"] = space.model_path
    if space.draft_model_path is not None:
        data["draft_model_path"] = space.draft_model_path
    if space.profile is not None:
        data["profile"] = space.profile
    if "workload" in data:
        data["workload"] = dict(space.workload)
    data["nccl_prescreen"] = {**data.get("nccl_prescreen", {}), "kept": list(kept)}
    return data


def _write_narrowed(space: SearchSpace, kept: list[str], path: Path) -> None:
    import yaml

    header = ("# Written by the NCCL pre-screen of this search: the space as given, narrowed to the\n"
              f"# kept NCCL candidates (nccl_prescreen.kept). Original: {space.file}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(narrowed_data(space, kept), sort_keys=False))
    load_space(path)  # it must load, or no trial could


def run_prescreen(space: SearchSpace, *, exp_dir: Path, tracker: SearchTracker | None = None, restoring: bool = False,
                  out: TextIO | None = None) -> PrescreenOutcome | None:
    """Probe and narrow ``space`` when it asks for it; None when it does not.

    Args:
        space: The loaded space.
        exp_dir: The search's experiment directory (the narrowed copy and report go there).
        tracker: The search's tracking with its parent run started (or its start spooled), or None.
        restoring: A resumed search: reuse the narrowed copy of the first session.
        out: Where to print the table.

    Raises:
        PrescreenError: The probe failed or ranked nothing (the parent run is ended FAILED).
    """
    pre = space.nccl_prescreen
    if pre is None:
        return None
    if space.nccl_bundle is not None:
        # The file names its kept candidates already: nothing to probe.
        if tracker is not None:
            tracker.log_to_search(params={"nccl_prescreen_kept": json.dumps(list(pre.kept or ())),
                                          "nccl_prescreen_source": "space file"})
        return PrescreenOutcome(tuple(pre.kept or ()), None, str(space.file))
    path = exp_dir / NARROWED_NAME
    if restoring and path.is_file():
        before = _section(load_space(path)).kept or ()
        return PrescreenOutcome(tuple(before), None, str(path), reused=True)
    try:
        report = probe_space(space)
        kept = choose_kept(report, pre.keep)
        if not kept:
            reasons = "; ".join(f"{r['name']}: {r.get('reason')}" for r in report["rows"])
            raise PrescreenError(f"the NCCL probe measured no candidate ({reasons})")
    except PrescreenError as exc:
        if tracker is not None:
            tracker.log_to_search(tags={"autotune.nccl_prescreen": "failed"})
            tracker.fail_search(f"NCCL pre-screen: {exc}")
        raise
    except AutotuneError as exc:  # a space the probe cannot use (hidden size unknown, say)
        if tracker is not None:
            tracker.fail_search(f"NCCL pre-screen: {exc}")
        raise
    _write_narrowed(space, kept, path)
    (exp_dir / REPORT_NAME).write_text(json.dumps(report, indent=2))

    table = format_table(report)
    if out is not None:
        print(f"NCCL pre-screen: {len(report['rows'])} candidate(s), keeping {len(kept)}: "
              + ", ".join(kept), file=out)
        print(table, file=out, flush=True)
    if tracker is not None:
        spread = report["spread"]
        tracker.log_to_search(
            params={"nccl_prescreen_kept": json.dumps(kept),
                    "nccl_prescreen_backend": report["args"]["backend"],
                    "nccl_prescreen_candidates": len(report["rows"])},
            metrics={f"nccl_best_{spread['phase']}_us": spread["best_us"],
                     f"nccl_default_{spread['phase']}_us": spread["default_us"],
                     "nccl_default_over_best": spread["default_over_best"],
                     "nccl_probe_rounds": spread.get("rounds"),
                     "nccl_probe_wall_s": report["wall_s"]},
            tags={"autotune.nccl_prescreen": "ok",
                  "autotune.nccl_prescreen_separated": str(spread.get("separated"))},
            files={REPORT_NAME: exp_dir / REPORT_NAME, NARROWED_NAME: path},
            texts={"nccl-probe.txt": table + "\n"}, artifact_dir="nccl_prescreen")
    return PrescreenOutcome(tuple(kept), report, str(path))
