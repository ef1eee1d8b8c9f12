"""Whether ``measure.standby`` may be used for the search that follows, from scripts/gpu/standby_ab.py's JSON.

    python3 scripts/gpu/standby_verdict.py AB [AB ...] [--space SPACE --write]

AB is an A/B's ``standby-ab.json`` or, where the JSON was lost, its printed ``standby-ab.log`` (the
``cycle=... | kind=...`` rows carry every field the rule reads). Several A/Bs are judged as one: their
runs pooled, each kind's median over all of them (one A/B of 1-2 servers a kind cannot resolve the
tok/s bound below; see TOK_S_PCT).

The plan that measures the cost per answer (scripts/gpu/plan_cost.sh with ``AUTOTUNE_STANDBY_AB_S``)
runs the A/B first on the same GPU and asks this script; so the rule is written down before the
figures are seen, and the search runs with a standby only where it passes. A standby passes when:

- every run succeeded, and every ``standby`` run was launched by its standby (``used``);
- a standby waiting beside a measured server took no CPU over the measurement (at most
  ``CPU_S``) and held no GPU memory (0 MiB by nvidia-smi: no CUDA context, so the next server's
  KV pool is not shrunk); on a real GPU an unmeasured GPU figure fails, on the emulator it is
  not asked;
- SGLang sized the same KV pool (``max_total_num_tokens``) for every run;
- the median tok/s of the ``fresh`` and the ``standby`` runs is within ``TOK_S_PCT`` of the ``off``
  runs' median (an idle standby beside a server does not slow it);
- the ``standby`` runs' median start-up is below the ``off`` runs' (else it buys nothing).

Exit 0 and "PASS" when it passes, 1 and every reason when it does not. With ``--write`` the space
the search should run is written beside SPACE and its path printed last: ``.NAME-standby.yaml``
(``measure.standby: true``) on a pass, ``.NAME-no-standby.yaml`` (``false``) on a fail, so that a
failed verdict also overrides the backend's default (on for SGLang since 2026-12-05).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

#: CPU seconds a waiting standby may take over a measurement (its blocked read of stdin takes none).
CPU_S = 0.1
#: How far the runs measured with a standby beside them may read from the runs without one: the
#: 4 x 768-token window's repeats ranged 1.8% on the H200, a 2 x 256 one more, so 1.5% on medians.
TOK_S_PCT = 1.5


def _cell(text: str) -> Any:
    if text == "-":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return float(text)
    except ValueError:
        return text


def rows_from_log(text: str) -> list[dict[str, Any]]:
    """The runs standby_ab.py printed, one ``cycle=0 | kind=fresh | ok=True | ...`` line each."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("cycle=") or " | kind=" not in line:
            continue
        row = {k: _cell(v) for k, _, v in (cell.strip().partition("=") for cell in line.split(" | "))}
        row["cycle"] = int(row["cycle"])
        rows.append(row)
    return rows


def load(path: Path) -> dict[str, Any]:
    """One A/B from its JSON or its printed log (``ValueError`` if it holds no run)."""
    text = path.read_text()
    if path.suffix == ".json":
        ab: dict[str, Any] = json.loads(text)
        return ab
    rows = rows_from_log(text)
    if not rows:
        raise ValueError("no 'cycle=N | kind=...' row in it: not standby_ab.py's printed output")
    # The log's set-up lines name nvidia-smi's GPU only on a real GPU (the emulator's dry run has none).
    return {"backend": "sglang" if "NVIDIA" in text else "sim", "rows": rows}


