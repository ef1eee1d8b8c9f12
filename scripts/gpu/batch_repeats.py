"""One config's repeats at every concurrency level of a space, with the load the server ran (issue 34).

Usage: ``python3 scripts/gpu/batch_repeats.py SPACE PARAMS_JSON OUT.json``. Measures the config alone
(no baseline: the figures wanted are its repeat range and spread, and its load) through
:func:`autotune.trial.measure.measure`, as a trial measures it, and prints per level: the repeats'
tok/s, the range and robust spread in percent, and the load (ran of asked, queued, tail, the windows
flagged); then both windows side by side (whole and steady: median, spread, range; the steady
interval's share of the window and its waves; the window the objective used). The whole result goes
to OUT.json.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from autotune.space.search_space import load_space
from autotune.space.workload import Workload
from autotune.trial.measure import measure
from autotune.trial.measure_settings import settings_for


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def run(space_path: str, params_json: str, out: str) -> int:
    space = load_space(space_path)
    params = space.coerce_params(json.loads(params_json))
    reason = space.validate_config(params)
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    if space.backend == "sglang":
        space.check_paths()
    result = measure(space.trial_config(params), Workload.from_spec(space.workload), settings_for(space))
    with open(out, "w") as fh:
        json.dump(result.to_dict(), fh, indent=1, default=str)
    if not result.ok:
        print(f"failed: {result.reason}", file=sys.stderr)
        return 1
    levels = result.levels or [{**result.to_dict(), "concurrency": space.workload.get("concurrency")}]
    print("level  repeats tok/s                      range%  spread%  load")
    for lv in levels:
        reps = " ".join(f"{x:.0f}" for x in lv.get("output_tok_s_repeats") or [])
        # Uncapped, the server's gauge reads a slot as empty while its next request is on the way
        # (24-26% of the H100's samples at c16 and c64), so the client's own share is the tail.
        flag = lv.get("load_note") or (f"ran {lv.get('load_ran')} of {lv.get('load_asked')}, not capped "
                                       f"(tail {_fmt(lv.get('load_client_tail_pct'), '.1f')}% by the client; "
                                       f"{_fmt(lv.get('load_tail_pct'), '.0f')}% of server samples below)")
        print(f"c{lv.get('concurrency')!s:<5} {reps:<34} {_fmt(lv.get('output_tok_s_range_pct'), '.2f'):>6} "
              f"{_fmt(lv.get('output_tok_s_spread_pct'), '.2f'):>7}  {flag} "
              f"[{lv.get('load_capped_windows')} of {len(lv.get('output_tok_s_repeats') or [])} windows flagged]")
    # The two windows side by side (autotune.trial.window): the repeats above are the objective's.
    print("\nlevel  window  whole tok/s spread% range%  steady tok/s spread% range%  steady share% waves")
    for lv in levels:
        cells = [_fmt(lv.get(k), spec) for k, spec in (
            ("output_tok_s_whole", ".0f"), ("output_tok_s_whole_spread_pct", ".2f"),
            ("output_tok_s_whole_range_pct", ".2f"), ("output_tok_s_steady", ".0f"),
            ("output_tok_s_steady_spread_pct", ".2f"), ("output_tok_s_steady_range_pct", ".2f"),
            ("steady_share_pct", ".0f"), ("steady_waves", ".1f"))]
        widths = (11, 7, 6, 13, 7, 6, 14, 5)
        print(f"c{lv.get('concurrency')!s:<5} {lv.get('window')!s:<7}"
              + "".join(f" {c:>{w}}" for c, w in zip(cells, widths, strict=True))
              + (f"  ({lv['window_reason']})" if lv.get("window_reason") else ""))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(run(*sys.argv[1:]))
