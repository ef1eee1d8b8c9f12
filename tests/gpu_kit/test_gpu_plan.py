"""The real-search GPU plan (scripts/gpu/plan.sh, real_search.py, landscape.py), rehearsed on the
emulator: the shipped H200 spaces with only the server swapped for the emulator, so a broken step
is caught here and not in GPU time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.space.search_space import load_space
from autotune.space.trial_config import config_key

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def sim_twin(shipped: str, folder: Path, *, trials: int) -> Path:
    """The shipped space with the emulator as its server and a tiny workload; the parameters,
    the acceptance model and the measurement rules stay as shipped."""
    data = yaml.safe_load((REPO / shipped).read_text())
    data.update(backend="sim", profile="llama-3.1-8b-eagle3-h100", model_path="sim/target",
                draft_model_path="sim/draft", name=data["name"] + "-sim")
    data["workload"].update(num_prompts=2, output_len=16)
    data["measure"].update(repeats=2, warmup_max_rounds=3)
    data["budget"] = {"trials": trials}
    path = folder / Path(shipped).name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_plan_searches_sweeps_the_rest_and_exports(tmp_path: Path, installed_flag_table: Path) -> None:
    space_path = sim_twin("scripts/gpu/h200-qwen3-30b-a3b.yaml", tmp_path, trials=3)
    space = load_space(space_path)
    work = tmp_path / "repo"
    res = tmp_path / "res"
    env = dict(os.environ, AUTOTUNE_SIM_STARTUP_S="0.2", PYTHON=sys.executable,
               AUTOTUNE_GPU_SPACES=str(space_path), AUTOTUNE_GPU_TIMER_S="90",
               AUTOTUNE_GPU_TIMER_PAIRS="1", AUTOTUNE_GPU_TRIAL_S="20",
               AUTOTUNE_GPU_IMPORT_TIMES="0")  # no SGLang launcher to time on the emulator
    work.mkdir()
    # The installed SGLang's flags from a table: importing its parser in every trial and emulator
    # process costs seconds of CPU each on a 2-core box (tests/integration/test_landscape.py does the same).
    env["AUTOTUNE_SGLANG_FLAG_TABLE"] = str(installed_flag_table)
    proc = subprocess.run(["bash", str(REPO / "scripts/gpu/plan.sh"), str(res), "380"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (res / "plan.done").exists()
    out = res / f"rs-{space_path.stem}"
    steps = json.loads((out / "plan.json").read_text())
    search = next(s for s in steps if s.get("step") == "search")
    assert search["rc"] == 0 and search["orphans"] == 0
    assert steps[-1]["step"] == "done" and steps[-1]["orphans"] == 0
    name = space.name
    # The search's trials and the sweep together measured every config of the space, each once
    # in the sweep at most, and the sweep skipped what the search had.
    searched = [json.loads(p.read_text()) for p in sorted((out / name / "search").glob("s*.json"))]
    swept = [json.loads(p.read_text()) for p in sorted((out / name / "sweep").glob("c*.json"))
             if p.read_text().strip() and not p.name.endswith(".params.json")]
    keys_s = {config_key(space.coerce_params(r["params"])) for r in searched}
    keys_w = [config_key(space.coerce_params(r["params"])) for r in swept]
    assert len(keys_w) == len(set(keys_w)) and not keys_s & set(keys_w)
    assert keys_s | set(keys_w) == {config_key(p) for p in space.enumerate()}
    assert all(r["acceptance"] == "synthetic" for r in searched + swept if not r["is_baseline"])
    # Every sweep config was judged against the search's own baseline measurement.
    base = [r for r in searched if r["is_baseline"]]
    assert base and all(r["baseline_tok_s"] in {b["output_tok_s"] for b in base}
                        for r in swept if not r["is_baseline"] and r["status"] != "failed")
    export = (out / name / "export.sh").read_text()
    commands = [line for line in export.splitlines() if not line.startswith("#")]
    assert "sglang.launch_server" in export
    assert not any("SGLANG_SIMULATE_ACC_LEN" in line for line in commands)
    assert any(line.startswith("# synthetic acceptance") for line in export.splitlines())
    # The device-timer step ran on the first space and wrote its figures.
    timer = json.loads((res / "timer-overhead.json").read_text())
    assert timer["timer_only"] and len(timer["runs"]["on"]) == 1 and timer["ratio"] > 0

    # The records make a landscape that bench_search replays.
    landscape = tmp_path / "landscape.json"
    files = [str(p) for p in sorted((out / name / "search").glob("s*.json"))]
    files += [str(p) for p in sorted((out / name / "sweep").glob("c??.json"))]
    proc = subprocess.run([sys.executable, "scripts/gpu/landscape.py", "--space", str(space_path),
                           "--out", str(landscape), "--dedupe", *files], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads(landscape.read_text())["records"]
    assert len(records) == space.count()
