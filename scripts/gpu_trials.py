"""Run autotune's trial path against real SGLang for several configs sharing one baseline.

Usage (on a GPU node, see scripts/gpu_trial.sh): python3 scripts/gpu_trials.py SPACE OUTDIR STEPS...
Prints the seed-style phase table per config and writes one JSON per config to OUTDIR.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from autotune.space.search_space import load_space
from autotune.space.workload import Workload
from autotune.trial.baselines import MemoryBaselineStore
from autotune.trial.measure import evaluate
from autotune.trial.measure_settings import settings_for, slos_of
from autotune.trial.report import phase_table, summary_json


def main() -> int:
    space_path, out, *steps = sys.argv[1:]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    space = load_space(space_path)
    workload = Workload.from_spec(space.workload, file=space.file)
    settings = settings_for(space, workdir=str(out_dir / "logs"))
    store = MemoryBaselineStore()
    for s in steps:
        params = {"speculative_num_steps": int(s), "speculative_eagle_topk": 1}
        config = space.trial_config(params)
        base = space.trial_config(space.baseline_params(params))
        t0 = time.monotonic()
        result = evaluate(config, workload=workload, baseline_config=base, settings=settings,
                          store=store, slos=slos_of(space))
        print(f"=== steps={s} topk=1: {time.monotonic() - t0:.0f} s ===", flush=True)
        print(phase_table(result), flush=True)
        if not result.ok:
            print(result.log_tail or "", flush=True)
        (out_dir / f"trial-steps{s}.json").write_text(json.dumps(summary_json(result), default=str, indent=1))
    base_result = next(iter(store._data.values()), None)
    if base_result is not None:
        print("=== baseline ===")
        print(phase_table(base_result), flush=True)
        (out_dir / "baseline.json").write_text(json.dumps(summary_json(base_result), default=str, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
