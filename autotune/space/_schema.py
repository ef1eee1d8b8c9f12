"""Reading the sections of a search-space file into typed values, with located errors.

:mod:`autotune.space.search_space` owns the search logic; this module owns "is this section well formed":
types, ranges, allowed keys and allowed values, each failure a :class:`ConfigError` carrying the
file, line and dotted field path.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any, NoReturn

from autotune.sglang import _fields as _sglang_fields
from autotune.space._expr import (
    Condition,
    ExprError,
    parse_condition,
    parse_slo,
    values_equal,
)
from autotune._yaml_lines import key_line_of, line_of
from autotune.errors import ConfigError
from autotune.names import is_env_name  # noqa: F401  (the one rule for env var names)
from autotune.space.workload import Workload

PARAM_TYPES = ("int", "float", "categorical")
ARG_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")

_LATENCIES = ("ttft", "itl", "e2e")
_PERCENTILES = (50, 90, 99)
#: Metrics a trial reports (``autotune.trial.result.TrialResult.metric`` names) and which way is better;
#: objectives and SLOs may name any of them.
METRICS: dict[str, str] = {
    "output_tok_s": "maximize",
    "decode_tok_s_p50": "maximize",
    "decode_tok_s_p90": "maximize",
    "accept_length": "maximize",
    "speedup": "maximize",
    **{f"p{q}_{lat}_ms": "minimize" for lat in _LATENCIES for q in _PERCENTILES},
}

SAMPLERS = ("tpe", "random", "grid", "phase-model")


def type_name(value: Any) -> str:
    """How a YAML author would call the type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def is_int(value: Any) -> bool:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float that is not a boolean."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def is_scalar(value: Any) -> bool:
    """A value that can be a categorical choice (and an Optuna categorical)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int, str))


def show(value: Any) -> str:
    """A value as it would be written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def closest(word: str, options: Iterable[str]) -> str:
    """' (did you mean X?)' when a close option exists."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.75)
    return f" (did you mean {match[0]!r}?)" if match else ""


class Reader:
    """Raises located errors for one file."""

    def __init__(self, file: str | None) -> None:
        self.file = file

    def fail(self, message: str, *, field: str | None, line: int | None) -> NoReturn:
        """Raise a ConfigError for ``field`` at ``line``."""
        raise ConfigError(message, file=self.file, line=line, field=field)

    def mapping(self, value: Any, field: str, line: int | None, *,
                allowed: Iterable[str] | None = None,
                required: Iterable[str] = ()) -> Mapping[str, Any]:
        """Check that ``value`` is a mapping with string keys drawn from ``allowed``."""
        if not isinstance(value, dict):
            self.fail(f"must be a mapping, got {type_name(value)}", field=field or None,
                      line=line)
        allowed_list = None if allowed is None else list(allowed)
        for key in value:
            if not isinstance(key, str):
                self.fail(f"keys must be strings, got {type_name(key)} {show(key)}",
                          field=field or None, line=key_line_of(value, key))
            if allowed_list is not None and key not in allowed_list:
                self.fail(f"unknown key {key!r}{closest(key, allowed_list)}; allowed: "
                          + ", ".join(allowed_list), field=join(field, key),
                          line=key_line_of(value, key))
        for key in required:
            if key not in value:
                self.fail(f"missing required key {key!r}", field=join(field, key) if field
                          else key, line=line)
        return value

    def integer(self, value: Any, field: str, line: int | None, *, minimum: int | None = None,
                allow_none: bool = False) -> int | None:
        """An integer (not a boolean), at least ``minimum``."""
        if value is None and allow_none:
            return None
        if not is_int(value):
            extra = " or null" if allow_none else ""
            self.fail(f"must be an integer{extra}, got {type_name(value)} {show(value)}",
                      field=field, line=line)
        if minimum is not None and value < minimum:
            self.fail(f"must be >= {minimum}, got {value}", field=field, line=line)
        return value

    def number(self, value: Any, field: str, line: int | None, *, positive: bool = False,
               minimum: float | None = None, allow_none: bool = False) -> float | None:
        """A finite number; ``positive`` means > 0."""
        if value is None and allow_none:
            return None
        if not is_number(value):
            extra = " or null" if allow_none else ""
            self.fail(f"must be a finite number{extra}, got {type_name(value)} {show(value)}",
                      field=field, line=line)
        if positive and value <= 0:
            self.fail(f"must be > 0, got {value}", field=field, line=line)
        if minimum is not None and value < minimum:
            self.fail(f"must be >= {minimum}, got {value}", field=field, line=line)
        return float(value)

    def boolean(self, value: Any, field: str, line: int | None) -> bool:
        """true or false."""
        if not isinstance(value, bool):
            self.fail(f"must be true or false, got {type_name(value)} {show(value)}",
                      field=field, line=line)
        return value

    def string(self, value: Any, field: str, line: int | None, *, allow_none: bool = False,
               choices: Iterable[str] | None = None) -> str | None:
        """A non-empty string, optionally one of ``choices``."""
        if value is None and allow_none:
            return None
        if not isinstance(value, str) or not value.strip():
            self.fail(f"must be a non-empty string, got {type_name(value)} {show(value)}",
                      field=field, line=line)
        if choices is not None:
            options = list(choices)
            if value not in options:
                self.fail(f"{value!r} is not allowed{closest(value, options)}; allowed: "
                          + ", ".join(options), field=field, line=line)
        return value


def join(prefix: str, key: Any) -> str:
    """Dotted field path; list indexes as ``[i]``."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


