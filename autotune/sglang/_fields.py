"""A snapshot of SGLang's ``ServerArgs`` fields, for checking names without importing SGLang.

Importing ``sglang.srt.server_args`` pulls in torch and takes seconds, and SGLang is not
installed on every machine that loads a search space. This table
(``autotune/sglang/data/fields-<version>.json``) lets the space loader catch a misspelt parameter
name, a wrong type or a bad choice everywhere; names missing here are still checked against the
installed SGLang when it can be imported.

Regenerate after an SGLang upgrade (needs SGLang importable; for a new release, bump
:data:`SGLANG_VERSION` too)::

    python -m autotune.sglang._fields --write
"""

from __future__ import annotations

import functools
import sys
import typing
from typing import Any

from autotune.sglang import _tables

SGLANG_VERSION = "0.5.23"
"""The release the shipped snapshot describes (``data/fields-<version>.json``)."""


@functools.cache
def fields() -> dict[str, tuple[str, tuple[object, ...] | None]]:
    """Field name -> (kind, choices).

    kind is ``int``, ``float``, ``bool``, ``str``, ``list`` or ``other``; a trailing ``?`` means
    None is allowed. choices is None where the field takes any value of its kind.
    """
    rows = _tables.read_table("fields", SGLANG_VERSION)["fields"]
    return {name: (kind, None if choices is None else tuple(choices)) for name, (kind, choices) in rows.items()}


@functools.cache
def no_cli() -> frozenset[str]:
    """Fields SGLang does not expose as command-line flags."""
    return frozenset(_tables.read_table("fields", SGLANG_VERSION)["no_cli"])


def _render() -> dict[str, Any]:
    """The snapshot table of the installed SGLang, JSON-ready."""
    # Imported here: only regeneration needs SGLang, and importing it takes seconds.
    import sglang
    from sglang.srt.server_args import ServerArgs

    hints = typing.get_type_hints(ServerArgs, include_extras=True)
    names = {int: "int", float: "float", bool: "bool", str: "str"}
    rows: dict[str, list[Any]] = {}
    no_cli_names: list[str] = []
    for name in ServerArgs.__struct_fields__:
        if name.startswith("_"):
            continue
        hint = hints[name]
        # An annotation's metadata is arbitrary; SGLang's Arg entries are read by attribute.
        meta: list[Any] = []
        if typing.get_origin(hint) is typing.Annotated:
            hint, *meta = typing.get_args(hint)
        nullable = False
        if typing.get_origin(hint) is typing.Union:
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            nullable = len(members) < len(typing.get_args(hint))
            if len(members) == 1:
                hint = members[0]
        choices: tuple[object, ...] | None = None
        origin = typing.get_origin(hint)
        if origin is typing.Literal:
            choices = tuple(typing.get_args(hint))
            kinds = {type(c) for c in choices}
            kind = names.get(kinds.pop(), "other") if len(kinds) == 1 else "other"
        elif origin is list:
            kind = "list"
        else:
            kind = names.get(hint, "other")
        for item in meta:
            if type(item).__name__ == "Arg":
                if item.choices:
                    choices = tuple(item.choices)
                if item.no_cli:
                    no_cli_names.append(name)
        rows[name] = [kind + ("?" if nullable else ""), None if choices is None else list(choices)]
    return {"sglang_version": sglang.__version__, "fields": rows, "no_cli": no_cli_names}


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        data = _render()
        print(f"wrote {_tables.write_table('fields', data['sglang_version'], data)}")
    else:
        sys.stdout.write(_tables.table_text(_render()))
