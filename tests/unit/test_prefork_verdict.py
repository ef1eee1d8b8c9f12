"""scripts/gpu/prefork_verdict.py, the written-down rule for ``measure.prefork``, and
scripts/gpu/prefork_probe.py's split of the scheduler's imports at CUDA's first initialisation.

The verdict's cases are a ``standby_ab.py --prefork`` JSON changed in one way, run as a person runs
the script; the committed H100 A/B (2026-12-05, the fork server's imports initialised CUDA) fails
for that reason. The probe's halves run in a fresh interpreter on modules written here, with
torch's CPU build: a module that asks torch for the current device starts its lazy CUDA
initialisation, which is where the probe splits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_standby_verdict import _change

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu" / "prefork_verdict.py"
PROBE = REPO / "scripts" / "gpu" / "prefork_probe.py"
COMMITTED = REPO / "docs" / "measurements" / "raw" / "h100-2026-12-05c" / "prefork-ab-1" / "standby-ab.json"


def _run(kind: str, cycle: int, *, startup_s: float, tok_s: float) -> dict[str, Any]:
    row: dict[str, Any] = {"cycle": cycle, "kind": kind, "ok": True, "reason": None, "startup_s": startup_s,
                           "tok_s": tok_s, "used": kind != "fresh", "max_total_num_tokens": 232109,
                           "standby_cpu_s": 0.0, "standby_gpu_mib": 0.0, "launcher": 2.0, "scheduler": 6.0,
                           "tokenizer+spawn": 13.0 if kind != "prefork" else 4.0, "warmup": 1.0}
    if kind == "prefork":
        row.update(prefork_ok=True, forked=2, spawned=0, why_spawned=[])
    return row


def _passing() -> dict[str, Any]:
    rows = [_run("fresh", 0, startup_s=74.0, tok_s=310.0)]
    for c in range(2):
        rows += [_run("standby", c, startup_s=22.4, tok_s=307.5 - c), _run("prefork", c, startup_s=13.5, tok_s=307.0)]
    return {"backend": "sglang", "rows": rows, "prefork": True}


def _verdict(tmp_path: Path, *abs_: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    paths = []
    for i, ab in enumerate(abs_):
        path = tmp_path / f"ab-{i}.json"
        path.write_text(json.dumps(ab))
        paths.append(str(path))
    return subprocess.run([sys.executable, str(SCRIPT), *paths], capture_output=True, text=True, timeout=60)


def test_a_passing_ab_passes_and_prints_the_stages(tmp_path: Path) -> None:
    done = _verdict(tmp_path, _passing())
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("PASS")
    assert "prefork: 2 runs, tok/s median 307.0" in done.stdout and "tokenizer+spawn 4.0 s" in done.stdout


@pytest.mark.parametrize(("change", "needle"), [
    (lambda ab: _change(ab, "prefork", spawned=1, why_spawned=["NCCL_X differ(s)"]), "1 spawned (NCCL_X differ(s))"),
    (lambda ab: _change(ab, "prefork", prefork_ok=False), "its fork server was not ready"),
    (lambda ab: _change(ab, "prefork", used=False), "did not launch the server"),
    (lambda ab: _change(ab, "standby", standby_cpu_s=0.4), "took 0.4 CPU s"),
    (lambda ab: _change(ab, "standby", standby_gpu_mib=512.0), "held 512.0 MiB"),
    (lambda ab: _change(ab, "standby", standby_gpu_mib=None), "held None MiB"),
    (lambda ab: _change(ab, "prefork", max_total_num_tokens=230000), "the KV pools differ"),
    (lambda ab: _change(ab, "prefork", tok_s=300.0), "prefork read 300.0 tok/s against"),
    (lambda ab: _change(ab, "prefork", startup_s=30.0), "no saving"),
    (lambda ab: {**ab, "rows": [r for r in ab["rows"] if r["kind"] != "prefork"]}, "no prefork run"),
])
def test_each_broken_check_fails_with_its_reason(tmp_path: Path, change: Any, needle: str) -> None:
    done = _verdict(tmp_path, change(_passing()))
    assert done.returncode == 1 and done.stdout.startswith("FAIL"), done.stdout
    assert needle in done.stdout, done.stdout


def test_the_emulator_is_not_asked_for_gpu_memory(tmp_path: Path) -> None:
    ab = _change({**_passing(), "backend": "sim"}, "standby", standby_gpu_mib=None)
    assert _verdict(tmp_path, ab).returncode == 0


def test_the_committed_h100_ab_fails_on_cuda_in_the_fork_server(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(COMMITTED)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout
    assert "initialised CUDA" in done.stdout and "0 child(ren) forked, 2 spawned" in done.stdout


FAKE = {
    "fakepre/__init__.py": "import json\nVALUE = 1\n",
    "fakepre/light.py": "from fakepre import VALUE\n",
    "fakegpu/__init__.py": ("import torch\nfrom fakepre import light\nfrom fakegpu import early\ntry:\n"
                            "    torch.cuda.current_device()\nexcept (AssertionError, RuntimeError):\n    pass\n"),
    "fakegpu/early.py": "Y = 2\n",
    "fakeafter.py": ("import fakegpu\nimport torch\nfor _ in range(2):\n    try:\n"
                     "        torch.cuda.get_device_capability()\n    except (AssertionError, RuntimeError):\n"
                     "        pass\n"),
}


def test_the_probe_splits_the_imports_where_cuda_is_first_initialised(tmp_path: Path) -> None:
    for name, text in FAKE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def child(mode: str, first: list[str] | None = None) -> dict[str, Any]:
        arg = tmp_path / f"{mode}.json"
        arg.write_text(json.dumps({"mode": mode, "modules": ["fakepre.light", "fakeafter"], "first": first or []}))
        done = subprocess.run([sys.executable, str(PROBE), "--child", str(arg)], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return out

    full = child("full")
    before = full["before_init"]
    # Everything fully imported before torch's lazy initialisation, and nothing still importing then.
    assert "fakepre" in before and "fakepre.light" in before and "torch" in before
    assert "fakegpu" not in before and "fakeafter" not in before
    # Done, but its package's __init__ was not: imported alone, it would run that __init__ and its ask.
    assert "fakegpu.early" not in before
    assert "fakegpu/__init__.py" in full["stack"]
    # Each site that asked, named by its first frame outside torch, in the order they first asked.
    sites = [(Path(a["site"].split(":")[0]).name, a["site"].split(" -> ")[1], a["count"]) for a in full["asks"]]
    assert sites == [("__init__.py", "torch current_device", 1), ("fakeafter.py", "torch get_device_capability", 2)]
    split = child("split", before)
    assert split["first_failed"] == [] and split["first_s"] >= 0 and split["rest_s"] >= 0
