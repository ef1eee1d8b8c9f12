"""Names in a search-space file: server arguments and environment variables, and ``forbidden:``.

A name a space sets or forbids must be a field of SGLang's ServerArgs (checked against the bundled
snapshot and the installed SGLang) or an UPPER_CASE environment variable, and a value must fit the
argument's type and choices. These checks sit apart from the section readers because parameters,
fixed args and ``forbidden:`` all share them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from autotune._yaml_lines import key_line_of, line_of
from autotune.names import is_env_name
from autotune.nccl_values import value_problem
from autotune.sglang import _fields as _sglang_fields
from autotune.space._schema import (
    Reader,
    closest,
    env_text,
    is_int,
    is_number,
    is_scalar,
    items,
    join,
    show,
    type_name,
)

ARG_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


# Env that only SGLang's speculative worker reads: with speculation off it is left out, so configs
# that differ only here share one baseline.
SPECULATION_ONLY_ENV = frozenset({"SGLANG_SIMULATE_ACC_LEN"})


def is_speculation_only(name: str) -> bool:
    """Whether a server arg or env var only matters when speculation is on."""
    return name.startswith("speculative_") or name in SPECULATION_ONLY_ENV


_installed_fields: frozenset[str] | None = None


def installed_sglang_fields() -> frozenset[str]:
    """ServerArgs field names of the installed SGLang, or an empty set when it is absent."""
    global _installed_fields  # a process-wide cache: the import takes seconds
    if _installed_fields is None:
        try:
            from sglang.srt.server_args import ServerArgs
        except Exception:  # noqa: BLE001 - any import failure means "not usable here"
            _installed_fields = frozenset()
        else:
            fields = getattr(ServerArgs, "__struct_fields__", None)  # msgspec (0.5.2x)
            if fields is None:
                import dataclasses  # older SGLang: ServerArgs was a dataclass

                fields = [f.name for f in dataclasses.fields(ServerArgs)]
            _installed_fields = frozenset(f for f in fields if not f.startswith("_"))
    return _installed_fields


def _other_installed_version_has(name: str) -> bool:
    """An SGLang other than the bundled snapshot's version is installed and has this field.

    Flags come and go between releases (0.5.17 still takes ``--sampling-backend``); the launch
    command is checked by the installed SGLang's own parser anyway.
    """
    # The version first: it is read from the package metadata, while the fields need SGLang's
    # import (seconds), which the snapshot's own version never needs.
    try:
        from importlib.metadata import version

        if version("sglang") == _sglang_fields.SGLANG_VERSION:
            return False
    except Exception:
        return False
    return name in installed_sglang_fields()


def arg_kind(name: str) -> tuple[str, tuple[Any, ...] | None] | None:
    """(kind, choices) of a known server arg, or None when unknown to the snapshot."""
    return _sglang_fields.fields().get(name)


def check_name(reader: Reader, name: Any, field: str, line: int | None) -> None:
    """A parameter, fixed arg or forbidden name must be a ServerArgs field or an env var."""
    if not isinstance(name, str) or not name:
        reader.fail(f"names must be strings, got {type_name(name)} {show(name)}", field=field,
                    line=line)
    if is_env_name(name):
        return
    if not ARG_NAME.match(name):
        reader.fail(f"{name!r} is neither a server argument (lower_case, SGLang's ServerArgs "
                    "field name) nor an environment variable (UPPER_CASE)", field=field,
                    line=line)
    from autotune.sglang.flags import active_flags  # here: the first call may import SGLang

    if name in _sglang_fields.no_cli() and not _other_installed_version_has(name):
        if active_flags().lookup(name) is None:  # the SGLang in use may still have the flag
            reader.fail(f"{name!r} cannot be set on SGLang's command line", field=field, line=line)
        return
    if name in _sglang_fields.fields() or name in installed_sglang_fields():
        return
    flags = active_flags()
    if flags.lookup(name) is not None:  # e.g. a deprecated alias the SGLang in use still has
        return
    hint = closest(name, _sglang_fields.fields())
    if flags.abbreviates(name):
        hint += f" ({flags.unknown_message(name)})"
    reader.fail(f"unknown server argument {name!r}{hint}; allowed: fields of SGLang's "
                f"ServerArgs (checked against SGLang {_sglang_fields.SGLANG_VERSION} and the "
                "installed SGLang, if any), or UPPER_CASE environment variables", field=field,
                line=line)


def check_arg_value(reader: Reader, name: str, value: Any, field: str,
                    line: int | None) -> None:
    """A value for a server arg must fit the arg's type and choices (None means unset)."""
    if value is None:
        return
    known = arg_kind(name)
    if is_env_name(name):
        if isinstance(value, bool) or not (isinstance(value, str) or is_number(value)):
            reader.fail(f"environment variable values must be strings or numbers, got "
                        f"{type_name(value)} {show(value)}; write '1' or '0' for flags",
                        field=field, line=line)
        problem = value_problem(name, value)
        if problem is not None:
            reader.fail(problem, field=field, line=line)
        return
    if known is None:
        return
    kind, choices = known
    kind = kind.rstrip("?")
    ok = {
        "int": is_int(value),
        "float": is_number(value),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "list": isinstance(value, list) and all(is_scalar(v) for v in value),
    }.get(kind, is_scalar(value) or (isinstance(value, list)
                                      and all(is_scalar(v) for v in value)))
    if not ok:
        wanted = {"int": "an integer", "float": "a number", "bool": "true or false",
                  "str": "a string", "list": "a list of scalars"}.get(kind, "a scalar")
        reader.fail(f"{name} takes {wanted}, got {type_name(value)} {show(value)}",
                    field=field, line=line)
    if choices is not None and not isinstance(value, list) and value not in choices:
        options = ", ".join(show(c) for c in choices)
        reader.fail(f"{show(value)} is not a valid {name}"
                    f"{closest(str(value), [str(c) for c in choices])}; allowed: {options}",
                    field=field, line=line)