def items(mapping: Mapping[str, Any], field: str) -> Iterator[tuple[str, Any, str, int | None]]:
    """(key, value, field path, line) for each entry."""
    for key, value in mapping.items():
        yield key, value, join(field, key), line_of(mapping, key)


# ---------------------------------------------------------------------------- names


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
    return _sglang_fields.FIELDS.get(name)


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

    if name in _sglang_fields.NO_CLI and not _other_installed_version_has(name):
        if active_flags().lookup(name) is None:  # the SGLang in use may still have the flag
            reader.fail(f"{name!r} cannot be set on SGLang's command line", field=field, line=line)
        return
    if name in _sglang_fields.FIELDS or name in installed_sglang_fields():
        return
    flags = active_flags()
    if flags.lookup(name) is not None:  # e.g. a deprecated alias the SGLang in use still has
        return
    hint = closest(name, _sglang_fields.FIELDS)
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
class Parameter:
    """One searched setting.

    Attributes:
        name: ServerArgs field (underscore form) or environment variable name.
        type: ``int``, ``float`` or ``categorical``.
        low, high, step, log: Range of an int or float (step None for a continuous float).
        choices: Values of a categorical (``None`` means "leave unset").
        when: Condition under which the parameter is set at all.
        line: Line of the parameter in its file.
        when_line: Line of its ``when:``.
    """

    name: str
    type: str
    low: int | float | None = None
    high: int | float | None = None
    step: int | float | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None
    when: Condition | None = None
    line: int | None = None
    when_line: int | None = None

    @property
    def is_env(self) -> bool:
        """An environment variable rather than a server argument."""
        return is_env_name(self.name)

    @property
    def is_speculative(self) -> bool:
        """A speculative-decoding setting (absent when speculation is off)."""
        return is_speculation_only(self.name)

    def values(self) -> Sequence[Any]:
        """Every value, for grids, as a lazy sequence (ranges can be huge).

        Raises:
            ValueError: For a float without step.
        """
        if self.type == "categorical":
            return tuple(self.choices or ())
        if self.type == "int":
            return range(int(self.low), int(self.high) + 1, int(self.step or 1))
        if self.step is None:
            raise ValueError(f"float parameter {self.name} has no step, so it has no grid")
        return _FloatGrid(float(self.low), float(self.step),
                          round((self.high - self.low) / self.step) + 1)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one of this parameter's values."""
        if self.type == "categorical":
            return any(values_equal(value, c) for c in self.choices or ())
        if self.type == "int":
            if not is_int(value) or not self.low <= value <= self.high:
                return False
            return (value - self.low) % (self.step or 1) == 0
        if not is_number(value) or not self.low - 1e-12 <= value <= self.high + 1e-12:
            return False
        if self.step is None:
            return True
        ratio = (value - self.low) / self.step
        return abs(ratio - round(ratio)) < 1e-6

    def describe(self) -> str:
        """The domain in words, for error messages."""
        if self.type == "categorical":
            return "one of " + ", ".join(show(c) for c in self.choices or ())
        step = f" step {self.step}" if self.step not in (None, 1) else ""
        return f"{self.type} in [{self.low}, {self.high}]{step}"


