"""What one call to the remote GPU host carries for the GPU plan, against the host's 64 MiB a call.

A call sends the working tree (tracked and untracked-not-ignored files) plus the paths it names in
``carry``: the GPU kit (``.gpu/kit/site.tar.xz``) and, on a call that may find a fresh host, the
last call's state (``.gpu/state/``). The kit is most of it, so the repository's own files have a
budget too, and measurements committed under ``docs/measurements/`` spend it.

    python3 scripts/gpu/carry.py              # the figures; exit 1 when a call would not fit
    python3 scripts/gpu/carry.py --kit-limit  # the kit's limit in bytes (scripts/gpu/build_kit.sh)

Where the kit or the state is not on disk (a clean clone), its limit or allowance stands in.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[2]
#: The remote host's limit on what one call brings along (working tree and carried paths together).
CARRY_LIMIT = 64 * MIB
#: What ``build_kit.sh`` may write. The kit comes from pinned wheels: 50.67 MiB on 2026-12-01 and
#: 50.68 MiB on 2026-12-02 (with nvidia-ml-py); 51 leaves the measurements' archives 10 MiB.
KIT_LIMIT = 51 * MIB
#: The plan's two state archives after both shapes' searches: 2.9 + 0.3 MiB were brought back
#: on 2026-12-01 (gzip, ``scripts/gpu/state.sh snapshot``).
STATE_ALLOWANCE = 3 * MIB
KIT = Path(".gpu/kit/site.tar.xz")
STATE = Path(".gpu/state")


def tree_bytes(repo: Path = REPO) -> int:
    """Bytes of the files a call sends as the working tree: tracked plus untracked-not-ignored."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=repo, capture_output=True, check=True).stdout
    total = 0
    for name in {n for n in out.decode().split("\0") if n}:
        path = repo / name
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def budget(repo: Path = REPO) -> list[tuple[str, int, str]]:
    """The parts of one call: (part, bytes, where the figure comes from)."""
    kit = repo / KIT
    state = [p for p in (repo / STATE).glob("*.tar.*") if p.is_file()]
    return [
        ("working tree", tree_bytes(repo), "git ls-files --cached --others --exclude-standard"),
        ("GPU kit", kit.stat().st_size if kit.is_file() else KIT_LIMIT,
         str(KIT) if kit.is_file() else "not built: its limit"),
        ("plan state", sum(p.stat().st_size for p in state) if state else STATE_ALLOWANCE,
         str(STATE) if state else "none here: the allowance"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit-limit", action="store_true", help="print the kit's limit in bytes")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    if args.kit_limit:
        print(KIT_LIMIT)
        return 0
    parts = budget(args.repo)
    total = sum(n for _, n, _ in parts)
    for part, n, src in parts:
        print(f"{part:13s} {n / MIB:7.2f} MiB  ({src})")
    print(f"{'one call':13s} {total / MIB:7.2f} MiB  of {CARRY_LIMIT / MIB:.0f} MiB "
          f"({(CARRY_LIMIT - total) / MIB:+.2f} MiB left)")
    if total > CARRY_LIMIT:
        print("over: the remote host refuses the call. Commit bulky measurements as xz archives, "
              "drop superseded snapshots (git keeps them), or trim the kit (scripts/gpu/build_kit.sh)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
