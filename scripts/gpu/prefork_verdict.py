"""Whether ``measure.prefork`` may be turned on, from ``scripts/gpu/standby_ab.py --prefork``'s runs.

    python3 scripts/gpu/prefork_verdict.py AB [AB ...]

AB is the A/B's ``standby-ab.json`` or its printed ``standby-ab.log``; several are pooled as
``scripts/gpu/standby_verdict.py`` pools them. The rule, written before the figures: the fork
server passes when

- every run succeeded; every ``prefork`` run was launched by its standby, whose fork server had its
  imports done (``prefork_ok``), and the server forked its children from it (``forked`` at least
  1, ``spawned`` 0: no child fell back to a spawn);
- the standby waiting beside each ``standby`` run, fork server included (its whole session), took
  at most ``standby_verdict.CPU_S`` CPU seconds over the measurement and held 0 MiB of GPU memory
  (on a real GPU an unmeasured figure fails): the fork server's imports created no CUDA context;
- SGLang sized the same KV pool for every run;
- the ``prefork`` runs' median tok/s is within ``TOK_S_PCT`` of the ``standby`` runs' (a scheduler
  forked from a pre-imported process serves as a spawned one does);
- the ``prefork`` runs' median start-up is below the ``standby`` runs' (else it buys nothing).

Exit 0 and "PASS" when it passes, 1 and every reason when it does not; each kind's runs, tok/s and
start-up stages are printed either way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from standby_verdict import (  # noqa: E402
    TOK_S_PCT,
    _median,
    load,
    pool_failures,
    pooled,
    tok_s_gap_pct,
    waiting_failures,
)

KINDS = ("standby", "prefork")
STAGES = ("launcher", "tokenizer+spawn", "scheduler", "warmup", "startup_s")


def failures(ab: dict[str, Any]) -> list[str]:
    """Every reason the fork server's A/B in ``ab`` does not pass; [] if it does."""
    rows: list[dict[str, Any]] = ab.get("rows") or []
    on_gpu = ab.get("backend") != "sim"
    kinds = {k: [r for r in rows if r.get("kind") == k] for k in KINDS}
    why = [f"no {k} run" for k, mine in kinds.items() if not mine]
    why += [f"cycle {r.get('cycle')} {r.get('kind')} failed: {r.get('reason')}" for r in rows if not r.get("ok")]
    for r in kinds["prefork"]:
        where = f"cycle {r.get('cycle')} prefork"
        if not r.get("used"):
            why.append(f"{where}: the standby did not launch the server")
        if not r.get("prefork_ok"):
            why.append(f"{where}: its fork server was not ready")
        if not (r.get("forked") or 0) >= 1 or r.get("spawned") != 0:
            why.append(f"{where}: {r.get('forked')} child(ren) forked, {r.get('spawned')} spawned "
                       f"({'; '.join(r.get('why_spawned') or []) or 'no reason recorded'})")
    why += waiting_failures(kinds["standby"], on_gpu=on_gpu, who="the waiting standby and fork server")
    why += pool_failures(rows, on_gpu=on_gpu)
    base, fork = _median(kinds["standby"], "tok_s"), _median(kinds["prefork"], "tok_s")
    if (pct := tok_s_gap_pct(fork, base)) is not None:
        why.append(f"prefork read {fork:.1f} tok/s against {base:.1f} spawned ({pct:+.2f}%, at most {TOK_S_PCT}%)")
    base_s, fork_s = _median(kinds["standby"], "startup_s"), _median(kinds["prefork"], "startup_s")
    if base_s is not None and fork_s is not None and fork_s >= base_s:
        why.append(f"the forked servers started in {fork_s:.1f} s against {base_s:.1f} s spawned: no saving")
    return why


def describe(ab: dict[str, Any]) -> list[str]:
    """Each kind's runs, tok/s median and range, and its start-up stages' medians."""
    lines = []
    for kind in KINDS:
        mine = [r for r in ab.get("rows") or [] if r.get("kind") == kind and r.get("ok")]
        tok = sorted(float(r["tok_s"]) for r in mine if r.get("tok_s") is not None)
        med = _median(mine, "tok_s")
        head = (f"{kind}: {len(mine)} runs, tok/s median {med:.1f} (range {tok[0]:.1f}-{tok[-1]:.1f})"
                if tok and med is not None else f"{kind}: {len(mine)} runs, no tok/s")
        stages = ", ".join(f"{s} {v:.1f} s" for s in STAGES if (v := _median(mine, s)) is not None)
        lines.append(f"{head}; medians: {stages or '-'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ab", type=Path, nargs="+", help="standby-ab.json of a --prefork A/B, or its printed log")
    args = ap.parse_args(argv)
    abs_ = []
    for path in args.ab:
        try:
            abs_.append(load(path))
        except (OSError, ValueError) as exc:
            print(f"FAIL: no A/B to judge ({path}: {exc})")
            return 1
    ab = pooled(abs_, [str(p) for p in args.ab])
    why = failures(ab)
    print("FAIL: measure.prefork stays off" if why else
          "PASS: every check of the fork server held (scripts/gpu/prefork_verdict.py)")
    for line in why:
        print(f"  - {line}")
    for line in describe(ab):
        print(f"  {line}")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