def pooled(abs_: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Several A/Bs as one: every run kept, its cycle named by its file; a GPU if any ran on one."""
    if len(abs_) == 1:
        return abs_[0]
    rows = [{**r, "cycle": f"{name}:{r.get('cycle')}"}
            for ab, name in zip(abs_, names, strict=True) for r in ab.get("rows") or []]
    return {"backend": "sim" if all(ab.get("backend") == "sim" for ab in abs_) else "sglang", "rows": rows}


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def waiting_failures(rows: list[dict[str, Any]], *, on_gpu: bool, who: str = "the waiting standby") -> list[str]:
    """Where ``who``, waiting beside a run's measurement, took more than ``CPU_S`` CPU seconds or held
    GPU memory (an unmeasured GPU figure fails on a real GPU, not on the emulator)."""
    why = []
    for r in rows:
        where = f"cycle {r.get('cycle')} {r.get('kind')}"
        cpu = r.get("standby_cpu_s")
        if cpu is None or cpu > CPU_S:
            why.append(f"{where}: {who} took {cpu} CPU s over the measurement (at most {CPU_S})")
        gpu = r.get("standby_gpu_mib")
        if (gpu is None and on_gpu) or (gpu is not None and gpu > 0):
            why.append(f"{where}: {who} held {gpu} MiB of GPU memory (0 expected)")
    return why


def pool_failures(rows: list[dict[str, Any]], *, on_gpu: bool) -> list[str]:
    """Unless SGLang sized one KV pool for every run that succeeded (unknown fails on a GPU)."""
    pools = {r.get("max_total_num_tokens") for r in rows if r.get("ok")}
    if len(pools) > 1 or (on_gpu and None in pools):
        return [f"the KV pools differ: max_total_num_tokens {sorted(pools, key=str)}"]
    return []


def tok_s_gap_pct(mine: float | None, reference: float | None) -> float | None:
    """How far ``mine`` reads from ``reference`` in percent where that is more than ``TOK_S_PCT``;
    None where it is within, or either is unknown."""
    if mine is None or reference is None:
        return None
    pct = 100.0 * (mine / reference - 1.0)
    return pct if abs(pct) > TOK_S_PCT else None


def failures(ab: dict[str, Any]) -> list[str]:
    """Every reason the A/B in ``ab`` (standby-ab.json) does not let a search use a standby; [] if it does."""
    rows: list[dict[str, Any]] = ab.get("rows") or []
    on_gpu = ab.get("backend") != "sim"
    kinds = {k: [r for r in rows if r.get("kind") == k] for k in ("off", "fresh", "standby")}
    why = [f"no {k} run" for k, mine in kinds.items() if not mine]
    why += [f"cycle {r.get('cycle')} {r.get('kind')} failed: {r.get('reason')}" for r in rows if not r.get("ok")]
    why += [f"cycle {r.get('cycle')}: the standby did not launch the server ({r.get('standby')})"
            for r in kinds["standby"] if not r.get("used")]
    why += waiting_failures(kinds["fresh"] + kinds["standby"], on_gpu=on_gpu)
    why += pool_failures(rows, on_gpu=on_gpu)
    off = _median(kinds["off"], "tok_s")
    for kind in ("fresh", "standby"):
        mine = _median(kinds[kind], "tok_s")
        if (pct := tok_s_gap_pct(mine, off)) is not None:  # a missing run is said above
            why.append(f"{kind} read {mine:.1f} tok/s against {off:.1f} without a standby ({pct:+.2f}%, "
                       f"at most {TOK_S_PCT}%)")
    off_s, on_s = _median(kinds["off"], "startup_s"), _median(kinds["standby"], "startup_s")
    if off_s is not None and on_s is not None and on_s >= off_s:
        why.append(f"the standby's launches started in {on_s:.1f} s against {off_s:.1f} s without one: no saving")
    return why


def describe(ab: dict[str, Any]) -> list[str]:
    """Each kind's runs, tok/s median and range, start-up median: what the rule's medians stand on
    (a bound narrower than one kind's own range is below the A/B's resolving power)."""
    lines = []
    for kind in ("off", "fresh", "standby"):
        mine = [r for r in ab.get("rows") or [] if r.get("kind") == kind and r.get("ok")]
        tok = [float(r["tok_s"]) for r in mine if r.get("tok_s") is not None]
        start = _median(mine, "startup_s")
        if not tok:
            lines.append(f"{kind}: {len(mine)} runs, no tok/s")
            continue
        spread = 100.0 * (max(tok) - min(tok)) / statistics.median(tok)
        lines.append(f"{kind}: {len(mine)} runs, tok/s median {statistics.median(tok):.1f} "
                     f"(range {min(tok):.1f}-{max(tok):.1f}, {spread:.1f}%), start-up median "
                     + (f"{start:.1f} s" if start is not None else "-"))
    return lines


def write_space(space: Path, *, standby: bool) -> Path:
    """``space`` with ``measure.standby`` set to ``standby``, written beside it (its relative paths
    stay right)."""
    data = yaml.safe_load(space.read_text())
    data["measure"] = {**(data.get("measure") or {}), "standby": standby}
    out = space.parent / f".{space.stem}-{'standby' if standby else 'no-standby'}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ab", type=Path, nargs="+", help="standby-ab.json, or its printed standby-ab.log")
    ap.add_argument("--space", type=Path)
    ap.add_argument("--write", action="store_true",
                    help="write the space with measure.standby on (PASS) or off (FAIL); its path printed last")
    args = ap.parse_args(argv)
    if args.write and args.space is None:
        ap.error("--write needs --space")
    abs_ = []
    for path in args.ab:
        try:
            abs_.append(load(path))
        except (OSError, ValueError) as exc:
            print(f"FAIL: no A/B to judge ({path}: {exc})")
            if args.write:
                print(write_space(args.space, standby=False))
            return 1
    ab = pooled(abs_, [str(p) for p in args.ab])
    why = failures(ab)
    if why:
        print("FAIL: the search runs without a standby")
        for line in why:
            print(f"  - {line}")
        for line in describe(ab):
            print(f"  {line}")
        if args.write:
            print(write_space(args.space, standby=False))
        return 1
    print("PASS: every check of the standby held (scripts/gpu/standby_verdict.py)")
    for line in describe(ab):
        print(f"  {line}")
    if args.write:
        print(write_space(args.space, standby=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
