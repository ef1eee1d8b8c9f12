"""Prometheus text exposition (format 0.0.4, and the OpenMetrics subset SGLang emits) parsing.

A small parser of our own rather than ``prometheus_client.parser``: it keeps the ``# TYPE``
declarations (a declared counter with no series is a known zero, an undeclared one is unknown),
reports the line of a malformed sample, and needs nothing from the collector side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*\"")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_SUFFIXES = ("_total", "_created", "_count", "_sum", "_bucket", "_info")


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name, labels, value."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass
class Exposition:
    """A parsed ``/metrics`` page.

    Attributes:
        samples: Sample name (with ``_total`` etc.) to its samples, in page order.
        types: Family name to its declared type (``counter``, ``gauge``, ...).
    """

    samples: dict[str, list[Sample]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def declared(self, name: str) -> bool:
        """Whether the page declares the family of sample name ``name``."""
        if name in self.types:
            return True
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in self.types:
                return True
        return False

    def series(self, name: str) -> list[Sample]:
        """The samples named ``name`` (empty when none)."""
        return self.samples.get(name, [])


def _parse_value(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(text)


def _parse_labels(line: str, i: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[i] == '{'``; return labels and the index after."""
    labels: dict[str, str] = {}
    i += 1
    while True:
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] == "}":
            return labels, i + 1
        m = _LABEL_NAME.match(line, i)
        if not m:
            raise ValueError(f"line {lineno}: bad label at column {i + 1}: {line!r}")
        name = m.group(1)
        i = m.end()
        buf = []
        while True:
            if i >= len(line):
                raise ValueError(f"line {lineno}: unterminated label value: {line!r}")
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                buf.append(_ESCAPES.get(line[i + 1], "\\" + line[i + 1]))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                buf.append(c)
                i += 1
        labels[name] = "".join(buf)
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] == ",":
            i += 1
        elif i < len(line) and line[i] == "}":
            return labels, i + 1
        else:
            raise ValueError(f"line {lineno}: expected ',' or '}}' in labels: {line!r}")


def parse_exposition(text: str) -> Exposition:
    """Parse a Prometheus text page.

    Raises:
        ValueError: A malformed line, with its line number.
    """
    out = Exposition()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                out.types[parts[2]] = parts[3].strip()
            continue
        m = _NAME.match(line)
        if not m:
            raise ValueError(f"line {lineno}: no metric name: {line!r}")
        name = m.group(0)
        i = m.end()
        labels: dict[str, str] = {}
        if i < len(line) and line[i] == "{":
            labels, i = _parse_labels(line, i, lineno)
        rest = line[i:].split()
        if not rest:
            raise ValueError(f"line {lineno}: sample without a value: {line!r}")
        try:
            value = _parse_value(rest[0])
        except ValueError:
            raise ValueError(f"line {lineno}: bad sample value {rest[0]!r}") from None
        out.samples.setdefault(name, []).append(Sample(name, labels, value))
    return out


def sum_samples(samples: Iterable[Sample], **match: str) -> float | None:
    """Sum of the samples whose labels include ``match``; None when no sample matches."""
    vals = [s.value for s in samples if all(s.labels.get(k) == v for k, v in match.items())]
    return math.fsum(vals) if vals else None
