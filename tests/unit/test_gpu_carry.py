"""The size budget of one call to the remote GPU host (scripts/gpu/carry.py): the repository must
leave room for the GPU kit and the plan's state, or the next GPU run's first call is refused.

In the main suite, not tests/gpu_kit/: the tree grows with every commit of measurements, and while
this ran only with the GPU kit's tests it went 1.3 MiB past its room unseen (2026-12-05)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import carry  # noqa: E402


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_this_repository_leaves_room_for_the_kit_and_the_state() -> None:
    tree = carry.tree_bytes(REPO)
    room = carry.CARRY_LIMIT - carry.KIT_LIMIT - carry.STATE_ALLOWANCE
    assert tree <= room, (
        f"the working tree is {tree / carry.MIB:.2f} MiB; with the kit's {carry.KIT_LIMIT / carry.MIB:.0f} MiB "
        f"and the state's {carry.STATE_ALLOWANCE / carry.MIB:.0f} MiB one call to the host would exceed "
        f"{carry.CARRY_LIMIT / carry.MIB:.0f} MiB (room: {room / carry.MIB:.2f} MiB). Commit bulky "
        "measurements as xz archives or drop superseded snapshots")


def test_tree_counts_what_a_call_sends_and_nothing_ignored(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text(".gpu/\n")
    (tmp_path / "tracked.txt").write_bytes(b"x" * 1000)
    git(tmp_path, "add", "tracked.txt", ".gitignore")
    (tmp_path / "new.txt").write_bytes(b"y" * 300)  # untracked, not ignored: it travels
    (tmp_path / ".gpu").mkdir()
    (tmp_path / ".gpu" / "big.bin").write_bytes(b"z" * 5000)  # ignored: only carry sends it
    assert carry.tree_bytes(tmp_path) == 1000 + 300 + len(".gpu/\n")


def test_a_call_over_the_limit_is_refused_with_a_way_out(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "kit").mkdir()
    big = tmp_path / "measurements.bin"
    with open(big, "wb") as fh:  # sparse: its size counts, no disk is spent
        fh.truncate(carry.CARRY_LIMIT)
    proc = subprocess.run([sys.executable, str(REPO / "scripts/gpu/carry.py"), "--repo", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "over: the remote host refuses the call" in proc.stderr
    # The kit is not built in that checkout: its limit stands in, and says so.
    assert "not built: its limit" in proc.stdout
    big.unlink()
    ok = subprocess.run([sys.executable, str(REPO / "scripts/gpu/carry.py"), "--repo", str(tmp_path)],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "MiB left" in ok.stdout


def test_build_kit_takes_its_limit_from_the_budget() -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts/gpu/carry.py"), "--kit-limit"],
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == carry.KIT_LIMIT
    # build_kit.sh must not keep a number of its own: the line that sets LIMIT asks carry.py.
    lines = [ln for ln in (REPO / "scripts/gpu/build_kit.sh").read_text().splitlines()
             if ln.startswith("LIMIT=")]
    assert lines == ['LIMIT=$(python3 "$REPO/scripts/gpu/carry.py" --kit-limit)']
