"""A standby's imports from its module's main block (``Backend.main_block``), on real processes.

A stand-in launcher package (``standin.launch``, run with ``python -m``) imports ``standin.top`` at
its top, and in its main block sets a variable where told to, then imports ``standin.config`` (an
``import`` statement) and ``standin.helper`` (``importlib.import_module``), as SGLang's launcher imports
its model config and HTTP server after its argument handling. Each import appends a line to a file
with the process's pid and what it read, so the tests see which process imported what, and with what.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from autotune.server.standby import Standby, main_block_outcome

_CONFIG = """\
import os
import standin.deep
MODE = os.environ.get("STANDIN_MODE")
LATE = os.environ.get("STANDIN_LATE")
with open(os.environ["STANDIN_OUT"], "a") as f:
    f.write(f"config pid={os.getpid()} mode={MODE} late={LATE}\\n")
"""
_LAUNCH = """\
import importlib
import os
import sys

import standin.top

if __name__ == "__main__":
    if "--set" in sys.argv:
        os.environ["STANDIN_MODE"] = "set-by-main"
    if "--set-deep" in sys.argv:
        os.environ["STANDIN_DEEP"] = "set-by-main"
    before = os.environ.get("STANDIN_WRITTEN")
    from standin.config import MODE
    importlib.import_module("standin.helper")
    with open(os.environ["STANDIN_OUT"], "a") as f:
        f.write(f"served pid={os.getpid()} mode={MODE} written={before}/{os.environ.get('STANDIN_WRITTEN')}\\n")
"""


@pytest.fixture
def standin(tmp_path: Path) -> dict[str, str]:
    pkg = tmp_path / "pkg" / "standin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text("TOP = 1\n")
    (pkg / "config.py").write_text(_CONFIG)
    (pkg / "helper.py").write_text("import json\nHELPER = 1\n")
    # deep also writes a variable at import, as a module's import may (os.environ.setdefault).
    (pkg / "deep.py").write_text("import os\nDEEP = os.environ.get('STANDIN_DEEP')\n"
                                 "os.environ.setdefault('STANDIN_WRITTEN', 'by-deep')\n")
    (pkg / "launch.py").write_text(_LAUNCH)
    return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path / "pkg"),
            "STANDIN_OUT": str(tmp_path / "out.txt")}


def _standby(tmp_path: Path, env: dict[str, str], **kw: object) -> Standby:
    held = Standby(python=sys.executable, module="standin.launch", preimport=("standin.top",), env=env,
                   cwd=str(tmp_path), late_env=("STANDIN_LATE",), log_path=tmp_path / "standby.log",
                   main_block=("standin.config", "standin.helper"), **kw)  # type: ignore[arg-type]
    assert held.ready(timeout_s=60.0), held.log_path.read_text()[-2000:]
    return held


def _serve(held: Standby, tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, list[str], str]:
    """Hands the stand-in launcher over; returns its pid, the import file's lines and its log."""
    argv = [sys.executable, "-m", "standin.launch", *args]
    log = tmp_path / "server.log"
    try:
        proc = held.hand_over(argv, env=env, cwd=str(tmp_path), log_path=log)
        assert proc.wait(timeout=120) == 0, log.read_text()[-2000:]
    finally:
        held.discard()
    return proc.pid, Path(env["STANDIN_OUT"]).read_text().splitlines(), log.read_text()


def test_modules_imported_ahead_are_checked_where_the_launcher_asks_for_them(standin, tmp_path):
    held = _standby(tmp_path, standin)
    assert held.main_block == {"modules": 3, "failed": [], "why_not": None}
    before = Path(standin["STANDIN_OUT"]).read_text().splitlines()
    assert before == [f"config pid={held.pid} mode=None late=None"]  # imported by the standby, once
    pid, lines, log = _serve(held, tmp_path, standin)
    assert pid == held.pid
    # Not imported again; what deep's import wrote was taken back until the launcher asked for config.
    assert lines == [*before, f"served pid={pid} mode=None written=None/by-deep"], lines
    outcome = main_block_outcome(tmp_path / "server.log")
    assert outcome is not None and outcome["relaunched"] is None, log
    # config's group read STANDIN_MODE, STANDIN_OUT, STANDIN_DEEP and wrote STANDIN_WRITTEN;
    # STANDIN_LATE is left out.
    assert outcome["checked"] == "3 modules, 4 variables", outcome


