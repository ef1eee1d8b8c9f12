"""The outcome log of the reliability tests: ``test-artifacts/reliability.json``.

Tests record what they tried and what they saw *before* asserting, so a failing run leaves an
honest record (``ok: false``) rather than a stale success. Entries are keyed
``section -> name`` and replaced when the same case runs again; each carries the pytest session
it came from (``session``) and when, so ``scripts/reliability_report.py`` can tell a fresh result
from one left over by an earlier run. Writes are atomic and serialised with ``flock`` (pytest
may run in several processes).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DEFAULT_PATH = REPO / "test-artifacts" / "reliability.json"
# `make test` names its run, so that the report's --check can refuse a case an earlier run left.
SESSION = (os.environ.get("AUTOTUNE_RELIABILITY_SESSION")
           or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")

SECTIONS = ("placement", "faults", "interrupts", "bad_inputs", "load", "searches", "tracking")


def path() -> Path:
    """Where outcomes go (``AUTOTUNE_RELIABILITY_JSON`` overrides, for tests of the report)."""
    return Path(os.environ.get("AUTOTUNE_RELIABILITY_JSON") or DEFAULT_PATH)


def record(section: str, name: str, *, ok: bool, **data: Any) -> dict[str, Any]:
    """Store one outcome and return it.

    Args:
        section: One of :data:`SECTIONS`.
        name: The case, unique within its section.
        ok: Whether the case met every expectation (the test asserts the same things).
        **data: JSON-ready details (numbers, strings, lists, dicts).
    """
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {SECTIONS}, got {section!r}")
    entry = {"ok": bool(ok), **data, "session": SESSION,
             "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]}
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            doc = json.loads(target.read_text()) if target.exists() else {}
        except ValueError:
            doc = {}
        doc.setdefault("sections", {}).setdefault(section, {})[name] = entry
        doc["updated_at"] = entry["recorded_at"]
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str))
        os.replace(tmp, target)
    return entry


def search_outcome(name: str, *, planned: int, completed: int, failed: int = 0,
                   orphans: int, **data: Any) -> dict[str, Any]:
    """Record one search's trial accounting: ``lost`` = planned trials without a final result."""
    lost = planned - completed
    return record("searches", name, ok=lost == 0 and orphans == 0, planned=planned,
                  completed=completed, failed=failed, lost=lost, orphans=orphans, **data)
