"""NCCL probe candidates: what they are, how they are named, read from a file.

A candidate is a set of environment settings for NCCL (``None`` means "unset"). Its name lists
the settings that are set, ``K=V`` joined by commas in the order given (``NCCL_ALGO=Ring,
NCCL_PROTO=LL``); with none set it is ``default``. A name can be parsed back into its settings.

Only the standard library (plus PyYAML when present) is imported: this runs on GPU boxes. A
space's candidates are read in ``autotune.space.nccl_candidates``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.names import is_env_name
from autotune.nccl_values import value_problem

try:
    from autotune._yaml_lines import line_of, load_yaml_text
except ImportError:  # no PyYAML on this machine: JSON is the fallback format
    line_of = load_yaml_text = None  # type: ignore[assignment]

DEFAULT_NAME = "default"
NVLS_VAR = "NCCL_NVLS_ENABLE"
#: Set in every worker unless a candidate sets NCCL_NVLS_ENABLE itself (and may).
MULTICAST_OFF = {NVLS_VAR: "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass(frozen=True)
class NcclCandidate:
    """One NCCL setting to probe.

    Attributes:
        name: Readable label (``default``, ``NCCL_ALGO=Ring``, or a name from the file).
        env: Variables to set; a ``None`` value means the variable is removed.
        base_env: Settings common to every candidate (a space's ``fixed_env``), not in the name.
    """

    name: str
    env: Mapping[str, str | None]
    base_env: Mapping[str, str | None] = field(default_factory=dict)

    def full_env(self) -> dict[str, str | None]:
        """``base_env`` overlaid with ``env``."""
        return {**self.base_env, **self.env}


def env_text(value: Any) -> str | None:
    """An environment value as the process sees it (``4`` and ``4.0`` are ``"4"``)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def name_of(env: Mapping[str, Any]) -> str:
    """``K=V,K=V`` of the set variables, or ``default``."""
    parts = [f"{k}={env_text(v)}" for k, v in env.items() if v is not None]
    return ",".join(parts) if parts else DEFAULT_NAME


def parse_name(name: str) -> dict[str, str]:
    """Inverse of :func:`name_of`.

    Raises:
        ValueError: For text that is not ``default`` or ``NAME=value`` pairs.
    """
    text = name.strip()
    if text == DEFAULT_NAME:
        return {}
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not is_env_name(key) or not value:
            raise ValueError(f"{part.strip()!r} is not NAME=value (an UPPER_CASE variable)")
        if key in out:
            raise ValueError(f"{key} appears twice")
        out[key] = value
    return out


# ------------------------------------------------------------------------------ file


def _load(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the candidates file: {exc}", file=str(path)) from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON: {exc.msg}", file=str(path),
                              line=exc.lineno) from None
    if load_yaml_text is None:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"PyYAML is not installed and the file is not JSON: {exc.msg}",
                              file=str(path), line=exc.lineno) from None
    return load_yaml_text(text, file=str(path))


def _line(container: Any, key: Any) -> int | None:
    if line_of is None:
        return None
    return line_of(container, key)


def load_candidates(path: str | Path) -> list[NcclCandidate]:
    """Read a candidates file (YAML or JSON).

    The file is a list, or a mapping with a ``candidates:`` list. Each entry is a name string
    (``default``, ``NCCL_ALGO=Ring,NCCL_PROTO=LL``), a mapping of variables
    (``{NCCL_ALGO: Ring}``), or ``{name: ..., env: {...}}``. A ``null`` value unsets a variable.

    Raises:
        ConfigError: Naming the file, line and entry, what is wrong and what would be right.
    """
    file = Path(path)
    data = _load(file)
    where = str(file)
    entries = data.get("candidates") if isinstance(data, dict) else data
    if isinstance(data, dict) and set(data) - {"candidates"}:
        extra = sorted(set(data) - {"candidates"})
        raise ConfigError(f"unknown key(s) {', '.join(map(str, extra))}; the file holds a "
                          "'candidates:' list", file=where, field=str(extra[0]))
    if not isinstance(entries, list) or not entries:
        raise ConfigError("expected a non-empty list of candidates (or a mapping with a "
                          "'candidates:' list)", file=where, field="candidates")
    out: list[NcclCandidate] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        fld, line = f"candidates[{index}]", _line(entries, index)
        cand = _entry(entry, where, fld, line)
        if cand.name in seen:
            raise ConfigError(f"duplicate candidate {cand.name!r} (also entry {seen[cand.name]})",
                              file=where, line=line, field=fld)
        seen[cand.name] = index
        out.append(cand)
    return out


