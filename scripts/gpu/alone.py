"""After a concurrent search (``real_search.py --alone``): when each trial ran, on which GPU, and
the same configs measured again alone, each on the GPU its trial had (the two-GPU plan).

Two trials at once on two GPUs answer two questions only if the records say where and when each
ran: ``concurrency.json`` lists, per trial, the GPUs Ray gave its server
(``gpu_telemetry.cuda_visible_devices``, recorded by every measurement) and the wall-clock
interval of its own server (Ray's end time less the record's ``duration_s``; a trial that first
waited for the shared baseline started earlier). ``alone/aNN.json`` then holds the same config
measured by ``python -m autotune.trial`` with ``CUDA_VISIBLE_DEVICES`` set to that GPU and no other
server running, against the search's own baseline store; ``scripts/gpu/tp_compare.py`` sets the
two readings side by side. The GPUs of one host can differ, which is why the alone run uses the
trial's own GPU rather than the first.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any, Callable


def trial_rows(name: str, root: Path | None = None) -> list[dict[str, Any]]:
    """Every trial Ray reported for search ``name``: its record, Ray's end time and total time."""
    root = root or Path.cwd()
    rows = []
    for path in sorted(glob.glob(str(root / "mlruns" / "ray" / name / "run-*" / "**" / "result.json"),
                                 recursive=True)):
        for line in Path(path).read_text().splitlines():
            try:
                row = json.loads(line)
                record = json.loads(row["trial_result"])
            except (ValueError, KeyError, TypeError):
                continue
            rows.append({"trial_id": row.get("trial_id"), "end": row.get("timestamp"),
                         "trial_s": row.get("time_total_s"), "record": record})
    return rows


def gpus_of(record: dict[str, Any]) -> str | None:
    """The CUDA_VISIBLE_DEVICES a measurement's server ran with (None: not recorded, or unset)."""
    return (record.get("gpu_telemetry") or {}).get("cuda_visible_devices")


def timeline(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trial: config, GPUs, and the wall-clock interval of its own server (seconds since epoch)."""
    out = []
    for row in rows:
        rec = row["record"]
        end, dur = row.get("end"), rec.get("duration_s")
        out.append({"trial_id": row["trial_id"], "params": rec.get("params"), "status": rec.get("status"),
                    "is_baseline": rec.get("is_baseline"), "gpus": gpus_of(rec),
                    "server_start": end - dur if end is not None and dur is not None else None,
                    "server_end": end, "output_tok_s": rec.get("output_tok_s")})
    return out


def overlap_s(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Seconds two servers' intervals share (None when either is unknown)."""
    if None in (a["server_start"], a["server_end"], b["server_start"], b["server_end"]):
        return None
    return max(0.0, min(a["server_end"], b["server_end"]) - max(a["server_start"], b["server_start"]))


def measure_alone(plan: Any, space: Any, space_path: str, out: Path, *, store: str | None,
                  measure: Callable[..., tuple[int, float]], trial_s: float) -> None:
    """Write ``concurrency.json`` and measure each config the search measured alone, on its GPU.

    ``measure`` is ``real_search.measure`` (it takes ``env`` for the GPU); a config is not begun
    with less than ``trial_s`` left. A slot finished on an earlier machine is kept when the plan
    resumes.
    """
    rows = trial_rows(space.name)
    lines = timeline(rows)
    (out / "concurrency.json").write_text(json.dumps(lines, indent=1))
    folder = out / "alone"
    folder.mkdir(parents=True, exist_ok=True)
    todo = [t for t in lines if not t["is_baseline"] and t["status"] != "failed" and t["params"]]
    plan.note(space=space.name, step="alone-plan", trials=len(lines), to_measure=len(todo),
              gpus=sorted({t["gpus"] or "?" for t in lines}))
    for i, trial in enumerate(todo):
        tag = folder / f"a{i:02d}"
        params = trial["params"]
        if plan.resume and _done(tag, params):
            plan.note(space=space.name, step="alone", config=params, kept="measured on an earlier machine")
            continue
        if plan.left() < trial_s:
            plan.note(space=space.name, step="alone", skipped=len(todo) - i, why=f"{plan.left():.0f} s left")
            break
        tag.with_suffix(".params.json").write_text(json.dumps({"params": params, "gpus": trial["gpus"],
                                                               "trial_id": trial["trial_id"]}))
        env = {"CUDA_VISIBLE_DEVICES": trial["gpus"]} if trial["gpus"] is not None else {}
        rc, wall = measure(plan, space_path, params, store=store or str(out / "baselines"),
                           json_out=tag.with_suffix(".json"), workdir=folder / f"a{i:02d}-logs", env=env)
        plan.note(space=space.name, step="alone", config=params, gpus=trial["gpus"], rc=rc, wall_s=wall)


def _done(tag: Path, params: dict) -> bool:
    try:
        same = json.loads(tag.with_suffix(".params.json").read_text())["params"] == params
        return same and "status" in json.loads(tag.with_suffix(".json").read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return False
