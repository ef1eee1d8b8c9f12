"""Real SGLang parsers described as tables, and parsers rebuilt from such tables.

Two table formats describe an SGLang release's ``launch_server`` flags without importing it. The
built-in twin's ``flags`` rows (``data/parser-<version>.json``, read by
:mod:`autotune.sglang._parser_twin`) are regenerated here from the installed SGLang
(``python -m autotune.sglang.parser_tables --write``). The richer JSON rows of
:func:`describe_rows` keep what another release's parser needs to be rebuilt
(``tests/data/sglang-<version>-flags.json``, the test suite's session table), and
:func:`parser_from_rows` rebuilds it. Both record the verdicts of SGLang's own ``--config`` loader,
read here too. Everything that imports SGLang does it inside the function: it takes seconds and
SGLang is not installed everywhere.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autotune.sglang import _tables
from autotune.sglang._parser_twin import ROW_TYPES, SGLANG_VERSION, FlagInfo, RaisingParser

# --------------------------------------------------------------------------------------------
# The built-in twin's flag table, generated from a real parser.
# --------------------------------------------------------------------------------------------


def _describe_action(action: argparse.Action, config_kind: str) -> FlagInfo | None:
    if isinstance(action, argparse._HelpAction):
        return None
    options = tuple(action.option_strings)
    if isinstance(action, argparse.BooleanOptionalAction):
        arity = "B"
        negatives = {"--no-" + o[2:] for o in options if o.startswith("--") and not o.startswith("--no-")}
        options = tuple(o for o in options if o not in negatives)
    elif isinstance(action, argparse._StoreTrueAction):
        arity = "0"
    elif action.nargs == 0:
        arity = "D"
    else:
        arity = "1" if action.nargs is None else str(action.nargs)
    type_name = getattr(action.type, "__name__", None)
    type_code = {"int": "i", "float": "f", "human_readable_int": "h"}.get(type_name or "", "s")
    if arity in ("0", "D", "B"):
        type_code = "-"
    return FlagInfo(arity, type_code, config_kind, action.dest, options)


def describe_parser(parser: argparse.ArgumentParser, *, config_kinds: dict[str, str]) -> list[FlagInfo]:
    """Describe a real SGLang parser as the built-in twin's flag table.

    Args:
        parser: A parser filled by ``ServerArgs.add_cli_args``.
        config_kinds: Option string -> ``"t"``, ``"v"`` or class name, from SGLang's config loader.

    Returns:
        One entry per action, in registration order.
    """
    flags = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "config":
            continue
        info = _describe_action(action, config_kinds.get(action.option_strings[0], "v"))
        if info is not None:
            flags.append(info)
    return flags


def table_from_sglang() -> tuple[FlagInfo, ...]:
    """The built-in twin's flag table, regenerated from the installed SGLang.

    The config column comes from SGLang's own ``ConfigArgumentMerger``: which keys it treats as
    store_true switches and which it refuses.
    """
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return tuple(describe_parser(parser, config_kinds=config_kinds_of(parser)))


def write_twin_table() -> str:
    """Write the installed SGLang's flags as ``data/parser-<its version>.json``; return the path.

    The hand-kept ``covered`` section is carried over from the shipped table. For a release other
    than :data:`~autotune.sglang._parser_twin.SGLANG_VERSION`, bump that constant and check
    ``covered`` against the new release (``tests/unit/sglang/test_sglang_args.py`` does).
    """
    import sglang

    data = dict(_tables.read_table("parser", SGLANG_VERSION))
    data["sglang_version"] = sglang.__version__
    data["flags"] = [[i.arity, i.type_code, i.config, i.dest, list(i.option_strings)] for i in table_from_sglang()]
    return str(_tables.write_table("parser", sglang.__version__, data))


# --------------------------------------------------------------------------------------------
# Flag tables of other SGLang versions, as JSON rows (tests/data/sglang-<version>-flags.json).
# --------------------------------------------------------------------------------------------


def _json_value(value: Any) -> tuple[bool, Any]:
    """(True, value) when ``value`` survives a JSON round trip unchanged, else (False, None)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True, value
    if isinstance(value, (list, tuple)):
        items = [_json_value(v) for v in value]
        return (True, [v for _, v in items]) if all(ok for ok, _ in items) else (False, None)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        entries = {k: _json_value(v) for k, v in value.items()}
        ok = all(o for o, _ in entries.values())
        return (True, {k: v for k, (_, v) in entries.items()}) if ok else (False, None)
    return False, None


