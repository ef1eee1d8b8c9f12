"""scripts/gpu/check_kit.py, the GPU kit's static import check, on small overlays written here.

The kit is built on this machine and checked before any device time is spent, so a check that
passes a kit missing a module costs a device call. Each case runs the script as the build does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu" / "check_kit.py"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _check(site: Path, full: list[str], *entries: str) -> subprocess.CompletedProcess[str]:
    full_list = site.parent / "full.txt"
    full_list.write_text("".join(f"{p}\n" for p in full))
    argv = [sys.executable, str(SCRIPT), str(site), "--full-list", str(full_list)]
    for e in entries:
        argv += ["--entry", e]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_a_kit_with_every_module_imported_at_import_time_passes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _write(site, {"pkg/__init__.py": "from . import core\nfrom .sub import helper\n",
                  "pkg/core.py": "import os\nimport pkg.sub.helper\n",
                  "pkg/sub/__init__.py": "",
                  "pkg/sub/helper.py": "if TYPE_CHECKING:\n    import pkg.removed\n",
                  "pkg/extra.py": "def late():\n    import pkg.removed\n"})
    proc = _check(site, ["pkg/__init__.py", "pkg/core.py", "pkg/sub/__init__.py", "pkg/sub/helper.py",
                         "pkg/extra.py", "pkg/removed.py"], "pkg")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Imports under TYPE_CHECKING and inside functions do not run at import time.
    assert "pkg.removed" not in proc.stdout


def test_a_trimmed_module_imported_at_import_time_fails_and_names_its_importer(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _write(site, {"pkg/__init__.py": "from .core import thing\n",
                  "pkg/core.py": "from pkg import removed\nthing = 1\n"})
    proc = _check(site, ["pkg/__init__.py", "pkg/core.py", "pkg/removed.py"], "pkg")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "pkg.removed" in proc.stdout and "pkg.core" in proc.stdout


def test_a_module_level_find_spec_of_a_missing_parent_is_fatal(tmp_path: Path) -> None:
    # find_spec("a.b") imports "a" and raises when it is missing, so, unlike a guarded import of a
    # module no install had (a warning), it fails the kit even though the full install lacked "a".
    site = tmp_path / "site"
    _write(site, {"pkg/__init__.py": "import importlib.util\n"
                                     "HAS = importlib.util.find_spec('gone.child') is not None\n"})
    proc = _check(site, ["pkg/__init__.py"], "pkg")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ERROR" in proc.stdout and "gone" in proc.stdout


def test_a_guarded_import_of_a_module_the_full_install_never_had_only_warns(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _write(site, {"pkg/__init__.py": "import sys\nif sys.platform == 'win32':\n    import pkg.windows_only\n"
                                     "from . import there\n",
                  "pkg/there.py": "import pkg.never_installed\n"})
    proc = _check(site, ["pkg/__init__.py", "pkg/there.py"], "pkg")
    # The Linux test is decided statically (its branch never runs); a module no install had is a
    # warning, not a trimming error.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pkg.windows_only" not in proc.stdout
    assert "pkg.never_installed" in proc.stdout