def _entry(entry: Any, file: str, fld: str, line: int | None) -> NcclCandidate:
    env: Mapping[str, str | None]
    if isinstance(entry, str):
        try:
            env = parse_name(entry)
        except ValueError as exc:
            raise ConfigError(f"bad candidate {entry!r}: {exc}; write 'default' or "
                              "'NCCL_ALGO=Ring,NCCL_PROTO=LL'", file=file, line=line,
                              field=fld) from None
        for key, value in env.items():
            problem = value_problem(key, value)
            if problem is not None:
                raise ConfigError(f"bad candidate {entry!r}: {problem}", file=file, line=line, field=fld)
        return NcclCandidate(name_of(env), env)
    if not isinstance(entry, dict):
        raise ConfigError(f"a candidate is a name string or a mapping, got "
                          f"{type(entry).__name__}", file=file, line=line, field=fld)
    if "env" in entry or "name" in entry:
        extra = set(entry) - {"name", "env"}
        if extra:
            raise ConfigError(f"unknown key(s) {', '.join(sorted(map(str, extra)))}; an entry "
                              "with 'env' takes only 'name' and 'env'", file=file, line=line,
                              field=fld)
        raw_env = entry.get("env") or {}
        name = entry.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError("name must be a non-empty string", file=file, line=line,
                              field=f"{fld}.name")
        env = _env(raw_env, file, f"{fld}.env", line)
        return NcclCandidate(name or name_of(env), env)
    env = _env(entry, file, fld, line)
    return NcclCandidate(name_of(env), env)


def _env(raw: Any, file: str, fld: str, line: int | None) -> dict[str, str | None]:
    if not isinstance(raw, dict):
        raise ConfigError(f"env must be a mapping of NAME: value, got {type(raw).__name__}",
                          file=file, line=line, field=fld)
    out: dict[str, str | None] = {}
    for key, value in raw.items():
        kline = _line(raw, key) or line
        if not isinstance(key, str) or not is_env_name(key):
            raise ConfigError(f"{key!r} is not an UPPER_CASE environment variable name",
                              file=file, line=kline, field=f"{fld}.{key}")
        if isinstance(value, bool) or not (value is None or isinstance(value, (str, int, float))):
            raise ConfigError(f"{key} must be a string, a number or null (unset), got "
                              f"{type(value).__name__}; write '1' or '0' for flags", file=file,
                              line=kline, field=f"{fld}.{key}")
        problem = value_problem(key, value)
        if problem is not None:
            raise ConfigError(problem, file=file, line=kline, field=f"{fld}.{key}")
        out[key] = env_text(value)
    return out


# ------------------------------------------------------------------------------ guard


def forbids_nvls(forbidden_env: Mapping[str, Sequence[str] | None] | None) -> bool:
    """Whether a space's ``forbidden.env`` forbids NVLink multicast (NCCL_NVLS_ENABLE=1)."""
    if not forbidden_env or NVLS_VAR not in forbidden_env:
        return False
    values = forbidden_env[NVLS_VAR]
    return values is None or "1" in values


def check_forbidden(candidates: Sequence[NcclCandidate],
                    forbidden_env: Mapping[str, Sequence[str] | None], *,
                    origin: str | None = None) -> None:
    """Reject a candidate that sets a forbidden value.

    Raises:
        ConfigError: Naming the candidate and the forbidden setting.
    """
    for cand in candidates:
        for key, value in cand.full_env().items():
            if value is None or key not in forbidden_env:
                continue
            values = forbidden_env[key]
            if values is None or value in values:
                why = ("NVLink multicast is forbidden here; pass --allow-nvls if this machine "
                       "may use it" if key == NVLS_VAR else "it is in forbidden.env")
                raise ConfigError(f"candidate {cand.name!r} sets {key}={value}, which is "
                                  f"forbidden: {why}", file=origin, field=cand.name)


def worker_env(cand: NcclCandidate) -> dict[str, str | None]:
    """The variables a candidate's workers get on top of the probe's own environment.

    NVLink multicast stays off (NCCL, torch symmetric memory and NVSHMEM) unless the candidate
    turns NCCL_NVLS_ENABLE on itself, which :func:`check_forbidden` has refused where it is
    forbidden.
    """
    env = cand.full_env()
    out: dict[str, str | None] = {}
    if env.get(NVLS_VAR) in (None, "0"):
        out.update(MULTICAST_OFF)
    out.update({k: v for k, v in env.items() if not (k == NVLS_VAR and v is None)})
    return out