def describe_rows(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every option of a real SGLang parser as a JSON-ready row, in registration order.

    A row keeps what parsing and rendering need: ``options`` (canonical first; a ``--x/--no-x``
    pair lists its positive spellings), ``dest``, ``action`` (SGLang's action class name),
    ``kind`` (``store``, ``store_true``, ``store_const``, ``bool_optional``), ``nargs``, ``type``
    (the type callable's name), ``choices``, ``default`` and ``const`` (left out when not plain
    JSON), ``required`` and ``new_flag`` (where a deprecated action names its replacement).

    Args:
        parser: A parser filled by ``ServerArgs.add_cli_args``.
    """
    rows: list[dict[str, Any]] = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "config" or isinstance(action, argparse._HelpAction):
            continue
        options = list(action.option_strings)
        if isinstance(action, argparse.BooleanOptionalAction):
            kind = "bool_optional"
            negatives = {"--no-" + o[2:] for o in options if o.startswith("--") and not o.startswith("--no-")}
            options = [o for o in options if o not in negatives]
        elif action.nargs == 0:
            kind = "store_true" if action.const is True and action.default in (False, None) else "store_const"
        else:
            kind = "store"
        row: dict[str, Any] = {"options": options, "dest": action.dest, "action": type(action).__name__,
                               "kind": kind}
        if kind == "store":
            row["nargs"] = action.nargs
            row["type"] = getattr(action.type, "__name__", None) if action.type is not None else None
            ok, choices = _json_value(list(action.choices)) if action.choices is not None else (True, None)
            row["choices"] = choices if ok else None
        ok, default = _json_value(action.default)
        if ok:
            row["default"] = default
        if kind == "store_const":
            ok, const = _json_value(action.const)
            if ok:
                row["const"] = const
        if action.required:
            row["required"] = True
        new_flag = getattr(action, "new_flag", None)
        if isinstance(new_flag, str):
            row["new_flag"] = new_flag
        rows.append(row)
    return rows


def config_merger_class() -> Any:
    """The installed SGLang's ``ConfigArgumentMerger`` (0.5.23 moved it under ``srt.utils``)."""
    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger  # SGLang <= 0.5.17
    return ConfigArgumentMerger


def config_keys_of(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """How the installed SGLang's ``--config`` loader reads YAML keys, for a flag table.

    Releases differ (0.5.17 refuses every key whose dest a non-store action shares, 0.5.23 only
    keys no supported flag reads), so the loader's own verdicts are recorded, not re-derived.

    Returns:
        ``{"store_true": [key, ...], "unsupported": {key: action class name}}``.
    """
    merger = config_merger_class()(parser)
    return {"store_true": sorted(set(merger.store_true_actions)),
            "unsupported": {k: type(a).__name__ for k, a in sorted(merger.unsupported_actions.items())}}


def config_kinds_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Option -> ``"t"``/``"v"``/class name, from the installed SGLang's ``ConfigArgumentMerger``."""
    merger = config_merger_class()(parser)
    kinds: dict[str, str] = {}
    for action in parser._actions:
        if not action.option_strings:
            continue
        if action.dest in merger.unsupported_actions:
            kinds[action.option_strings[0]] = type(merger.unsupported_actions[action.dest]).__name__
        elif isinstance(action, argparse._StoreTrueAction) and action.dest in merger.store_true_actions:
            kinds[action.option_strings[0]] = "t"
        else:
            kinds[action.option_strings[0]] = "v"
    return kinds


def parser_from_rows(rows: list[dict[str, Any]]) -> RaisingParser:
    """A real argparse parser rebuilt from :func:`describe_rows` output.

    Every action keeps its spellings, dest, arity, type, choices and default, so prefix matching,
    ambiguity and value errors are SGLang's. Each action also carries ``new_flag`` (a deprecated
    alias's replacement, or None).
    """
    parser = RaisingParser(prog="sglang serve")
    for row in rows:
        kind = row["kind"]
        kwargs: dict[str, Any] = {"dest": row["dest"], "default": row.get("default", argparse.SUPPRESS)}
        if kind == "bool_optional":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind == "store_true":
            kwargs["action"] = "store_true"
        elif kind == "store_const":
            kwargs["action"] = "store_const"
            kwargs["const"] = row.get("const")
        else:
            if row.get("nargs") is not None:
                kwargs["nargs"] = row["nargs"]
            type_name = row.get("type")
            kwargs["type"] = ROW_TYPES.get(type_name or "str", str) if type_name is not None else None
            if row.get("choices") is not None:
                kwargs["choices"] = row["choices"]
        if row.get("required"):
            kwargs["required"] = True
            kwargs.pop("default", None)
        action = parser.add_argument(*row["options"], **kwargs)
        action.new_flag = row.get("new_flag")  # type: ignore[attr-defined]
    parser.add_argument("--config", type=str,
                        help="Read CLI options from a config file. Must be a YAML file with configuration options.")
    return parser


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m autotune.sglang.parser_tables --write")
    print(f"wrote {write_twin_table()}")
