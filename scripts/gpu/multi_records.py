"""Reading a multi-GPU plan's records back (two or eight H200s), for tp_compare.py and kimi_compare.py.

A plan's results folder (``results.tar.gz`` of a call, unpacked) holds, per space, ``search/sNN.json``
(the search's trials and baselines as ``python -m autotune.trial --json`` records), ``sweep/cNN.json``,
``alone/aNN.json`` and ``summary.json``; Ray's state and the NCCL pre-screen's report are under
``mlruns/`` (``mlruns.tar.gz``, unpacked into the same folder, or given apart).
"""

from __future__ import annotations

import dataclasses
import glob
import json
from pathlib import Path
from typing import Any

SPEC_KEYS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def load_folder(folder: Path, pattern: str) -> list[dict[str, Any]]:
    """Every record ``folder/pattern`` holds, in name order; unfinished slots (empty, or not a
    record) and the ``.params.json`` files beside them are left out."""
    out = []
    for path in sorted(folder.glob(pattern)):
        if path.name.endswith(".params.json"):
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "status" in record:
            record["_file"] = str(path)
            out.append(record)
    return out


def space_dir(results: Path, space_name: str) -> Path:
    """``results/rs-*/<space name>``: where real_search.py wrote that space's records."""
    found = sorted(results.glob(f"rs-*/{space_name}"))
    if not found:
        raise FileNotFoundError(f"no rs-*/{space_name} under {results}")
    return found[-1]


def records(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The search's, the sweep's and the alone step's records of one space folder."""
    return {"search": load_folder(folder / "search", "s*.json"),
            "sweep": load_folder(folder / "sweep", "c*.json"),
            "alone": load_folder(folder / "alone", "a*.json")}


def label(params: dict[str, Any] | None) -> str:
    """``plain`` or ``steps-topk-draft`` of a record's params (speculation may be fixed by the
    space, so missing speculative values read ``?``)."""
    params = params or {}
    if "speculative_algorithm" in params and params["speculative_algorithm"] is None:
        return "plain"
    if not any(k in params for k in SPEC_KEYS):
        return "plain" if params.get("speculative_algorithm", "x") is None else "spec"
    return "-".join(str(params.get(k, "?")) for k in SPEC_KEYS)


def decode_cycle_ms(record: dict[str, Any]) -> float | None:
    """A cycle's draft + verify + re-extend (or a plain decode step) + other ms, without the
    prefill share the tool's ``cycle_ms`` also spreads over it: the cycle the seed's profiler
    and the emulator count."""
    ph = record.get("phases") or {}
    parts = [ph.get(k) for k in ("draft_ms", "verify_ms", "extend_ms", "decode_ms", "other_ms")]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def verify_share(record: dict[str, Any]) -> float | None:
    """Verify's percent of :func:`decode_cycle_ms` (None for plain decoding, which has no verify)."""
    if record.get("is_baseline"):
        return None
    cycle, verify = decode_cycle_ms(record), (record.get("phases") or {}).get("verify_ms")
    return 100.0 * verify / cycle if cycle and verify is not None else None


def fmt(value: Any, spec: str = ".1f") -> str:
    """A number for a table; ``-`` for unknown (never 0)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ray_file(mlruns: Path, space_name: str, name: str) -> Path | None:
    """The newest ``mlruns/ray/<space>/run-*/<name>`` (the pre-screen's report, its narrowed space)."""
    found = sorted(glob.glob(str(mlruns / "ray" / space_name / "run-*" / name)))
    return Path(found[-1]) if found else None


def evaluator(space: Any, profile: Any) -> Any:
    """The emulator's model-only evaluator of ``space`` on ``profile``, noise-free."""
    from autotune.sim.evaluate import ModelEvaluator

    return ModelEvaluator(space, profile=profile)


def replace_profile(profile: Any, **changes: Any) -> Any:
    return dataclasses.replace(profile, **changes)


def write_profile(profile: Any, path: Path) -> None:
    """A profile as a YAML file the emulator loads (``profile: PATH`` in a sim space)."""
    import yaml

    data = profile.to_dict()
    data["draft_architectures"] = list(data["draft_architectures"])
    for section in ("nccl",):
        for key in ("algo", "proto"):
            data[section][key] = {k: list(v) for k, v in data[section][key].items()}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
