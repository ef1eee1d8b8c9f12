"""The ``parameters:`` section of a search-space file: :class:`Parameter` and its reader.

A parameter is one searched setting (an int or float range, or a categorical) with an optional
``when:`` condition; its reader checks the name, the domain and that the values fit the server
argument. It is its own module because the domain logic (grids, membership, description) is what
the define-by-run in :mod:`autotune.space.search_space` builds on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from autotune._yaml_lines import line_of
from autotune.names import is_env_name
from autotune.space._expr import Condition, ExprError, parse_condition, values_equal
from autotune.space._schema import (
    Reader,
    is_int,
    is_number,
    is_scalar,
    join,
    show,
    type_name,
)
from autotune.space._schema_names import arg_kind, check_arg_value, check_name, is_speculation_only

PARAM_TYPES = ("int", "float", "categorical")


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

    def bounds(self) -> tuple[int | float, int | float]:
        """``(low, high)`` of an int or float parameter.

        Raises:
            ValueError: For a categorical, which has no range.
        """
        if self.low is None or self.high is None:
            raise ValueError(f"{self.type} parameter {self.name} has no low/high range")
        return self.low, self.high

    def values(self) -> Sequence[Any]:
        """Every value, for grids, as a lazy sequence (ranges can be huge).

        Raises:
            ValueError: For a float without step.
        """
        if self.type == "categorical":
            return tuple(self.choices or ())
        low, high = self.bounds()
        if self.type == "int":
            return range(int(low), int(high) + 1, int(self.step or 1))
        if self.step is None:
            raise ValueError(f"float parameter {self.name} has no step, so it has no grid")
        return _FloatGrid(float(low), float(self.step), round((high - low) / self.step) + 1)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one of this parameter's values."""
        if self.type == "categorical":
            return any(values_equal(value, c) for c in self.choices or ())
        low, high = self.bounds()
        if self.type == "int":
            if not is_int(value) or not low <= value <= high:
                return False
            return (value - low) % (self.step or 1) == 0
        if not is_number(value) or not low - 1e-12 <= value <= high + 1e-12:
            return False
        if self.step is None:
            return True
        ratio = (value - low) / self.step
        return abs(ratio - round(ratio)) < 1e-6

    def describe(self) -> str:
        """The domain in words, for error messages."""
        if self.type == "categorical":
            return "one of " + ", ".join(show(c) for c in self.choices or ())
        step = f" step {self.step}" if self.step not in (None, 1) else ""
        return f"{self.type} in [{self.low}, {self.high}]{step}"


class _FloatGrid(Sequence[float]):
    """``low, low + step, ...`` without building the list."""

    def __init__(self, low: float, step: float, count: int) -> None:
        # The length is ``size``: ``count`` is Sequence's method (occurrences of a value).
        self.low, self.step, self.size = low, step, count

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if not -self.size <= index < self.size:
            raise IndexError(index)
        # Rounded so that 0.7 + 1 * 0.1 reads back as 0.8, as the file author wrote it.
        return round(self.low + (index % self.size) * self.step, 12)


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
