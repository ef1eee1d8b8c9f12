"""bench_search's default emulator noise: measured from recorded repeats, and named where it is used.

The estimator is checked on a hand-written landscape whose repeats give a known answer, and its
value is recomputed here another way (``statistics.variance`` of ln tok/s per config, pooled by
degrees of freedom); the command's header, JSON and ``--print-noise`` must name that value and the
files it came from.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from benchmarks.search.noise import measured_noise, pooled_log_sd, recorded_files
from benchmarks.search.strategies import benchmark
from tests.unit.bench_search.test_bench_search import ROOT, run_cli, tiny


def landscape(path: Path, repeats: list[list[float] | None], *, failed: int = 0) -> str:
    """A landscape file whose record i has ``repeats[i]`` (None: no repeats kept)."""
    records = []
    for i, reps in enumerate(repeats):
        rec = {"params": {"speculative_num_steps": i + 1}, "status": "feasible",
               "is_baseline": False, "output_tok_s": statistics.median(reps) if reps else 100.0}
        if reps is not None:
            rec["output_tok_s_repeats"] = reps
        records.append(rec)
    records += [{"params": {"speculative_num_steps": 90 + i}, "status": "failed",
                 "output_tok_s": None, "reason": "out of memory"} for i in range(failed)]
    path.write_text(json.dumps({"format": "autotune-landscape/1", "space": "x.yaml",
                                "records": records}))
    return str(path)


def pooled_independently(groups: list[list[float]]) -> float:
    """Pooled within-config sd of ln tok/s, written apart from the module's."""
    used = [g for g in groups if len(g) >= 2]
    num = sum((len(g) - 1) * statistics.variance([math.log(x) for x in g]) for g in used)
    return math.sqrt(num / sum(len(g) - 1 for g in used))


def test_a_known_spread_is_measured_exactly(tmp_path):
    # ln of the two repeats lie 0.01 either side of their mean: sd = sqrt(2 * 0.01**2 / 1).
    one = landscape(tmp_path / "one.json", [[100 * math.exp(0.01), 100 * math.exp(-0.01)]])
    assert measured_noise([one]).cv == pytest.approx(math.sqrt(2) * 0.01, rel=1e-12)
    # The level of a config does not matter, only its spread around its own mean.
    two = landscape(tmp_path / "two.json", [[100 * math.exp(0.01), 100 * math.exp(-0.01)],
                                            [400 * math.exp(0.01), 400 * math.exp(-0.01)]])
    assert measured_noise([two]).cv == pytest.approx(math.sqrt(2) * 0.01, rel=1e-12)


def test_pooled_over_configs_and_files_skipping_what_has_no_spread(tmp_path):
    a = [[100.0, 103.0, 98.0], [250.0, 240.0], [301.0]]  # the one-repeat config carries no spread
    b = [[180.0, 181.5, 176.0, 183.0], None]
    fa = landscape(tmp_path / "a.json", a, failed=2)
    fb = landscape(tmp_path / "b.json", b)
    fc = landscape(tmp_path / "c.json", [None, [222.0]])  # nothing to measure: left out, said so
    m = measured_noise([fa, fb, fc])
    expected = pooled_independently([*a, b[0]])
    assert m.cv == pytest.approx(expected, rel=1e-12)
    # Not the spread around the pooled mean, not ddof 0, not relative tok/s without the log.
    assert m.cv != pytest.approx(pooled_independently([[x for g in a[:2] for x in g] + b[0]]))
    ddof0 = math.sqrt(sum(len(g) * statistics.pvariance([math.log(x) for x in g])
                          for g in [*a[:2], b[0]]) / 9)
    assert m.cv != pytest.approx(ddof0, rel=1e-3)
    assert (m.configs, m.repeats, m.files) == (3, 9, (fa, fb))
    assert [(f, c, r) for f, c, r, _ in m.per_file] == [(fa, 2, 5), (fb, 1, 4)]
    assert m.per_file[1][3] == pytest.approx(pooled_independently([b[0]]), rel=1e-12)
    said = "\n".join(m.skipped)
    assert "a.json: 2 failed record(s)" in said and "a.json: 1 record(s) with fewer than 2" in said
    assert "b.json: 1 record(s) with fewer than 2" in said
    assert "c.json: no config with 2 repeats or more, file left out" in said
    assert m.describe() == (f"noise cv {expected:.5f} (measured: 3 configs, 9 repeats from "
                            "a.json, b.json)")
    with pytest.raises(ValueError, match="2 repeats"):
        measured_noise([fc])
    with pytest.raises(ValueError, match="positive"):
        pooled_log_sd([[100.0, 0.0]])


def test_the_default_is_the_committed_real_landscapes():
    files = recorded_files()
    assert [Path(f).name for f in files] == sorted(
        p.name for p in (ROOT / "benchmarks" / "landscapes").glob("recorded-h200-*.json"))
    assert files, "no recorded real landscape committed"
    groups = [r["output_tok_s_repeats"] for f in files
              for r in json.loads(Path(f).read_text())["records"]
              if r.get("status") != "failed" and len(r.get("output_tok_s_repeats") or []) >= 2]
    m = measured_noise()
    assert m.cv == pytest.approx(pooled_independently(groups), rel=1e-12)
    assert m.configs == len(groups) and m.repeats == sum(map(len, groups))


@pytest.mark.slow  # 7 s at load ~8 (make test-fast leaves it out)
def test_the_command_names_the_noise_it_used_and_where_it_came_from(tmp_path):
    space = tiny(tmp_path)
    m = measured_noise()
    names = ", ".join(Path(f).name for f in m.files)
    proc = run_cli("--space", space, "--seeds", "1", "--budget", "4", "--strategies", "random")
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[1]
    assert header == (f"noise cv {m.cv:.5f} (measured: {m.configs} configs, {m.repeats} repeats "
                      f"from {names})")
    proc = run_cli("--space", space, "--seeds", "1", "--budget", "4", "--strategies", "random",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)["random"]
    assert s["noise_cv"] == pytest.approx(m.cv, rel=1e-12)
    assert s["noise_source"]["kind"] == "measured"
    assert [Path(f).name for f in s["noise_source"]["files"]] == [Path(f).name for f in m.files]
    assert (s["noise_source"]["configs"], s["noise_source"]["repeats"]) == (m.configs, m.repeats)
    # --noise overrides it, and the header says so.
    proc = run_cli("--space", space, "--seeds", "1", "--budget", "4", "--strategies", "random",
                   "--noise", "0.02")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "noise cv 0.02 (given: --noise)"
    proc = run_cli("--print-noise")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == m.describe()
    for f in m.files:
        assert any(Path(f).name in line and "cv 0.0" in line for line in lines[2:])


def test_the_default_run_is_the_run_at_the_measured_cv(tmp_path):
    space = tiny(tmp_path)
    kwargs = dict(seeds=2, budget=8, strategies=["random", "phase-model"])
    default = benchmark(space, **kwargs)
    given = benchmark(space, noise_cv=measured_noise().cv, **kwargs)
    for name in default:
        assert default[name]["trials_to_target"] == given[name]["trials_to_target"]
        assert default[name]["noise_cv"] == given[name]["noise_cv"]
    assert given["random"]["noise_source"]["kind"] == "given"