class _FloatGrid(Sequence):
    """``low, low + step, ...`` without building the list."""

    def __init__(self, low: float, step: float, count: int) -> None:
        self.low, self.step, self.count = low, step, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if not -self.count <= index < self.count:
            raise IndexError(index)
        # Rounded so that 0.7 + 1 * 0.1 reads back as 0.8, as the file author wrote it.
        return round(self.low + (index % self.count) * self.step, 12)


_PARAM_KEYS = {
    "int": ("type", "low", "high", "step", "log", "when"),
    "float": ("type", "low", "high", "step", "log", "when"),
    "categorical": ("type", "choices", "when"),
}


def read_parameter(reader: Reader, name: str, spec: Any, field: str,
                   line: int | None) -> Parameter:
    """Parse one entry of ``parameters:``."""
    check_name(reader, name, field, line)
    reader.mapping(spec, field, line)
    if "type" not in spec:
        reader.fail("missing required key 'type'; type must be one of "
                    + ", ".join(PARAM_TYPES), field=join(field, "type"), line=line)
    kind = spec["type"]
    if kind not in PARAM_TYPES:
        reader.fail(f"type must be one of {', '.join(PARAM_TYPES)}, got {show(kind)}",
                    field=join(field, "type"), line=line_of(spec, "type"))
    reader.mapping(spec, field, line, allowed=_PARAM_KEYS[kind])
    when = None
    if "when" in spec:
        try:
            when = parse_condition(spec["when"])
        except ExprError as exc:
            reader.fail(f"bad condition: {exc}; conditions look like "
                        "'speculative_eagle_topk > 1 and NCCL_ALGO == Ring'",
                        field=join(field, "when"), line=line_of(spec, "when"))
    if kind == "categorical":
        param = _read_categorical(reader, name, spec, field, line, when)
    else:
        param = _read_range(reader, name, kind, spec, field, line, when)
    return dataclasses.replace(param, when_line=line_of(spec, "when") if when else None)


def _read_categorical(reader: Reader, name: str, spec: Mapping[str, Any], field: str,
                      line: int | None, when: Condition | None) -> Parameter:
    if "choices" not in spec:
        reader.fail("missing required key 'choices' (a non-empty list)",
                    field=join(field, "choices"), line=line)
    choices = spec["choices"]
    cfield = join(field, "choices")
    if not isinstance(choices, list) or not choices:
        reader.fail(f"choices must be a non-empty list, got {type_name(choices)}",
                    field=cfield, line=line_of(spec, "choices"))
    seen: list[tuple[type, Any]] = []
    for index, choice in enumerate(choices):
        ifield, iline = join(cfield, index), line_of(choices, index)
        if not is_scalar(choice):
            reader.fail(f"choices must be null, booleans, numbers or strings, got "
                        f"{type_name(choice)}", field=ifield, line=iline)
        marker = (type(choice), choice)
        if marker in seen:
            reader.fail(f"duplicate choice {show(choice)}", field=ifield, line=iline)
        seen.append(marker)
        check_arg_value(reader, name, choice, ifield, iline)
    return Parameter(name, "categorical", choices=tuple(choices), when=when, line=line)


