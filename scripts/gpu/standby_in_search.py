"""The standby's checks read from a real search's own records and server logs (``measure.standby`` on).

    python3 scripts/gpu/standby_in_search.py DIR [--reference REF]

DIR and REF are GPU plan results unpacked here (``rs-NAME/NAME/search/s*.json`` and the server logs
somewhere below). Where a search ran with a standby and no A/B before it (``plan_cost.sh`` with
``AUTOTUNE_STANDBY=on``), these are the A/B's checks (``standby_verdict.py``) as the search itself
recorded them, one row per server in launch order:

- whether a standby launched it (``used``, or why not) and SGLang's launcher stage (the imports a
  standby does ahead: about 0 s when it did, 16-20 s warm on the H200 when it did not);
- the CPU seconds the next server's standby took while this one was measured (at most
  ``standby_verdict.CPU_S``);
- the KV pool SGLang sized (``max_total_num_tokens`` in the log). A standby holding a CUDA context
  beside a server's start-up would shrink it; with ``--reference``, each config's pool is held
  against the same config's (or, for one not measured there, the same kind's: baseline or
  speculative) in a search that ran without a standby, on the same GPU model and flags.

- how its child processes started (forked from the fork server or spawned) and, for a forked child
  of a space with synthetic acceptance, the value it bound again in place of the fork server's
  probe (``rebound``), beside the config's forced accept length and the one measured: a child that
  kept the probe's binding would simulate an accept length of about 1.

Exit 1 when a check fails: a standby took CPU over a measurement, a pool differs from the
reference's, a child bound another value than its config's, or a measured accept length is more
than ``ACCEPT_REL`` from the forced one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parents[1]))

from collect_search import label  # noqa: E402
from standby_verdict import CPU_S  # noqa: E402
from startup_ab import fmt_cell  # noqa: E402
from startup_breakdown import breakdown  # noqa: E402

from autotune.sglang.speculative import SIMULATE_ACC_LEN_ENV  # noqa: E402
from autotune.sglang.speculative import SIMULATE_ACC_LEN_UNSET as UNSET  # noqa: E402  (a baseline's reading)

POOL = re.compile(r"max_total_num_tokens=(\d+)")
BOUND = re.compile(rf"^{SIMULATE_ACC_LEN_ENV}: \S+ \(the fork server's probe\) -> (\S+) in ")
#: SGLang's `match-expected` simulation against the forced mean: +0.00% to +0.75% on the four
#: speculative servers of the twenty-second session's H200 search (children spawned, nothing rebound).
ACCEPT_REL = 0.02


def _bound(children: dict[str, Any] | None) -> list[float]:
    """The values the forked children bound again (one per child), from the record's ``rebound``."""
    found = [BOUND.match(line) for line in (children or {}).get("rebound") or ()]
    return [float(m.group(1)) for m in found if m]


def servers(folder: Path) -> list[dict[str, Any]]:
    """One row per search record under ``folder`` with its server log, in launch order."""
    logs = {p.name: p for p in folder.rglob("*.log")}
    rows = []
    for path in sorted(folder.glob("rs-*/*/search/s*.json")):
        rec = json.loads(path.read_text())
        name = Path(rec.get("log_path") or "").name
        log = logs.get(name)
        launch = re.search(r"-(\d{13})\.log$", name)
        text = log.read_text(errors="replace") if log is not None else ""
        pool = POOL.search(text)
        stages = breakdown(log) if log is not None and launch else {}
        standby = rec.get("standby") or {}
        rows.append({"record": path.name, "config": label(rec.get("params") or {}, plain="baseline"),
                     "is_baseline": bool(rec.get("is_baseline")), "launch_ms": int(launch.group(1)) if launch else None,
                     "log": name if log is not None else None, "used": standby.get("used"),
                     "why_not": standby.get("why_not"), "launcher_s": stages.get("launcher"),
                     "startup_s": rec.get("startup_s"), "standby_cpu_s": standby.get("next_cpu_s_measuring"),
                     "next_ended": standby.get("next_ended"),
                     "pool": int(pool.group(1)) if pool else None, "tok_s": rec.get("output_tok_s"),
                     "forked": (standby.get("children") or {}).get("forked"),
                     "spawned": (standby.get("children") or {}).get("spawned"),
                     "bound": _bound(standby.get("children")), "forced": rec.get("synthetic_accept_length"),
                     "accept": rec.get("accept_length")})
    return sorted(rows, key=lambda r: (r["launch_ms"] is None, r["launch_ms"] or 0))


def failures(rows: list[dict[str, Any]], reference: list[dict[str, Any]] | None) -> list[str]:
    """Every check that failed, as lines."""
    why = [f"{r['record']} ({r['config']}): the next server's standby took {r['standby_cpu_s']} CPU s while it "
           f"was measured (at most {CPU_S})" for r in rows
           if r["standby_cpu_s"] is not None and r["standby_cpu_s"] > CPU_S]
    why += [f"{r['record']} ({r['config']}): no server log found" for r in rows if r["log"] is None]
    for r in rows:
        value = UNSET if r["forced"] is None else float(r["forced"])
        wrong = [b for b in r["bound"] if abs(b - value) > 1e-9]
        if wrong:
            why.append(f"{r['record']} ({r['config']}): a forked child bound {wrong[0]}, its config {value}")
        if r["forced"] is not None and (r["accept"] is None or abs(r["accept"] / r["forced"] - 1) > ACCEPT_REL):
            why.append(f"{r['record']} ({r['config']}): accept length {r['accept']} measured, {r['forced']} "
                       f"forced (at most {ACCEPT_REL:.0%} apart)")
    if reference is not None:
        by_config = {r["config"]: r["pool"] for r in reference if r["pool"] is not None}
        by_kind = {r["is_baseline"]: r["pool"] for r in reference if r["pool"] is not None}
        for r in rows:
            want = by_config.get(r["config"], by_kind.get(r["is_baseline"]))
            if r["pool"] is None or want is None or r["pool"] != want:
                why.append(f"{r['record']} ({r['config']}): KV pool {r['pool']} tokens against {want} "
                           "without a standby")
    return why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--reference", type=Path, help="a search's results without a standby (same GPU model, flags)")
    args = ap.parse_args(argv)
    rows = servers(args.folder)
    if not rows:
        print(f"no search records under {args.folder} (rs-NAME/NAME/search/s*.json)")
        return 1
    cols = ("record", "config", "used", "launcher_s", "startup_s", "standby_cpu_s", "next_ended", "pool", "tok_s",
            "forked", "spawned", "bound", "forced", "accept")
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(fmt_cell(", ".join(map(str, r[c])) or None if c == "bound" else r[c])
                                for c in cols) + " |")
    for r in rows:
        if r["used"] is False and r["why_not"]:
            print(f"{r['record']}: standby not used: {r['why_not']}")
    why = failures(rows, servers(args.reference) if args.reference else None)
    for line in why:
        print(f"FAIL: {line}")
    if not why:
        print("every check held" + (" (pools against the reference)" if args.reference
                                    else " (no reference for the pools)"))
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
