"""Recorded landscapes: swept for real on the emulator (python -m autotune.trial per config),
collected by scripts/gpu/landscape.py, replayed by python -m autotune.bench_search --landscape."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.space.search_space import load_space
from benchmarks.search.command import render
from benchmarks.search.landscape import FORMAT, load_landscape
from benchmarks.search.problem import Oracle, load_problem
from benchmarks.search.strategies import STRATEGIES, benchmark

ROOT = Path(__file__).resolve().parents[2]
MIN_SPEEDUP = 1.0

SPACE = f"""\
name: landscape-test
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: sim/Llama-3.1-8B-Instruct
draft_model_path: sim/EAGLE3-LLaMA3.1-Instruct-8B
fixed_args: {{speculative_algorithm: EAGLE3}}
parameters:
  tp_size: {{type: categorical, choices: [1, 2]}}
  speculative_num_steps: {{type: int, low: 1, high: 2}}
  speculative_eagle_topk: {{type: categorical, choices: [1]}}
workload: {{num_prompts: 2, warmup_prompts: 1, output_len: 24, concurrency: 1}}
measure: {{repeats: 2, startup_timeout_s: 60}}
constraints: {{min_speedup: {MIN_SPEEDUP}}}
"""


@dataclass
class Swept:
    dir: Path
    space: Path
    landscape: Path
    doc: dict[str, Any]
    script: subprocess.CompletedProcess


def _env(flag_table: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env["AUTOTUNE_SIM_STARTUP_S"] = "0.2"
    # The installed SGLang's own flags, rebuilt from a table: importing SGLang's parser in every
    # trial and every emulator process would cost ~4 CPU-seconds per trial on a 2-core box.
    env["AUTOTUNE_SGLANG_FLAG_TABLE"] = str(flag_table)
    return env


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory, installed_flag_table: Path) -> Swept:
    """Every config of the space and both group baselines, each through the real trial CLI."""
    d = tmp_path_factory.mktemp("landscape")
    space_file = d / "space.yaml"
    space_file.write_text(SPACE)
    space = load_space(space_file)
    configs = [dict(c) for c in space.enumerate()]
    baselines: list[dict[str, Any]] = []
    for c in configs:
        if space.baseline_params(c) not in baselines:
            baselines.append(space.baseline_params(c))
    assert len(configs) == 4 and len(baselines) == 2
    env = _env(installed_flag_table)

    def trial(job: tuple[str, dict[str, Any]]) -> Path:
        name, params = job
        proc = subprocess.run(
            [sys.executable, "-m", "autotune.trial", "--space", str(space_file), "--params",
             json.dumps(params), "--json", "--baseline-store", str(d / "baselines"),
             "--workdir", str(d / "work" / name)],
            cwd=ROOT, capture_output=True, text=True, timeout=120, env=env, check=False)
        # 1 is also Python's code for an uncaught exception: a failed trial still prints its record.
        assert proc.returncode in (0, 1) and proc.stdout.strip(), proc.stderr[-2000:]
        out = d / f"{name}.json"
        out.write_text(proc.stdout)
        return out

    # Baselines first, so every speculative trial reuses its group's from the store.
    with ThreadPoolExecutor(2) as pool:
        files = list(pool.map(trial, [(f"base{i}", b) for i, b in enumerate(baselines)]))
        files += list(pool.map(trial, [(f"spec{i}", c) for i, c in enumerate(configs)]))
    (d / "empty.json").write_text("")
    (d / "junk.json").write_text("Traceback (most recent call last):\n  boom\n")
    out = d / "out" / "land.json"
    proc = subprocess.run(
        [sys.executable, "scripts/gpu/landscape.py", "--space", str(space_file), "--out", str(out),
         "--description", "emulator sweep for tests", "--root", f"{d / 'work'}=<results>",
         *map(str, files),
         str(d / "empty.json"), str(d / "junk.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    return Swept(dir=d, space=space_file, landscape=out, doc=json.loads(out.read_text()),
                 script=proc)


def write(swept: Swept, doc: dict[str, Any], name: str) -> Path:
    """A variant of the landscape beside the real one (so its relative space path holds)."""
    path = swept.landscape.parent / name
    path.write_text(json.dumps(doc))
    return path


def independent_optimum(records: list[dict[str, Any]], *, min_speedup: float) -> dict[str, Any]:
    """The best feasible record, worked out from the records alone."""
    base = {r["params"]["tp_size"]: r for r in records if r["is_baseline"]}

    def ran(r: dict[str, Any]) -> bool:
        return r["status"] != "failed" and r["output_tok_s"] is not None

    feasible = [r for r in records if ran(r) and (
        r["is_baseline"] or (ran(base[r["params"]["tp_size"]]) and r["output_tok_s"]
                             / base[r["params"]["tp_size"]]["output_tok_s"] > min_speedup))]
    return max(feasible, key=lambda r: r["output_tok_s"])


def same_config(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if v is not None} == {k: v for k, v in b.items()
                                                             if v is not None}


def bench_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.bench_search", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow  # 19 s at load ~8 (make test-fast leaves it out)
def test_script_collects_every_trial_and_skips_junk_with_a_warning(swept: Swept) -> None:
    assert swept.script.returncode == 0, swept.script.stderr
    stderr = swept.script.stderr
    assert "empty.json" in stderr and "junk.json" in stderr and "warning" in stderr
    doc = swept.doc
    assert doc["format"] == FORMAT and doc["description"] == "emulator sweep for tests"
    # The space is named relative to the landscape's folder.
    assert (swept.landscape.parent / doc["space"]).resolve() == swept.space.resolve()
    recs = doc["records"]
    assert len(recs) == 6 and sum(r["is_baseline"] for r in recs) == 2
    for r in recs:
        assert len(r["output_tok_s_repeats"]) == 2
        assert min(r["output_tok_s_repeats"]) <= r["output_tok_s"] <= max(r["output_tok_s_repeats"])
    land = load_landscape(swept.landscape)
    assert len(land.entries) == 6 and land.space_path.endswith("space.yaml")
    # A committed landscape names no machine's folders: the trials' log paths are under --root.
    text = swept.landscape.read_text()
    assert str(swept.dir) not in text and str(ROOT) not in text
    assert all(r["log_path"].startswith("<results>/") for r in recs), [r["log_path"] for r in recs]


def test_portable_paths_replace_roots_on_path_boundaries_only() -> None:
    from autotune.trial.report import portable_paths

    roots = {"/srv/checkout": "", "/scratch/res/": "<results>"}
    rec = {"argv": ["python", "--model-path", "/srv/checkout/.gpu/m/target"],
           "launch_command": "cd /srv/checkout && python x --log /scratch/res/a/b.log",
           "other": ["/srv/checkoutline/x", "/scratch/resx"], "n": 3, "none": None}
    assert portable_paths(rec, roots) == {
        "argv": ["python", "--model-path", ".gpu/m/target"],
        "launch_command": "cd . && python x --log <results>/a/b.log",
        "other": ["/srv/checkoutline/x", "/scratch/resx"], "n": 3, "none": None}


@pytest.mark.slow  # 38 s at load ~5 (make test-fast leaves it out)
def test_bench_search_replays_the_landscape_and_finds_the_recorded_optimum(swept: Swept) -> None:
    proc = bench_cli("--landscape", str(swept.landscape), "--seeds", "3", "--budget", "6",
                     "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == list(STRATEGIES)
    best = independent_optimum(swept.doc["records"], min_speedup=MIN_SPEEDUP)
    for s in out.values():
        assert len(s["trials_to_target"]) == 3
        assert all(h is None or 1 <= h <= 6 for h in s["trials_to_target"])
        assert s["oracle"] == "landscape" and s["records"] == 6 and s["noise_cv"] is None
        assert same_config(s["optimum_params"], best["params"])
        assert s["optimum_tok_s"] == pytest.approx(best["output_tok_s"])
        assert s["configs"] == 4 and s["groups"] == 2
    # Deterministic per seed, across processes: the in-process run gives the same counts.
    again = benchmark(landscape=str(swept.landscape), seeds=3, budget=6)
    for name, s in out.items():
        assert again[name]["trials_to_target"] == s["trials_to_target"]
    text = render(again)
    assert "recorded landscape" in text and "emulator sweep for tests" in text
    assert "not the oracle" in text and "6 records" in text


@pytest.mark.slow  # 7 s: sweeps the space through the trial CLI (make test-fast leaves it out)
def test_replayed_measurements_are_the_recorded_repeats(swept: Swept) -> None:
    problem = load_problem(landscape=str(swept.landscape))
    records = swept.doc["records"]
    for rec in (r for r in records if not r["is_baseline"]):
        cfg = next(c for c in problem.configs if same_config(c, rec["params"]))
        base = next(r for r in records
                    if r["is_baseline"] and r["params"]["tp_size"] == rec["params"]["tp_size"])
        assert problem.truth(cfg)["output_tok_s"] == rec["output_tok_s"]
        runs = []
        for seed in (0, 0, 7):
            oracle = Oracle(problem, seed=seed, noise_cv=0.0)
            runs.append([oracle.run(cfg) for _ in range(4)])
        values = [[m.objective for m in run] for run in runs]
        assert values[0] == values[1]  # same seed, same draws
        for run, vals in zip(runs, values, strict=True):
            # Each pass of two measurements walks through both recorded repeats.
            assert sorted(vals[:2]) == sorted(rec["output_tok_s_repeats"])
            assert sorted(vals[2:]) == sorted(rec["output_tok_s_repeats"])
            for m in run:
                assert m.attrs["baseline_tok_s"] in base["output_tok_s_repeats"]
                assert m.attrs["accept_length"] == rec["accept_length"]
                # Phase times move with the draw, as cycle_ms = wall / cycles does.
                assert m.attrs["phases"]["cycle_ms"] == pytest.approx(
                    rec["phases"]["cycle_ms"] * rec["output_tok_s"] / m.objective)
                assert m.attrs["speedup"] == pytest.approx(m.objective / m.attrs["baseline_tok_s"])


@pytest.mark.slow  # the module's sweep: 7 s through the trial CLI (make test-fast leaves it out)
def test_min_speedup_of_a_space_override_decides_feasibility(swept: Swept) -> None:
    records = swept.doc["records"]
    top = max((r for r in records if not r["is_baseline"]), key=lambda r: r["output_tok_s"])
    base = next(r for r in records
                if r["is_baseline"] and r["params"]["tp_size"] == top["params"]["tp_size"])
    # Just above the fastest config's speedup: it no longer pays, so it cannot be the optimum.
    ms = top["output_tok_s"] / base["output_tok_s"] * (1 + 1e-6)
    strict = swept.dir / "strict" / "space.yaml"
    strict.parent.mkdir(exist_ok=True)
    strict.write_text(SPACE.replace(f"min_speedup: {MIN_SPEEDUP}", f"min_speedup: {ms!r}"))
    problem = load_problem(str(strict), landscape=str(swept.landscape))
    want = independent_optimum(records, min_speedup=ms)
    assert not same_config(want["params"], top["params"])
    assert same_config(problem.optimum_params, want["params"])
    assert problem.optimum == pytest.approx(want["output_tok_s"])
    assert problem.space.file == str(strict)


@pytest.mark.slow  # the module's sweep: 7 s through the trial CLI (make test-fast leaves it out)
def test_a_failed_record_is_a_failed_config_and_never_the_optimum(swept: Swept) -> None:
    doc = copy.deepcopy(swept.doc)
    best = independent_optimum(doc["records"], min_speedup=MIN_SPEEDUP)
    i = doc["records"].index(best)
    doc["records"][i].update(status="failed", reason="crashed mid-run", output_tok_s=None)
    path = write(swept, doc, "failed.json")
    problem = load_problem(landscape=str(path))
    want = independent_optimum(doc["records"], min_speedup=MIN_SPEEDUP)
    assert not same_config(want["params"], best["params"])
    assert same_config(problem.optimum_params, want["params"])
    cfg = next(c for c in problem.configs if same_config(c, best["params"]))
    oracle = Oracle(problem, seed=0, noise_cv=0.0)
    out = oracle.run(cfg)
    assert out.attrs["status"] == "failed" and out.constraints["failed"] == 1.0
    assert out.attrs["output_tok_s"] is None and oracle.failed == 1
    # A record without tok/s is failed whatever its status says; unknown is never 0.
    doc["records"][i].update(status="feasible", output_tok_s=None, output_tok_s_repeats=[])
    problem = load_problem(landscape=str(write(swept, doc, "no-tok.json")))
    assert problem.truth(cfg)["status"] == "failed" and problem.truth(cfg)["output_tok_s"] is None
    assert same_config(problem.optimum_params, want["params"])


def _variant(swept: Swept, name: str, change) -> Path:
    doc = copy.deepcopy(swept.doc)
    change(doc)
    return write(swept, doc, name)


def _spec_index(doc: dict[str, Any]) -> int:
    return next(i for i, r in enumerate(doc["records"]) if not r["is_baseline"])


def _base_index(doc: dict[str, Any]) -> int:
    return next(i for i, r in enumerate(doc["records"]) if r["is_baseline"])


@pytest.mark.parametrize("name, change, words", [
    ("format.json", lambda d: d.update(format="autotune-landscape/0"),
     ["format", "autotune-landscape/1"]),
    ("missing.json", lambda d: d["records"].pop(_spec_index(d)),
     ["does not cover the space", "1 configs missing", "sweep them or narrow the space"]),
    ("nobase.json", lambda d: d["records"].pop(_base_index(d)), ["no baseline record"]),
    ("rejected.json", lambda d: d["records"][_spec_index(d)]["params"].update(
        speculative_num_steps=9), ["records[", "params", "rejects", "speculative_num_steps"]),
    ("dup.json", lambda d: d["records"].append(copy.deepcopy(d["records"][_spec_index(d)])),
     ["same config", "records["]),
    ("badtok.json", lambda d: d["records"][_spec_index(d)].update(output_tok_s=-3),
     ["output_tok_s", "finite number"]),
    ("nospace.json", lambda d: d.update(space="nowhere.yaml"), ["nowhere.yaml", "not found"]),
    ("notlist.json", lambda d: d.update(records={}), ["records", "non-empty list"]),
])
@pytest.mark.slow  # the module's sweep: 7 s through the trial CLI (make test-fast leaves it out)
def test_bad_landscapes_are_config_errors_naming_the_file(swept: Swept, name, change,
                                                          words) -> None:
    path = _variant(swept, name, change)
    with pytest.raises(ConfigError) as err:
        load_landscape(path)
    msg = str(err.value)
    assert str(path) in msg and err.value.file == str(path)
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.slow  # the module's sweep: 7 s through the trial CLI (make test-fast leaves it out)
def test_cli_errors_exit_2_naming_the_file(swept: Swept) -> None:
    path = _variant(swept, "cli-missing.json", lambda d: d["records"].pop(_spec_index(d)))
    proc = bench_cli("--landscape", str(path), "--seeds", "1", "--budget", "2")
    assert proc.returncode == 2 and str(path) in proc.stderr and "does not cover" in proc.stderr
    proc = bench_cli("--landscape", str(swept.landscape), "--noise", "0.02")
    assert proc.returncode == 2 and "--noise does not apply" in proc.stderr
    proc = bench_cli("--landscape", str(swept.landscape), "--profile", "kimi-k2.5-eagle3-tp8")
    assert proc.returncode == 2 and "--profile" in proc.stderr


@pytest.mark.slow  # the module's sweep: 7 s through the trial CLI (make test-fast leaves it out)
def test_space_override_and_the_script_reports_what_is_left_to_sweep(swept: Swept) -> None:
    # Moved away from its space, the landscape loads with --space.
    moved = swept.dir / "elsewhere" / "deeper" / "land.json"
    moved.parent.mkdir(parents=True, exist_ok=True)
    moved.write_text(swept.landscape.read_text())
    with pytest.raises(ConfigError, match="not found"):
        load_landscape(moved)
    assert len(load_landscape(moved, space=str(swept.space)).entries) == 6
    # The script still writes a partial sweep, exits 1 and lists the configs to run.
    part = [str(swept.dir / "base0.json"), str(swept.dir / "spec0.json")]
    out = swept.dir / "partial.json"
    proc = subprocess.run([sys.executable, "scripts/gpu/landscape.py", "--space", str(swept.space),
                           "--out", str(out), *part],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and out.exists()
    assert len(json.loads(out.read_text())["records"]) == 2
    assert "4 configs still to sweep" in proc.stderr and "does not cover" in proc.stderr