# ---------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Forbidden:
    """Server args that must stay off, and environment values that must not be set.

    Attributes:
        args: Names of server args that must be unset or false.
        env: Environment variable name to forbidden values; None means any value.
    """

    args: tuple[str, ...] = ()
    env: Mapping[str, tuple[str, ...] | None] = dc_field(default_factory=dict)


def read_forbidden(reader: Reader, value: Any, line: int | None) -> Forbidden:
    """Parse ``forbidden: {args: [...], env: {NAME: [values]} | [NAME, ...]}``."""
    if value is None:
        return Forbidden()
    reader.mapping(value, "forbidden", line, allowed=("args", "env"))
    args: list[str] = []
    raw_args = value.get("args", [])
    if not isinstance(raw_args, list):
        reader.fail(f"must be a list of server argument names, got {type_name(raw_args)}",
                    field="forbidden.args", line=line_of(value, "args"))
    for index, name in enumerate(raw_args):
        ifield, iline = join("forbidden.args", index), line_of(raw_args, index)
        check_name(reader, name, ifield, iline)
        if is_env_name(name):
            reader.fail(f"{name} is an environment variable; list it under forbidden.env",
                        field=ifield, line=iline)
        args.append(name)
    env: dict[str, tuple[str, ...] | None] = {}
    raw_env = value.get("env", {})
    if isinstance(raw_env, list):
        for index, name in enumerate(raw_env):
            ifield, iline = join("forbidden.env", index), line_of(raw_env, index)
            if not isinstance(name, str) or not is_env_name(name):
                reader.fail(f"must be an UPPER_CASE environment variable name, got "
                            f"{show(name)}", field=ifield, line=iline)
            env[name] = None
    elif isinstance(raw_env, dict):
        reader.mapping(raw_env, "forbidden.env", line_of(value, "env"))
        for name, values, vfield, vline in items(raw_env, "forbidden.env"):
            if not is_env_name(name):
                reader.fail(f"must be an UPPER_CASE environment variable name, got "
                            f"{show(name)}", field=vfield, line=key_line_of(raw_env, name))
            if values is None:
                env[name] = None
                continue
            if not isinstance(values, list) or not values:
                reader.fail("must be a non-empty list of forbidden values, or null for any "
                            f"value, got {type_name(values)}", field=vfield, line=vline)
            out = []
            for index, item in enumerate(values):
                if isinstance(item, bool) or not (isinstance(item, str) or is_number(item)):
                    reader.fail(f"forbidden values are strings or numbers, got "
                                f"{type_name(item)}", field=join(vfield, index),
                                line=line_of(values, index))
                out.append(env_text(item))
            env[name] = tuple(out)
    else:
        reader.fail(f"must be a mapping of NAME: [values] or a list of names, got "
                    f"{type_name(raw_env)}", field="forbidden.env", line=line_of(value, "env"))
    return Forbidden(tuple(args), env)
