"""SGLang 0.5.23's ``launch_server`` command line, rebuilt for machines without SGLang.

A laptop, CI or the emulator must accept and reject the same command lines as SGLang. Two tables
in ``autotune/sglang/data/parser-0.5.23.json`` make that work without importing SGLang:

* ``flags`` lists every flag SGLang's parser registers, in registration order, with its arity.
  Registering all of them (not only the ones autotune reads) keeps argparse's prefix matching
  identical: ``--cuda-graph-max-bs`` is ambiguous only because both ``-decode`` and ``-prefill``
  exist, and ``--tp`` is accepted only because ``--tp-size`` is the one flag it abbreviates.
* ``covered`` gives the flags autotune's search spaces and the emulator read their exact SGLang
  type (named, see :data:`ROW_TYPES`), choices and default. Every other flag is carried through as
  a string (or int/float), and appears in the parsed result only when it was given.

This module loads them (once) and builds the parser. ``flags`` is generated from SGLang's own
parser by :mod:`autotune.sglang.parser_tables`; ``tests/unit/sglang/test_sglang_args.py`` fails when either
table drifts from the installed SGLang and prints how to regenerate it.
"""

from __future__ import annotations

import argparse
import functools
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

from autotune.sglang import _tables

SGLANG_VERSION = "0.5.23"
"""The release the shipped table describes (``data/parser-<version>.json``)."""

@dataclass(frozen=True)
class FlagInfo:
    """One argparse action of SGLang's parser.

    Attributes:
        arity: ``"0"`` store_true, ``"D"`` deprecated store_true (same parsing, not allowed in a
            ``--config`` file), ``"B"`` ``--x/--no-x`` pair, ``"1"`` one value, or argparse's
            nargs ``"+"``, ``"*"``, ``"?"``.
        type_code: ``"s"`` str, ``"i"`` int, ``"f"`` float, ``"h"`` human-readable int, ``"-"`` none.
        config: ``"t"`` a store_true key in a ``--config`` YAML, ``"v"`` a valued key, otherwise the
            action class name SGLang's config loader rejects the key with.
        dest: The ``ServerArgs`` field (argparse dest).
        option_strings: The spellings, canonical first. A ``"B"`` flag lists only its positive
            spellings; argparse derives the ``--no-`` ones.
    """

    arity: str
    type_code: str
    config: str
    dest: str
    option_strings: tuple[str, ...]

    @property
    def flag(self) -> str:
        """The canonical spelling, ``--speculative-num-steps``."""
        return self.option_strings[0]


# --------------------------------------------------------------------------------------------
# Value types with SGLang's names: argparse puts the type's __name__ into its messages
# ("invalid human_readable_int value"), so the names must match for the messages to match.
# --------------------------------------------------------------------------------------------


def human_readable_int(value: str) -> int:
    """An int with an optional SI (``25.6k``) or IEC (``1Ki``) suffix, as SGLang accepts it.

    Args:
        value: The command-line text.

    Returns:
        The integer.

    Raises:
        argparse.ArgumentTypeError: With SGLang's wording, for text that is not such a number.
    """
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def parse_cuda_graph_backend_arg(raw: str) -> str:
    """SGLang's check for the retired ``tc_piecewise`` CUDA-graph backend."""
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


_TYPES: dict[str, Callable[[str], Any] | None] = {
    "s": str, "i": int, "f": float, "h": human_readable_int, "-": None,
}

#: Value types a table may name (the built-in twin's ``covered`` and the JSON flag tables of other
#: releases); any other type name parses as ``str``.
ROW_TYPES: dict[str, Callable[[str], Any]] = {
    "str": str, "int": int, "float": float, "human_readable_int": human_readable_int,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
}


@dataclass(frozen=True)
class Spec:
    """Type, choices and default of a covered flag (store_true flags need only the default)."""

    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    default: Any = None
    required: bool = False


@functools.cache
def _table() -> dict[str, Any]:
    return _tables.read_table("parser", SGLANG_VERSION)


@functools.cache
def covered() -> dict[str, Spec]:
    """The flags autotune reads, with SGLang 0.5.23's exact type, choices and default."""
    return {
        dest: Spec(ROW_TYPES[row["type"]] if "type" in row else None,
                   tuple(row["choices"]) if "choices" in row else None,
                   row.get("default"), row.get("required", False))
        for dest, row in _table()["covered"].items()
    }


@functools.cache
def flag_table() -> tuple[FlagInfo, ...]:
    """Every flag of SGLang 0.5.23's parser, in registration order."""
    return tuple(FlagInfo(arity, type_code, config, dest, tuple(options))
                 for arity, type_code, config, dest, options in _table()["flags"])


@functools.lru_cache(maxsize=1)
def flags_by_option() -> dict[str, FlagInfo]:
    """Every spelling (``--tp-size``, ``--tensor-parallel-size``, ``--no-x``) -> its flag."""
    out: dict[str, FlagInfo] = {}
    for info in flag_table():
        for option in info.option_strings:
            out[option] = info
            if info.arity == "B":
                out["--no-" + option[2:]] = info
    return out


class RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing and exiting.

    Cached parsers are shared between threads, so redirecting ``sys.stderr`` around a parse
    would be racy; overriding ``error``/``exit`` keeps argparse's message without the exit.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ParserExit(2, message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise ParserExit(status, (message or "").strip())

    def _print_message(self, message: str, file: Any = None) -> None:
        # --help would print the whole help text; the caller turns the exit into an error.
        return None


class ParserExit(Exception):
    """argparse wanted to exit: status 2 is a usage error with its message."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


@functools.lru_cache(maxsize=1)
def build_parser() -> RaisingParser:
    """The built-in twin of ``ServerArgs.add_cli_args`` (cached; parsing does not mutate it)."""
    parser = RaisingParser(prog="sglang serve")
    for info in flag_table():
        _add_flag(parser, info)
    parser.add_argument(
        "--config", type=str,
        help="Read CLI options from a config file. Must be a YAML file with configuration options.",
    )
    return parser


def _add_flag(parser: argparse.ArgumentParser, info: FlagInfo) -> None:
    spec = covered().get(info.dest)
    kwargs: dict[str, Any] = {"dest": info.dest}
    if spec is None:
        # Unread flags appear in the result only when given, so nothing pretends to know their
        # SGLang default.
        kwargs["default"] = argparse.SUPPRESS
    else:
        kwargs["default"] = spec.default
    if info.arity in ("0", "D"):
        kwargs["action"] = "store_true"
    elif info.arity == "B":
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        if info.arity != "1":
            kwargs["nargs"] = info.arity
        if spec is not None:
            kwargs["type"] = spec.type
            if spec.choices is not None:
                kwargs["choices"] = list(spec.choices)
            if spec.required:
                kwargs["required"] = True
                del kwargs["default"]
        else:
            kwargs["type"] = _TYPES[info.type_code]
    action = parser.add_argument(*info.option_strings, **kwargs)
    action.new_flag = None  # type: ignore[attr-defined]
    action.config_kind = info.config  # type: ignore[attr-defined]


def default_of(dest: str) -> Any:
    """SGLang's default for a covered field.

    Raises:
        KeyError: For a field the built-in parser does not cover.
    """
    return covered()[dest].default