def _read_range(reader: Reader, name: str, kind: str, spec: Mapping[str, Any], field: str,
                line: int | None, when: Condition | None) -> Parameter:
    bounds = {}
    for key in ("low", "high"):
        if key not in spec:
            reader.fail(f"missing required key {key!r} for a {kind} parameter",
                        field=join(field, key), line=line)
        read = reader.integer if kind == "int" else reader.number
        bounds[key] = read(spec[key], join(field, key), line_of(spec, key))
    low, high = bounds["low"], bounds["high"]
    if low > high:
        reader.fail(f"low ({show(low)}) > high ({show(high)}): empty range",
                    field=join(field, "low"), line=line_of(spec, "low"))
    log = reader.boolean(spec.get("log", False), join(field, "log"), line_of(spec, "log"))
    step = spec.get("step", 1 if kind == "int" else None)
    sfield, sline = join(field, "step"), line_of(spec, "step")
    if step is not None:
        step = (reader.integer(step, sfield, sline, minimum=1) if kind == "int"
                else reader.number(step, sfield, sline, positive=True))
    if log:
        if low <= 0:
            reader.fail(f"log scale needs low > 0, got {show(low)}", field=join(field, "low"),
                        line=line_of(spec, "low"))
        if step not in (None, 1) or (kind == "float" and step is not None):
            reader.fail("log and step cannot be combined (Optuna samples log ranges without a "
                        "step)", field=sfield, line=sline)
    if step is not None:
        if kind == "int":
            misaligned = (high - low) % step != 0
        else:
            ratio = (high - low) / step
            misaligned = not math.isfinite(ratio) or abs(ratio - round(ratio)) > 1e-9
        if misaligned:
            reader.fail(f"high ({show(high)}) is not low ({show(low)}) plus a multiple of step "
                        f"({show(step)})", field=join(field, "high"), line=line_of(spec, "high"))
    if kind == "float" and low == high:
        step = None
    known = arg_kind(name)
    if known is not None:
        base = known[0].rstrip("?")
        if base in ("bool", "str", "list") or (base == "int" and kind == "float"):
            wanted = {"int": "integers", "bool": "true or false", "str": "strings",
                      "list": "lists"}[base]
            reader.fail(f"{name} takes {wanted}; use type: "
                        f"{'int' if base == 'int' else 'categorical'}",
                        field=join(field, "type"), line=line_of(spec, "type"))
        if known[1] is not None:
            reader.fail(f"{name} takes one of a fixed set of values; use type: categorical",
                        field=join(field, "type"), line=line_of(spec, "type"))
    return Parameter(name, kind, low=low, high=high, step=step, log=log, when=when, line=line)


# ---------------------------------------------------------------------------- sections


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


