"""autotune.search.folders: one running search per name, and the refusal names the holder's pid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.search import folders

# Takes the lock, says so on stdout, waits, then writes its pid (or exits without writing it): the
# window in which a contender used to read an empty (or stale) file and say "pid unknown".
_HOLDER = """
import fcntl, os, sys, time
fh = open(sys.argv[1], "a+")
fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
if sys.argv[3] == "exit":
    sys.exit(0)
fh.seek(0); fh.truncate(); fh.write(f"{os.getpid()}\\n"); fh.flush()
sys.stdin.read()
"""


def _holder(lock: Path, after_s: float, then: str = "write") -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock), str(after_s), then],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("earlier", ["", "stale"])
def test_a_contender_in_the_holders_window_names_the_holders_pid(tmp_path: Path, earlier: str) -> None:
    folder = tmp_path / "mlruns" / "ray" / "same"
    folder.mkdir(parents=True)
    lock = folder / folders.LOCK_FILE
    if earlier:
        lock.write_text(f"{_dead_pid()}\n")  # left by an earlier search, now ended
    holder = _holder(lock, 0.5)
    try:
        with pytest.raises(ConfigError, match=rf"is running \(pid {holder.pid}\)"):
            folders.hold(folder, "same")
    finally:
        holder.communicate("")
    assert folder.resolve() not in folders._HELD


def test_a_holder_that_ends_before_writing_its_pid_leaves_the_folder_to_the_contender(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    holder = _holder(folder / folders.LOCK_FILE, 0.5, then="exit")
    try:
        folders.hold(folder, "f")
        assert (folder / folders.LOCK_FILE).read_text().strip() == str(os.getpid())
    finally:
        folders.release(folder)
        holder.communicate("")
    assert holder.returncode == 0


def test_a_second_hold_in_one_process_is_a_no_op_and_release_frees_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "g"
    folders.hold(folder, "g")
    folders.hold(folder, "g")
    proc = subprocess.run([sys.executable, "-c",
                           "import sys; from pathlib import Path; from autotune.search import folders;"
                           "folders.hold(Path(sys.argv[1]), 'g')", str(folder)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "is running (pid" in proc.stderr
    folders.release(folder)
    proc = subprocess.run([sys.executable, "-c",
                           "import sys; from pathlib import Path; from autotune.search import folders;"
                           "folders.hold(Path(sys.argv[1]), 'g')", str(folder)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
