"""The tiny expression language of search-space files.

Two forms, both parsed without ``eval``:

- ``when:`` conditions: comparisons of a parameter with a literal, joined by ``and``::

      speculative_eagle_topk > 1 and NCCL_ALGO != null

- SLO constraints: one metric, an inequality and a number::

      p99_ttft_ms <= 500

Literals are integers, floats, ``true``/``false``, ``null``, quoted strings, or bare words such
as ``Ring`` (read as strings).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Comparison", "Condition", "ExprError", "parse_condition", "parse_slo",
           "values_equal"]

COMPARISON_OPS = ("==", "!=", "<=", ">=", "<", ">")
ORDER_OPS = ("<=", ">=", "<", ">")

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<op>==|!=|<=|>=|<|>)
    | (?P<str>"[^"\\]*"|'[^'\\]*')
    | (?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.]))
    | (?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)
    )""", re.VERBOSE)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ExprError(ValueError):
    """An expression does not parse; the message says what was expected."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def values_equal(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from 0 and 1, as a YAML author means them."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Comparison:
    """``name op literal``."""

    name: str
    op: str
    value: Any

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Evaluate against the chosen values; an absent parameter makes any comparison false."""
        if self.name not in values:
            return False
        actual = values[self.name]
        if self.op == "==":
            return values_equal(actual, self.value)
        if self.op == "!=":
            return not values_equal(actual, self.value)
        if not (_is_number(actual) and _is_number(self.value)):
            return False
        if self.op == "<":
            return actual < self.value
        if self.op == "<=":
            return actual <= self.value
        if self.op == ">":
            return actual > self.value
        return actual >= self.value

    def __str__(self) -> str:
        return f"{self.name} {self.op} {_render(self.value)}"


@dataclass(frozen=True)
class Condition:
    """Comparisons that must all hold."""

    terms: tuple[Comparison, ...]
    text: str

    @property
    def names(self) -> frozenset[str]:
        """Parameters the condition reads."""
        return frozenset(term.name for term in self.terms)

    def holds(self, values: Mapping[str, Any]) -> bool:
        """True when every comparison holds."""
        return all(term.holds(values) for term in self.terms)

    def __str__(self) -> str:
        return self.text


def _render(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _literal(kind: str, text: str) -> Any:
    if kind == "str":
        return text[1:-1]
    if kind == "num":
        number = float(text) if any(c in text for c in ".eE") else int(text)
        if isinstance(number, float) and not math.isfinite(number):
            raise ExprError(f"number {text} is not finite")
        return number
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    return text


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ExprError(f"cannot read {text[pos:].strip()!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def parse_condition(text: str) -> Condition:
    """Parse a ``when:`` condition.

    Args:
        text: e.g. ``"speculative_eagle_topk > 1 and NCCL_ALGO == Ring"``.

    Returns:
        The parsed condition.

    Raises:
        ExprError: With what was expected where.
    """
    if not isinstance(text, str) or not text.strip():
        raise ExprError("a condition must be a non-empty string like 'speculative_eagle_topk > 1'")
    tokens = _tokens(text)
    terms: list[Comparison] = []
    i = 0
    while True:
        if i + 3 > len(tokens):
            raise ExprError("expected '<parameter> <op> <value>' with op one of "
                            + ", ".join(COMPARISON_OPS))
        (k1, name), (k2, op), (k3, raw) = tokens[i:i + 3]
        if k1 != "word" or not _NAME.match(name) or name.lower() == "and":
            raise ExprError(f"expected a parameter name, got {name!r}")
        if k2 != "op":
            raise ExprError(f"expected one of {', '.join(COMPARISON_OPS)} after {name!r}, "
                            f"got {op!r}")
        if k3 not in ("str", "num", "word") or raw.lower() == "and":
            raise ExprError(f"expected a value after '{name} {op}', got {raw!r}")
        value = _literal(k3, raw)
        if op in ORDER_OPS and not _is_number(value):
            raise ExprError(f"'{op}' needs a number, got {raw!r}")
        terms.append(Comparison(name, op, value))
        i += 3
        if i == len(tokens):
            break
        kind, word = tokens[i]
        if kind != "word" or word.lower() != "and":
            raise ExprError(f"expected 'and' or the end, got {word!r}")
        i += 1
    return Condition(tuple(terms), " ".join(text.split()))


_SLO = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>)\s*"
                  r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)\s*\Z")


def parse_slo(text: str) -> tuple[str, str, float]:
    """Parse ``"p99_ttft_ms <= 500"`` into ``("p99_ttft_ms", "<=", 500.0)``.

    Raises:
        ExprError: When the text is not ``<metric> <op> <number>``.
    """
    if not isinstance(text, str):
        raise ExprError("an SLO must be a string like 'p99_ttft_ms <= 500'")
    match = _SLO.match(text)
    if match is None:
        raise ExprError(f"cannot read SLO {text!r}; expected '<metric> <op> <number>' with op "
                        "one of <=, <, >=, >, e.g. 'p99_ttft_ms <= 500'")
    value = float(match.group(3))
    if not math.isfinite(value):
        raise ExprError(f"SLO bound {match.group(3)} is not finite")
    return match.group(1), match.group(2), value