def env_text(value: Any) -> str:
    """An environment value as the process will see it."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class SLO:
    """A service-level objective: ``metric op value`` must hold for a trial to count."""

    metric: str
    op: str
    value: float
    text: str

    def is_met(self, measured: float | None) -> bool | None:
        """True or False, or None when the metric is unknown."""
        if measured is None:
            return None
        return {"<": measured < self.value, "<=": measured <= self.value,
                ">": measured > self.value, ">=": measured >= self.value}[self.op]

    def violation(self, measured: float | None) -> float | None:
        """Optuna-style constraint value (<= 0 is feasible); None when unknown."""
        if measured is None:
            return None
        gap = measured - self.value if self.op in ("<", "<=") else self.value - measured
        if self.op in ("<", ">") and gap == 0:
            return 1e-9
        return gap


@dataclass(frozen=True)
class Constraints:
    """Break-even (always on) plus optional SLOs.

    Attributes:
        min_speedup: A speculative config counts only if speedup over its baseline is strictly
            greater than this (>= 1.0; 1.0 is plain break-even).
        slos: Extra service-level objectives.
    """

    min_speedup: float = 1.0
    slos: tuple[SLO, ...] = ()


def read_constraints(reader: Reader, value: Any, line: int | None) -> Constraints:
    """Parse ``constraints: {min_speedup, slos, break_even}``."""
    if value is None:
        return Constraints()
    reader.mapping(value, "constraints", line, allowed=("min_speedup", "slos", "break_even"))
    if "break_even" in value and value["break_even"] is not True:
        reader.fail("break-even cannot be turned off: a speculative config must beat the "
                    "no-speculation baseline; raise min_speedup for a margin instead",
                    field="constraints.break_even", line=line_of(value, "break_even"))
    min_speedup = reader.number(value.get("min_speedup", 1.0), "constraints.min_speedup",
                                line_of(value, "min_speedup"))
    if min_speedup < 1.0:
        reader.fail(f"must be >= 1.0 (break-even is always on), got {min_speedup}",
                    field="constraints.min_speedup", line=line_of(value, "min_speedup"))
    slos: list[SLO] = []
    raw = value.get("slos", [])
    if not isinstance(raw, list):
        reader.fail(f"must be a list of strings like 'p99_ttft_ms <= 500', got "
                    f"{type_name(raw)}", field="constraints.slos", line=line_of(value, "slos"))
    for index, text in enumerate(raw):
        ifield, iline = join("constraints.slos", index), line_of(raw, index)
        try:
            metric, op, bound = parse_slo(text)
        except ExprError as exc:
            reader.fail(str(exc), field=ifield, line=iline)
        if metric not in METRICS:
            reader.fail(f"unknown metric {metric!r}{closest(metric, METRICS)}; allowed: "
                        + ", ".join(METRICS), field=ifield, line=iline)
        slos.append(SLO(metric, op, bound, " ".join(text.split())))
    return Constraints(min_speedup, tuple(slos))


@dataclass(frozen=True)
class Objective:
    """What the search optimises."""

    metric: str = "output_tok_s"
    direction: str = "maximize"


def read_objective(reader: Reader, value: Any, line: int | None) -> Objective:
    """Parse ``objective: {metric, direction}``; direction defaults to the metric's natural one."""
    if value is None:
        return Objective()
    reader.mapping(value, "objective", line, allowed=("metric", "direction"))
    metric = reader.string(value.get("metric", "output_tok_s"), "objective.metric",
                           line_of(value, "metric"), choices=METRICS)
    natural = METRICS[metric]
    direction = reader.string(value.get("direction", natural), "objective.direction",
                              line_of(value, "direction"), choices=("maximize", "minimize"))
    if direction != natural:
        reader.fail(f"{metric} should be {natural}d, not {direction}d",
                    field="objective.direction", line=line_of(value, "direction"))
    return Objective(metric, direction)


@dataclass(frozen=True)
class Budget:
    """When the search stops."""

    trials: int = 40
    wall_time_s: float | None = None


@dataclass(frozen=True)
class Resources:
    """Per-trial resources; GPUs per trial always equal the trial's tp_size."""

    cpus_per_trial: float = 1.0


@dataclass(frozen=True)
class SearchSettings:
    """How trials are proposed and confirmed."""

    sampler: str = "tpe"
    seed: int = 0
    finalists: int = 3
    finalist_repeats: int = 3
    max_concurrent: int | None = None


@dataclass(frozen=True)
class Measure:
    """How one trial measures."""

    repeats: int = 3
    startup_timeout_s: float = 900.0
    trial_timeout_s: float | None = None
    phase_profile: bool = True
    fast_start: bool = False
    warmup_until_stable_pct: float | None = None
    warmup_max_rounds: int = 6


def read_budget(reader: Reader, value: Any, line: int | None) -> Budget:
    """Parse ``budget: {trials, wall_time_s}``."""
    if value is None:
        return Budget()
    reader.mapping(value, "budget", line, allowed=("trials", "wall_time_s"))
    return Budget(
        trials=reader.integer(value.get("trials", 40), "budget.trials",
                              line_of(value, "trials"), minimum=1),
        wall_time_s=reader.number(value.get("wall_time_s"), "budget.wall_time_s",
                                  line_of(value, "wall_time_s"), positive=True,
                                  allow_none=True))


