"""The JSON tables of SGLang release facts shipped in ``autotune/sglang/data/``, read and written.

Tables generated from a real SGLang (the built-in twin's flag table, the ``ServerArgs`` field
snapshot) are data, not source: one file per kind and release, ``<kind>-<version>.json``, so a
regenerated table is a data diff and another release's table can sit beside it. They are written
with one entry per line, so a regeneration after an SGLang upgrade shows up as a readable diff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).with_name("data")


def table_path(kind: str, version: str) -> Path:
    """The file of one kind of table (``parser``, ``fields``) for one SGLang release."""
    return DATA_DIR / f"{kind}-{version}.json"


def read_table(kind: str, version: str) -> dict[str, Any]:
    """One shipped table, as parsed JSON (callers cache what they build from it)."""
    return json.loads(table_path(kind, version).read_text(encoding="utf-8"))


def table_text(data: dict[str, Any]) -> str:
    """``data`` as JSON text, each entry of a top-level object or list on a line of its own."""
    out = ["{"]
    items = list(data.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, dict) and value:
            rows = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()]
            out += [f"  {json.dumps(key)}: {{", ",\n".join(rows), f"  }}{comma}"]
        elif isinstance(value, list) and value:
            out += [f"  {json.dumps(key)}: [", ",\n".join(f"    {json.dumps(v)}" for v in value), f"  ]{comma}"]
        else:
            out.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    out.append("}")
    return "\n".join(out) + "\n"


def write_table(kind: str, version: str, data: dict[str, Any]) -> Path:
    """Write one table (see :func:`table_text`) and return its path."""
    path = table_path(kind, version)
    path.write_text(table_text(data), encoding="utf-8")
    return path
