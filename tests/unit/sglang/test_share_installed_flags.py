"""share_installed_flags: a search's trial processes read the installed SGLang's flags from a table
instead of importing SGLang's parser (16 s per fresh process on the H200 host; docs/startup.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.sglang import flags as sglang_flags

ROOT = Path(__file__).resolve().parents[3]

WRITE = """
import json, os, sys
from autotune.sglang import flags
path = flags.share_installed_flags(sys.argv[1])
real = flags.installed_flags()
print(json.dumps({"path": str(path), "env": os.environ.get(flags.FLAG_TABLE_ENV), "version": real.version,
                  "dests": sorted(real.dests()),
                  "again": str(flags.share_installed_flags(sys.argv[1]))}))
"""

READ = """
import json, sys
from autotune.sglang import flags
f = flags.active_flags()
print(json.dumps({"version": f.version, "dests": sorted(f.dests()), "origin": f.origin,
                  "sglang_imported": any(m == "sglang" or m.startswith("sglang.") for m in sys.modules)}))
"""


def _run(code: str, env: dict[str, str], *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sglang_flags.sglang_importable(), reason="needs an installed SGLang")
@pytest.mark.slow  # 3 s: a child interpreter (make test-fast leaves it out)
def test_a_child_reads_the_shared_table_without_importing_sglang(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != sglang_flags.FLAG_TABLE_ENV}
    env["PYTHONPATH"] = str(ROOT)
    wrote = _run(WRITE, env, str(tmp_path / "ray" / "search"))
    table = Path(wrote["path"])
    assert table.is_file() and table.parent == tmp_path / "ray" / "search"
    assert table.name == f"sglang-flags-{wrote['version']}.json" and wrote["env"] == str(table)
    assert wrote["again"] == "None"  # once a table decides, nothing is written again
    read = _run(READ, {**env, sglang_flags.FLAG_TABLE_ENV: str(table)})
    assert read["origin"] == f"flag table {table.name}" and not read["sglang_imported"]
    assert read["version"] == wrote["version"] and read["dests"] == wrote["dests"]


def test_nothing_is_done_where_a_table_already_decides(tmp_path, monkeypatch):
    monkeypatch.setenv(sglang_flags.FLAG_TABLE_ENV, str(tmp_path / "given.json"))
    assert sglang_flags.share_installed_flags(tmp_path) is None
    assert os.environ[sglang_flags.FLAG_TABLE_ENV] == str(tmp_path / "given.json")
    assert not list(tmp_path.iterdir())