def read_resources(reader: Reader, value: Any, line: int | None) -> Resources:
    """Parse ``resources: {cpus_per_trial}``."""
    if value is None:
        return Resources()
    if isinstance(value, dict) and "gpus_per_trial" in value:
        reader.fail("GPUs per trial always equal the trial's tp_size; remove gpus_per_trial",
                    field="resources.gpus_per_trial", line=key_line_of(value, "gpus_per_trial"))
    reader.mapping(value, "resources", line, allowed=("cpus_per_trial",))
    return Resources(reader.number(value.get("cpus_per_trial", 1), "resources.cpus_per_trial",
                                   line_of(value, "cpus_per_trial"), positive=True))


def read_search(reader: Reader, value: Any, line: int | None) -> SearchSettings:
    """Parse ``search: {sampler, seed, finalists, finalist_repeats, max_concurrent}``."""
    if value is None:
        return SearchSettings()
    reader.mapping(value, "search", line, allowed=("sampler", "seed", "finalists",
                                                   "finalist_repeats", "max_concurrent"))
    return SearchSettings(
        sampler=reader.string(value.get("sampler", "tpe"), "search.sampler",
                              line_of(value, "sampler"), choices=SAMPLERS),
        seed=reader.integer(value.get("seed", 0), "search.seed", line_of(value, "seed"),
                            minimum=0),
        finalists=reader.integer(value.get("finalists", 3), "search.finalists",
                                 line_of(value, "finalists"), minimum=0),
        finalist_repeats=reader.integer(value.get("finalist_repeats", 3),
                                        "search.finalist_repeats",
                                        line_of(value, "finalist_repeats"), minimum=1),
        max_concurrent=reader.integer(value.get("max_concurrent"), "search.max_concurrent",
                                      line_of(value, "max_concurrent"), minimum=1,
                                      allow_none=True))


def read_measure(reader: Reader, value: Any, line: int | None) -> Measure:
    """Parse ``measure: {repeats, startup_timeout_s, trial_timeout_s, phase_profile, fast_start}``."""
    if value is None:
        return Measure()
    reader.mapping(value, "measure", line, allowed=("repeats", "startup_timeout_s",
                                                    "trial_timeout_s", "phase_profile",
                                                    "fast_start", "warmup_until_stable_pct",
                                                    "warmup_max_rounds"))
    return Measure(
        repeats=reader.integer(value.get("repeats", 3), "measure.repeats",
                               line_of(value, "repeats"), minimum=1),
        startup_timeout_s=reader.number(value.get("startup_timeout_s", 900),
                                        "measure.startup_timeout_s",
                                        line_of(value, "startup_timeout_s"), positive=True),
        trial_timeout_s=reader.number(value.get("trial_timeout_s"), "measure.trial_timeout_s",
                                      line_of(value, "trial_timeout_s"), positive=True,
                                      allow_none=True),
        phase_profile=reader.boolean(value.get("phase_profile", True), "measure.phase_profile",
                                     line_of(value, "phase_profile")),
        fast_start=reader.boolean(value.get("fast_start", False), "measure.fast_start",
                                  line_of(value, "fast_start")),
        warmup_until_stable_pct=reader.number(value.get("warmup_until_stable_pct"),
                                              "measure.warmup_until_stable_pct",
                                              line_of(value, "warmup_until_stable_pct"),
                                              positive=True, allow_none=True),
        warmup_max_rounds=reader.integer(value.get("warmup_max_rounds", 6),
                                         "measure.warmup_max_rounds",
                                         line_of(value, "warmup_max_rounds"), minimum=2))


@dataclass(frozen=True)
class NcclPrescreen:
    """``nccl_prescreen:``: narrow the NCCL_* parameters with the NCCL probe before a search.

    Attributes:
        keep: How many candidate combinations of the NCCL_* parameters the search keeps.
        tokens: Message sizes of the probe, in tokens (``tokens x hidden`` bf16).
        hidden: Hidden size; None takes the sim profile's or the model's config.json.
        iters, warmup: Timed and untimed all-reduces per size.
        rounds: Passes over all candidates; with 2 or more, a best candidate that is not ahead
            of the default in every round does not push the default out of the kept set.
        backend: Probe backend: ``auto`` (sim for the emulator, nccl otherwise), ``nccl``,
            ``gloo`` or ``sim``.
        timeout_s: Per candidate.
        kept: The kept candidate names; when given, the space is narrowed to them at load and
            the search does not probe (the search writes it into its narrowed copy).
    """

    keep: int
    tokens: tuple[int, ...] = (1, 4, 8, 64)
    hidden: int | None = None
    iters: int = 200
    warmup: int = 20
    backend: str = "auto"
    timeout_s: float = 60.0
    kept: tuple[str, ...] | None = None
    rounds: int = 1


