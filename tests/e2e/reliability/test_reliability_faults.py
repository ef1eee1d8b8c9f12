"""Server faults injected through the emulator, inside one real search (CLI, embedded Ray).

The space searches ``AUTOTUNE_SIM_FAULT`` as a categorical environment parameter (``null`` is no
fault) on tp 2, plus tp 1 without a fault on a profile whose weights do not fit one GPU (an
out-of-memory start-up caused by the TP size itself). The random sampler with a fixed seed makes
the first eight trials cover the eight configs exactly once; the test checks that precondition
before anything else.

For every fault: the trial ends with the right status and reason, its MLflow run carries the
server's log tail (``server_log_tail.txt``) showing the fault, and the search goes on to finish
every planned trial. Afterwards, by pid: no server or watchdog left, no port bound or reserved,
no GPU lock held.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.reliability import record
from tests.e2e.reliability.procs import leftovers, new_token
from tests.e2e.reliability.searchrun import SearchDir, cli_env, run_cli
from tests.e2e.reliability.spaces import BIG_WEIGHTS, base_space, merged, write_space

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

# The bounds the never_healthy and hang_mid_stream faults run into (each twice: the baseline, then the
# trial), so they set the search's length. A server that works starts in under 1 s here (2.3 s with
# slow_start:2) and measures its one 8-token prompt in well under a second; these leave it 4x that
# on a loaded box and still fail the faulty ones by the bound they are about.
STARTUP_TIMEOUT_S = 10
TRIAL_TIMEOUT_S = 14

# (tp_size, fault) -> (status, words in the reason, words in the log tail)
EXPECTED: dict[tuple[int, str | None], tuple[str, str, str]] = {
    (2, None): ("ok", "", "fired up and ready"),
    (1, None): ("failed", "out of memory", "OutOfMemoryError"),
    (2, "oom"): ("failed", "out of memory", "OutOfMemoryError"),
    (2, "crash_at_start"): ("failed", "crashed at start-up (exit code 1)", "Scheduler hit an exception"),
    (2, "crash_after_requests:0"): ("failed", "crashed during measurement", "Scheduler hit an exception"),
    (2, "never_healthy"): ("failed", "start-up timeout", "never_healthy"),
    (2, "hang_mid_stream:3"): ("failed", "trial timeout", "hang_mid_stream"),
    (2, "slow_start:2"): ("ok", "", "fired up and ready"),
}
# Seed of the random sampler whose first len(EXPECTED) suggestions are the configs above, each once,
# the two slowest first (hang_mid_stream waits out the trial timeout twice, baseline and trial;
# never_healthy the start-up timeout twice), so they run beside the others instead of after them.
SEED = 40081


def _space(token: str) -> dict[str, Any]:
    faults = [None] + sorted({f for _, f in EXPECTED if f})
    return merged(
        base_space("faults", token=token, profile=BIG_WEIGHTS),
        parameters={
            "tp_size": {"type": "categorical", "choices": [1, 2]},
            "AUTOTUNE_SIM_FAULT": {"type": "categorical", "choices": faults, "when": "tp_size > 1"},
        },
        measure={"repeats": 1, "startup_timeout_s": STARTUP_TIMEOUT_S,
                 "trial_timeout_s": TRIAL_TIMEOUT_S},
        budget={"trials": len(EXPECTED)},
        search={"sampler": "random", "seed": SEED, "finalists": 1, "finalist_repeats": 1})


def _key(params: dict[str, str]) -> tuple[int, str | None]:
    fault = params.get("AUTOTUNE_SIM_FAULT")
    return int(params.get("tp_size", "1")), (None if fault in (None, "", "None", "null") else fault)


def test_each_fault_ends_its_trial_and_the_search_goes_on(tmp_path: Path) -> None:
    token = new_token("faults")
    lock_dir = tmp_path / "gpu-locks"
    space = _space(token)
    path = write_space(tmp_path, space)
    proc = run_cli(path, "--concurrency", "4", "--summary-json", str(tmp_path / "summary.json"),
                   root=tmp_path, token=token, timeout_s=420,
                   env=cli_env(token, AUTOTUNE_SIM_GPU_LOCK_DIR=str(lock_dir)))
    search = SearchDir(tmp_path, space["name"])
    left = leftovers(token, log_dir=search.ray_root, lock_dirs=[lock_dir])
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]

    view = search.mlflow_view()
    trial_runs = view["trial_runs"]
    seen: dict[tuple[int, str | None], Any] = {}
    for run in trial_runs:
        seen.setdefault(_key(run.params), run)
    assert set(seen) == set(EXPECTED) and len(trial_runs) == len(EXPECTED), (
        f"precondition: seed {SEED} should give each config once, got "
        f"{sorted(_key(r.params) for r in trial_runs)}")

    outcomes: dict[str, dict[str, Any]] = {}
    for key, run in seen.items():
        status, reason_words, tail_words = EXPECTED[key]
        tail = search.artifact_text(run.run_id, "server_log_tail.txt") or ""
        result = json.loads(search.artifact_text(run.run_id, "result.json") or "{}")
        ok_status = (run.status in ("feasible", "infeasible")) if status == "ok" else run.status == status
        checks = {
            "status": ok_status,
            "reason": reason_words.lower() in (run.reason or "").lower() if reason_words else run.reason is None
            or run.status == "infeasible",
            "log_tail_in_mlflow": bool(tail) and tail_words in tail,
            "mlflow_run_ended": run.mlflow_status == ("FAILED" if status == "failed" else "FINISHED"),
        }
        if key == (2, "slow_start:2"):
            checks["startup_waited"] = (result.get("startup_s") or 0) >= 2.0
        if key == (1, None):
            checks["tp_in_launch"] = "--tp-size 1" in (result.get("launch_command") or "") or \
                "--tp-size" not in (result.get("launch_command") or "")
        name = f"tp{key[0]} {key[1] or 'no fault'}"
        outcomes[name] = {"status": run.status, "reason": run.reason, "checks": checks}
        record.record("faults", name, ok=all(checks.values()), fault=key[1], tp_size=key[0],
                      status=run.status, reason=run.reason, checks=checks,
                      log_tail_lines=len(tail.splitlines()), duration_s=result.get("duration_s"))

    summary = json.loads((tmp_path / "summary.json").read_text())
    counts = summary["trials"]
    record.search_outcome("faults", planned=len(EXPECTED), completed=counts["total"],
                          failed=counts["failed"], orphans=left.count,
                          duplicate_trial_runs=len(view["duplicate_trial_ids"]),
                          running_runs=len(view["running"]))
    record.record("faults", "afterwards: processes, ports, GPU locks", ok=left.count == 0,
                  servers=len(left.servers), ports=left.ports, gpu_locks=left.gpu_locks)

    bad = {name: o for name, o in outcomes.items() if not all(o["checks"].values())}
    assert not bad, json.dumps(bad, indent=2)
    assert counts["total"] == len(EXPECTED), counts
    assert counts["failed"] == sum(1 for s, _, _ in EXPECTED.values() if s == "failed"), counts
    assert not view["duplicate_trial_ids"] and not view["running"], view
    assert left.count == 0, left.describe()
