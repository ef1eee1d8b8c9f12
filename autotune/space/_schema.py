"""Reading a search-space file's values with located errors: the shared primitives.

:mod:`autotune.space.search_space` owns the search logic; the ``_schema*`` modules own "is this
section well formed": types, ranges, allowed keys and allowed values, each failure a
:class:`ConfigError` carrying the file, line and dotted field path. This one holds what every
section's reader uses (the :class:`Reader`, the type tests, how a value is shown and named);
:mod:`autotune.space._schema_names` checks server-arg and env names and ``forbidden:``,
:mod:`autotune.space._schema_params` reads ``parameters:``, and
:mod:`autotune.space._schema_sections` reads the other sections.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, NoReturn, Protocol, TypeGuard, overload

from autotune._yaml_lines import key_line_of, line_of
from autotune.errors import ConfigError, cut

#: The largest integer a space may hold anywhere: 2**53 - 1, the largest that JSON readers, MLflow's
#: params and Optuna's float distributions keep exact. Fields with a tighter bound say theirs.
INT_CEILING = 2**53 - 1


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


def is_int(value: Any) -> TypeGuard[int]:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
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
    """A value as it would be written in YAML, cut to :data:`~autotune.errors.SHOWN_CHARS`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return cut(repr(value) if isinstance(value, str) else str(value))


def closest(word: str, options: Iterable[str]) -> str:
    """' (did you mean X?)' when a close option exists."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.75)
    return f" (did you mean {match[0]!r}?)" if match else ""


class Fail(Protocol):
    """``fail(message, *, field, line)``: raises a :class:`ConfigError` located at ``field``, ``line``."""

    def __call__(self, message: str, *, field: str | None, line: int | None) -> NoReturn: ...


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

    # The overloads tell the type checker that only allow_none=True can return None.
    @overload
    def integer(self, value: Any, field: str, line: int | None, *, minimum: int | None = None,
                maximum: int = INT_CEILING, hint: str = "", allow_none: Literal[False] = False) -> int: ...
    @overload
    def integer(self, value: Any, field: str, line: int | None, *, minimum: int | None = None,
                maximum: int = INT_CEILING, hint: str = "", allow_none: bool = False) -> int | None: ...
    def integer(self, value: Any, field: str, line: int | None, *, minimum: int | None = None,
                maximum: int = INT_CEILING, hint: str = "", allow_none: bool = False) -> int | None:
        """An integer (not a boolean), at least ``minimum`` and at most ``maximum`` (``hint``, if
        given, follows the message of a value above it)."""
        if value is None and allow_none:
            return None
        if not is_int(value):
            extra = " or null" if allow_none else ""
            self.fail(f"must be an integer{extra}, got {type_name(value)} {show(value)}",
                      field=field, line=line)
        if value < (-INT_CEILING if minimum is None else minimum):
            self.fail(f"must be >= {-INT_CEILING if minimum is None else minimum:,}, got {show(value)}",
                      field=field, line=line)
        if value > maximum:
            self.fail(f"must be <= {maximum:,}, got {show(value)}" + (f"; {hint}" if hint else ""),
                      field=field, line=line)
        return value

    @overload
    def number(self, value: Any, field: str, line: int | None, *, positive: bool = False,
               minimum: float | None = None, allow_none: Literal[False] = False) -> float: ...
    @overload
    def number(self, value: Any, field: str, line: int | None, *, positive: bool = False,
               minimum: float | None = None, allow_none: bool = False) -> float | None: ...
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

    @overload
    def string(self, value: Any, field: str, line: int | None, *, allow_none: Literal[False] = False,
               choices: Iterable[str] | None = None) -> str: ...
    @overload
    def string(self, value: Any, field: str, line: int | None, *, allow_none: bool = False,
               choices: Iterable[str] | None = None) -> str | None: ...
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


def env_text(value: Any) -> str:
    """An environment value as the process will see it."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