NCCL_PRESCREEN_BACKENDS = ("auto", "nccl", "gloo", "sim")


def read_nccl_prescreen(reader: Reader, value: Any, line: int | None) -> NcclPrescreen | None:
    """Parse ``nccl_prescreen: {keep, tokens, hidden, iters, warmup, rounds, backend, timeout_s, kept}``."""
    if value is None:
        return None
    fld = "nccl_prescreen"
    reader.mapping(value, fld, line, allowed=("keep", "tokens", "hidden", "iters", "warmup",
                                              "rounds", "backend", "timeout_s", "kept"),
                   required=("keep",))
    tokens = value.get("tokens", [1, 4, 8, 64])
    if not isinstance(tokens, list) or not tokens:
        reader.fail(f"must be a non-empty list of token counts, got {type_name(tokens)}",
                    field=f"{fld}.tokens", line=line_of(value, "tokens"))
    for index, item in enumerate(tokens):
        reader.integer(item, join(f"{fld}.tokens", index), line_of(tokens, index), minimum=1)
    kept = value.get("kept")
    if kept is not None:
        if not isinstance(kept, list) or not kept:
            reader.fail(f"must be a non-empty list of candidate names, got {type_name(kept)}",
                        field=f"{fld}.kept", line=line_of(value, "kept"))
        for index, item in enumerate(kept):
            reader.string(item, join(f"{fld}.kept", index), line_of(kept, index))
        kept = tuple(kept)
    return NcclPrescreen(
        keep=reader.integer(value["keep"], f"{fld}.keep", line_of(value, "keep"), minimum=1),
        tokens=tuple(tokens),
        hidden=reader.integer(value.get("hidden"), f"{fld}.hidden", line_of(value, "hidden"),
                              minimum=1, allow_none=True),
        iters=reader.integer(value.get("iters", 200), f"{fld}.iters", line_of(value, "iters"),
                             minimum=1),
        warmup=reader.integer(value.get("warmup", 20), f"{fld}.warmup", line_of(value, "warmup"),
                              minimum=0),
        backend=reader.string(value.get("backend", "auto"), f"{fld}.backend",
                              line_of(value, "backend"), choices=NCCL_PRESCREEN_BACKENDS),
        timeout_s=reader.number(value.get("timeout_s", 60), f"{fld}.timeout_s",
                                line_of(value, "timeout_s"), positive=True),
        kept=kept,
        rounds=reader.integer(value.get("rounds", 1), f"{fld}.rounds", line_of(value, "rounds"),
                              minimum=1))


def read_workload(reader: Reader, value: Any, line: int | None, *,
                  base_dir: str) -> dict[str, Any]:
    """Check ``workload:`` with :class:`autotune.space.workload.Workload` and return it as given.

    ``autotune.space.workload`` owns the keys and defaults; the returned dict holds only the keys in
    the file, with a relative ``path`` made absolute (trials run in other directories).

    Args:
        reader: Error helper.
        value: The raw section (None for all defaults).
        line: Its line.
        base_dir: Folder of the space file, for a relative ``path``.
    """
    if value is None:
        value = {}
    reader.mapping(value, "workload", line)
    out = {key: (list(item) if isinstance(item, list) else item) for key, item in value.items()}
    path = out.get("path")
    if isinstance(path, str) and path:
        expanded = Path(path).expanduser()
        out["path"] = str(expanded if expanded.is_absolute() else Path(base_dir) / expanded)
    lines = {key: n for key in value if (n := line_of(value, key)) is not None}
    Workload.from_spec(dict(out), file=reader.file, base_dir=base_dir, lines=lines)
    return out