def test_a_variable_the_main_block_sets_before_the_import_makes_it_a_fresh_launch(standin, tmp_path):
    held = _standby(tmp_path, standin)
    pid, lines, log = _serve(held, tmp_path, standin, "--set")
    # Ahead, config read no STANDIN_MODE; where the launcher imports it, the main block has set it:
    # the process re-executed itself (same pid) as `python -m standin.launch --set`, which imported
    # config with the value its own main block set.
    assert lines == [f"config pid={pid} mode=None late=None", f"config pid={pid} mode=set-by-main late=None",
                     f"served pid={pid} mode=set-by-main written=None/by-deep"], lines
    outcome = main_block_outcome(tmp_path / "server.log")
    assert outcome is not None and outcome["checked"] is None, log
    assert outcome["relaunched"] == ("the imports of standin.config read or wrote STANDIN_MODE, None when "
                                     "imported ahead, 'set-by-main' where the launcher imports standin.config"), outcome


def test_a_module_imported_by_a_main_block_module_is_checked_where_that_one_is_asked_for(standin, tmp_path):
    # standin.deep, imported ahead by standin.config's import, is never asked for by name after the
    # hand-over: a fresh launch imports it where it asks for standin.config, after its main block set
    # the variable deep reads.
    held = _standby(tmp_path, standin)
    pid, lines, log = _serve(held, tmp_path, standin, "--set-deep")
    outcome = main_block_outcome(tmp_path / "server.log")
    assert outcome is not None and outcome["relaunched"] == (
        "the imports of standin.config read or wrote STANDIN_DEEP, None when imported ahead, 'set-by-main' "
        "where the launcher imports standin.config"), log
    assert lines == [f"config pid={pid} mode=None late=None", f"config pid={pid} mode=None late=None",
                     f"served pid={pid} mode=None written=None/by-deep"], lines


def test_a_late_variable_is_left_to_the_child_processes_and_not_checked(standin, tmp_path):
    held = _standby(tmp_path, standin)
    late = {**standin, "STANDIN_LATE": "new"}
    assert held.why_not([sys.executable, "-m", "standin.launch"], env=late, cwd=str(tmp_path)) is None
    pid, lines, log = _serve(held, tmp_path, late)
    assert lines == [f"config pid={pid} mode=None late=None", f"served pid={pid} mode=None written=None/by-deep"], lines
    outcome = main_block_outcome(tmp_path / "server.log")
    assert outcome is not None and outcome["checked"] is not None and outcome["relaunched"] is None, log


def test_nothing_is_imported_ahead_where_a_plugin_is_installed(standin, tmp_path):
    dist = tmp_path / "pkg" / "standin_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: standin-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[standin.plugins]\nhooks = standin.top:TOP\n")
    held = _standby(tmp_path, standin, plugin_groups=("standin.plugins",))
    assert held.main_block == {"modules": 0, "failed": [],
                               "why_not": "plugins installed: standin.plugins:hooks"}
    assert not Path(standin["STANDIN_OUT"]).exists()  # config was not imported by the standby
    pid, lines, log = _serve(held, tmp_path, standin)
    assert lines == [f"config pid={pid} mode=None late=None", f"served pid={pid} mode=None written=None/by-deep"], lines
    assert main_block_outcome(tmp_path / "server.log") is None, log


def test_a_main_block_module_that_fails_to_import_is_left_to_the_launcher(standin, tmp_path):
    (tmp_path / "pkg" / "standin" / "helper.py").write_text("import json\nraise ImportError('no helper here')\n")
    held = _standby(tmp_path, standin)
    assert held.main_block is not None and held.main_block["failed"] == [
        "standin.helper: ImportError: no helper here"], held.main_block
    argv = [sys.executable, "-m", "standin.launch"]
    log = tmp_path / "server.log"
    try:
        proc = held.hand_over(argv, env=standin, cwd=str(tmp_path), log_path=log)
        rc = proc.wait(timeout=120)
    finally:
        held.discard()
    # The launcher meets the same failure where it imports the module, as a fresh launch does.
    deadline = time.monotonic() + 30
    while "no helper here" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rc == 1 and "ImportError: no helper here" in log.read_text(), log.read_text()[-2000:]
