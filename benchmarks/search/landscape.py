"""Recorded landscapes: real measurements of every config of a space, replayed for bench_search.

A landscape is one JSON file::

    {"format": "autotune-landscape/1",
     "space": "h200-llama-8b.yaml",
     "description": "free text: machine, SGLang version, workload",
     "acceptance": "synthetic",
     "records": [<the stdout of python -m autotune.trial --json>, ...]}

``space`` is a path relative to the landscape file's folder (tried first) or to the current
directory; ``load_landscape(path, space=...)`` overrides it. ``description`` and ``acceptance``
are free text (``acceptance`` says how acceptance came about: measured, synthetic, ...).

Every config the space enumerates, and the baseline of every non-speculative group, needs exactly
one record; records are matched to configs through the space's canonical form (the resolved
params, derived values filled in, keyed by :func:`autotune.search.samplers._candidates.config_key`). Two
records of one config are an error: separate runs are not pooled. A record with status
``failed`` or no ``output_tok_s`` is a failed config; unknown stays None, never 0.

:class:`LandscapeEvaluator` replays it as the truth of :func:`benchmarks.search.problem.load_problem`:
the truth is each record's median tok/s, phases, accept length and its group's baseline; the
n-th measurement of a config in seed s is one of its recorded repeats (see
:meth:`LandscapeEvaluator.draw`). Judging (feasibility against the baseline by the space's
``min_speedup``) stays in :mod:`benchmarks.search.problem`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from autotune.space.trial_config import config_key
from benchmarks.search._records import PHASE_KEYS, STATUSES, Entry, canonical, read_entry, show
from benchmarks.search.problem import noise_rng

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = ["FORMAT", "PHASE_KEYS", "STATUSES", "Entry", "Landscape", "LandscapeEvaluator",
           "canonical", "load_landscape", "missing_configs"]

FORMAT = "autotune-landscape/1"


@dataclass
class Landscape:
    """A loaded, checked landscape.

    Attributes:
        file: The landscape file.
        space: The loaded ``SearchSpace``.
        space_path: Where the space was loaded from.
        description: The file's free-text description.
        acceptance: How acceptance came about (free text), None when not said.
        records: The records as read.
        entries: One :class:`Entry` per config, keyed by ``config_key`` of its canonical params.
    """

    file: str
    space: SearchSpace
    space_path: str
    description: str
    acceptance: str | None
    records: list[dict[str, Any]]
    entries: dict[tuple, Entry]
    _lookup: dict[tuple, Entry] = field(default_factory=dict, repr=False)

    def entry(self, params: Mapping[str, Any]) -> Entry:
        """The record of a config (given in any form the space accepts)."""
        key = config_key(params)
        if key not in self._lookup:
            resolved, why = canonical(self.space, params)
            found = self.entries.get(config_key(resolved)) if why is None else None
            if found is None:
                raise ConfigError(f"no record for {show(params)}" + (f" ({why})" if why else ""),
                                  file=self.file, field="records")
            self._lookup[key] = found
        return self._lookup[key]


def missing_configs(space: SearchSpace, entries: Mapping[tuple, Any]) -> tuple[list[dict], list[dict]]:
    """Configs of the space with no entry: (speculative or enumerated ones, group baselines)."""
    configs: list[dict] = []
    baselines: list[dict] = []
    seen: set[tuple] = set()
    for cfg in space.enumerate():
        for params, is_group_baseline in ((cfg, False), (space.baseline_params(cfg), True)):
            resolved, why = canonical(space, params)
            key = config_key(resolved if why is None else params)
            if key in seen:
                continue
            seen.add(key)
            if key not in entries:
                (baselines if is_group_baseline else configs).append(resolved or dict(params))
    return configs, baselines


def load_landscape(path: str | os.PathLike[str], *, space: str | None = None) -> Landscape:
    """Read and check a landscape file.

    Args:
        path: The landscape JSON.
        space: A space file to use instead of the one the landscape names.

    Raises:
        ConfigError: Naming the file (and the record and field where there is one) for a file
            that cannot be read, a wrong format tag, a space that cannot be found or loaded, a
            record the space rejects, two records of one config, or a space the records do not
            cover (a config or a group baseline without a record).
    """
    name = str(path)
    try:
        with open(name, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read the landscape: {exc.strerror or exc}", file=name) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not a JSON landscape: {exc}", file=name) from None
    if not isinstance(data, dict):
        raise ConfigError(f"a landscape is a JSON object, got {type(data).__name__}", file=name)
    if data.get("format") != FORMAT:
        raise ConfigError(f"format must be {FORMAT!r}, got {data.get('format')!r}", file=name,
                          field="format")
    space_obj, space_path = _load_space(data, name, override=space)
    text = {}
    for section in ("description", "acceptance"):
        value = data.get(section)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"must be free text (a string), got {type(value).__name__}",
                              file=name, field=section)
        text[section] = value
    records = data.get("records")
    if not isinstance(records, list) or not records:
        raise ConfigError("records must be a non-empty list of trial JSON objects (the stdout of "
                          "python -m autotune.trial --json)", file=name, field="records")
    entries: dict[tuple, Entry] = {}
    for i, rec in enumerate(records):
        entry = read_entry(rec, i, space_obj, name)
        key = config_key(entry.params)
        if key in entries:
            raise ConfigError(
                f"records {entries[key].index} and {i} are the same config {show(entry.params)}; "
                "keep one (separate runs are not pooled: merge their output_tok_s_repeats into "
                "one record, with output_tok_s their median, if you want both)",
                file=name, field=f"records[{i}].params")
        entries[key] = entry
    configs, baselines = missing_configs(space_obj, entries)
    if configs:
        extra = f" (and {len(baselines)} group baselines)" if baselines else ""
        raise ConfigError(
            f"the landscape does not cover the space {space_path}: {len(configs)} configs "
            f"missing{extra}, e.g. {show(configs[0])}; sweep them or narrow the space",
            file=name, field="records")
    if baselines:
        raise ConfigError(
            f"no baseline record for {len(baselines)} non-speculative group(s) of {space_path}, "
            f"e.g. {show(baselines[0])}: every group's speculative configs are judged against "
            "it; measure it (python -m autotune.trial --params with speculative_algorithm null)",
            file=name, field="records")
    return Landscape(file=name, space=space_obj, space_path=space_path,
                     description=text["description"] or "", acceptance=text["acceptance"],
                     records=records, entries=entries)


def _load_space(data: Mapping[str, Any], file: str, *, override: str | None) -> tuple[SearchSpace, str]:
    from autotune.space.search_space import load_space

    path: str | None
    if override is not None:
        path = str(override)
    else:
        raw = data.get("space")
        if not isinstance(raw, str) or not raw:
            raise ConfigError("space must name the space file the sweep measured (relative to "
                              f"this file's folder or the current directory), got {raw!r}",
                              file=file, field="space")
        tried = [raw] if os.path.isabs(raw) else [
            os.path.normpath(os.path.join(os.path.dirname(file) or ".", raw)), raw]
        path = next((p for p in tried if os.path.isfile(p)), None)
        if path is None:
            raise ConfigError(f"space file {raw!r} not found (tried {', '.join(tried)}); "
                              "fix the path or give --space", file=file, field="space")
    try:
        return load_space(path), path
    except ConfigError as exc:
        raise ConfigError(f"cannot load its space: {exc}", file=file, field="space") from None


class LandscapeEvaluator:
    """A recorded landscape as bench_search's source of truth and noise.

    Args:
        landscape: A loaded :class:`Landscape`.
    """

    def __init__(self, landscape: Landscape) -> None:
        self.landscape = landscape
        self.space = landscape.space
        self._cache: dict[tuple, dict[str, Any]] = {}

    def info(self) -> dict[str, Any]:
        land = self.landscape
        return {"oracle": "landscape", "landscape": land.file, "space": land.space_path,
                "description": land.description, "acceptance": land.acceptance,
                "records": len(land.records)}

    def expected(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The recorded truth of a config: median tok/s, phases, accept length, its baseline.

        Whether it is feasible is :class:`benchmarks.search.problem.Problem`'s to judge.
        """
        key = config_key(params)
        if key in self._cache:
            return self._cache[key]
        e = self.landscape.entry(params)
        out: dict[str, Any] = {
            "params": dict(e.params), "status": "ok" if e.tok_s is not None else "failed",
            "reason": e.reason, "is_baseline": e.is_baseline, "output_tok_s": e.tok_s,
            "output_tok_s_repeats": list(e.repeats), "accept_length": e.accept_length,
            "phases": dict(e.phases), "record": e.index}
        if e.is_baseline:
            out.update(baseline_tok_s=e.tok_s, speedup=1.0 if e.tok_s else None,
                       break_even_accept_length=None)
        else:
            base = self.landscape.entry(self.space.baseline_params(e.params))
            speedup = e.tok_s / base.tok_s if e.tok_s and base.tok_s else None
            cycle, step = e.phases.get("cycle_ms"), base.phases.get("cycle_ms")
            out.update(baseline_tok_s=base.tok_s, speedup=speedup,
                       break_even_accept_length=cycle / step if cycle and step else None)
        self._cache[key] = out
        return out

    def accept_probs(self, params: Mapping[str, Any]) -> None:
        """Unknown: a trial's JSON keeps no accepted-drafts histogram."""
        return None

    def draw(self, params: Mapping[str, Any], truth: Mapping[str, Any], *, seed: int, n: int,
             noise_cv: float = 0.0) -> dict[str, Any]:
        """Measurement ``n`` of a config in seed ``seed``: one of its recorded repeats.

        Each pass of R measurements (R recorded repeats) is a fresh seeded permutation of the
        repeats, so re-measuring walks through different recorded runs before any comes back.
        Phase times move with the drawn tok/s (as ``cycle_ms = wall / cycles`` does); the
        accept length is the recorded one. ``noise_cv`` does not apply.
        """
        e = self.landscape.entry(params)
        if e.tok_s is None:  # a failed config is never measured
            raise ValueError(f"config {params} failed in the landscape: it has no measurement to draw")
        r = len(e.repeats)
        order = noise_rng(seed, config_key(params), ("landscape", n // r)).permutation(r)
        tok_s = e.repeats[int(order[n % r])]
        f = tok_s / e.tok_s
        return {"tok_s": tok_s, "accept_length": e.accept_length,
                "phases": {k: (v / f if v is not None else None) for k, v in e.phases.items()}}
