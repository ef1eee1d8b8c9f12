"""The ``workload:`` of a search space: which prompts a trial sends, and the load shape.

A :class:`Workload` is built from the ``workload:`` section of a search-space file and holds two
disjoint, seeded samples of distinct prompts: a warm-up set and a measured set. Output length
is either fixed (``output_len: N``: every request asks for N tokens with ``ignore_eos``) or
natural (``output_len: null``: each prompt's own length from the data, stopping at EOS, capped at
``max_output_len``). The prompt files and their formats are :mod:`autotune.space.prompts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.sglang import datasets as sglang_datasets
from autotune.space import sampling
from autotune.space.prompts import Prompt, _Entry, read_builtin, read_jsonl, read_sharegpt, to_prompts

SOURCES = ("builtin", "jsonl", "sharegpt")
APIS = ("generate", "chat")
# A list of concurrency levels multiplies every trial's measuring time by its length; past a
# handful of levels a search would spend its budget re-measuring one config.
MAX_LEVELS = 8
MAX_CONCURRENCY = 4096

_DEFAULTS: dict[str, Any] = {
    "source": "builtin", "path": None, "num_prompts": 64, "warmup_prompts": 4,
    "output_len": 256, "max_output_len": 2048, "seed": 0, "concurrency": 1,
    "request_rate": None, "api": "generate", "max_duration_s": None, "tokenizer": None,
    "primary_concurrency": None, "sample": "random",
}


@dataclass(frozen=True)
class Workload:
    """Seeded, disjoint warm-up and measured prompt sets, plus the load shape to drive them.

    Build it with :meth:`from_spec`. It is immutable and picklable (it crosses into Ray trials).
    """

    source: str
    path: str | None
    num_prompts: int
    warmup_prompts: int
    output_len: int | None
    max_output_len: int
    seed: int
    concurrency: int | None  # with levels, the primary level (what bench_kwargs drives)
    request_rate: float | None
    api: str
    max_duration_s: float | None
    _warmup: tuple[Prompt, ...]
    _measured: tuple[Prompt, ...]
    # ``concurrency: [1, 8, 64]``: every level, as written; None for a single concurrency.
    concurrency_levels: tuple[int, ...] | None = None
    # How the prompts were drawn (autotune.space.sampling): random or stratified by kind.
    sample: str = "random"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, *, file: str | None = None,
                  base_dir: str | Path | None = None,
                  lines: Mapping[str, int] | None = None) -> Workload:
        """Validate a ``workload:`` section and load and sample its prompts.

        Args:
            spec: The section; missing keys take defaults (``source: builtin``,
                ``num_prompts: 64``, ``warmup_prompts: 4``, ``output_len: 256``,
                ``max_output_len: 2048``, ``seed: 0``, ``concurrency: 1``,
                ``request_rate: null``, ``api: generate``, ``max_duration_s: null``).
                ``concurrency`` may be a list of levels (each trial measures every one, see
                :meth:`levels`); ``primary_concurrency``, one of them, is the level the search
                optimises (default: the first). ``sample`` is how prompts are drawn:
                ``random`` (default) or ``stratified`` by kind (:mod:`autotune.space.sampling`).
            file: The search-space file, for error messages.
            base_dir: Directory that a relative ``path`` is relative to (the space file's).
            lines: Optional line number of each key in ``file``, for error messages.

        Raises:
            ConfigError: A bad value, or a bad or too small prompt file.
        """
        spec = dict(spec or {})
        def bad(key: str, msg: str) -> ConfigError:
            return ConfigError(msg, file=file, line=(lines or {}).get(key),
                               field=f"workload.{key}")

        unknown = sorted(set(spec) - set(_DEFAULTS))
        if unknown:
            raise bad(unknown[0], f"unknown key {unknown[0]!r}; known keys: "
                                  f"{', '.join(sorted(_DEFAULTS))}")
        v = {**_DEFAULTS, **spec}

        def integer(key: str, low: int, *, optional: bool = False) -> int | None:
            x = v[key]
            if x is None and optional:
                return None
            if isinstance(x, bool) or not isinstance(x, int) or x < low:
                raise bad(key, f"must be an integer >= {low}"
                               f"{' or null' if optional else ''}, got {x!r}")
            return x

        def positive(key: str) -> float | None:
            x = v[key]
            if x is None:
                return None
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (
                    x > 0 and math.isfinite(x)):
                raise bad(key, f"must be a number > 0 or null, got {x!r}")
            return float(x)

        source = v["source"]
        dataset = None
        if sglang_datasets.is_sglang_source(source):
            try:
                dataset = sglang_datasets.parse_source(source)
            except sglang_datasets.DatasetError as exc:
                raise bad("source", str(exc)) from None
        elif source not in SOURCES:
            raise bad("source", f"must be one of {', '.join(SOURCES)} or sglang:<dataset>[:<category>] "
                                f"({', '.join(sglang_datasets.DATASETS)}), got {source!r}")
        if v["tokenizer"] is not None and dataset is None:
            raise bad("tokenizer", "only a source sglang:<dataset> takes a tokenizer")
        sample = v["sample"]
        if sample not in sampling.SAMPLES:
            raise bad("sample", f"must be one of {', '.join(sampling.SAMPLES)}, got {sample!r}")
        api = v["api"]
        if api not in APIS:
            raise bad("api", f"must be one of {', '.join(APIS)}, got {api!r}")
        num = integer("num_prompts", 1)
        warm = integer("warmup_prompts", 0)
        out_len = integer("output_len", 1, optional=True)
        max_out = integer("max_output_len", 1)
        seed = integer("seed", 0)
        levels = _levels(v["concurrency"], bad)
        if levels is not None:
            v["concurrency"] = _primary(levels, v["primary_concurrency"], bad)
        elif v["primary_concurrency"] is not None:
            raise bad("primary_concurrency", "only a list of concurrency levels takes a "
                                             "primary_concurrency; write concurrency: [1, 8, 64]")
        conc = integer("concurrency", 1, optional=True)
        rate = positive("request_rate")
        max_dur = positive("max_duration_s")
        if conc is None and rate is None:
            raise bad("concurrency", "set concurrency, request_rate, or both; with neither "
                                     "there is no load shape")

        path = v["path"]
        if source == "builtin":
            if path is not None:
                raise bad("path", "source builtin takes no path; use source jsonl or sharegpt "
                                  "for a file")
            entries = read_builtin()
            shown = None
        else:
            if not isinstance(path, str) or not path:
                raise bad("path", f"source {source} needs path: the prompt file")
            p = Path(path).expanduser()
            if not p.is_absolute() and base_dir is not None:
                p = Path(base_dir) / p
            if not p.is_file():
                raise bad("path", f"prompt file not found: {p}")
            shown = str(p)
            if dataset is not None:
                entries = _dataset_entries(dataset, p, v, out_len, warm + num, seed, api, bad)  # type: ignore[operator]
            else:
                reader = read_jsonl if source == "jsonl" else read_sharegpt
                entries = reader(p)
        display = shown or "autotune/data/prompts.jsonl"

        prompts = to_prompts(entries, output_len=out_len, max_output_len=max_out,
                              display=display)
        need = warm + num  # type: ignore[operator]
        if len(prompts) < need:
            raise bad("num_prompts", f"{display} has {len(prompts)} distinct prompts, fewer than "
                                     f"warmup_prompts + num_prompts = {need}; lower num_prompts "
                                     "or use a larger file")
        try:
            warm_idx, measured_idx = sampling.pick(prompts, warmup=warm, measured=num,  # type: ignore[arg-type]
                                                   seed=seed, sample=sample)  # type: ignore[arg-type]
        except ValueError as exc:
            raise bad("sample", f"{display}: {exc}") from None
        return cls(source=source, path=shown, num_prompts=num,  # type: ignore[arg-type]
                   warmup_prompts=warm, output_len=out_len,  # type: ignore[arg-type]
                   max_output_len=max_out, seed=seed, concurrency=conc,  # type: ignore[arg-type]
                   request_rate=rate, api=api, max_duration_s=max_dur,
                   _warmup=tuple(prompts[i] for i in warm_idx),
                   _measured=tuple(prompts[i] for i in measured_idx),
                   concurrency_levels=levels, sample=sample)

    def levels(self) -> list[Workload]:
        """One workload per concurrency level, in the order written; ``[self]`` for one level.

        Each level's workload has that level as its single ``concurrency`` and the same prompts,
        so a trial measures every level with the same requests on the same server.
        """
        if not self.concurrency_levels:
            return [self]
        return [replace(self, concurrency=c, concurrency_levels=None)
                for c in self.concurrency_levels]

    def warmup(self) -> list[Prompt]:
        """Prompts for warming the server up; none of them is in :meth:`measured`."""
        return list(self._warmup)

    def measured(self) -> list[Prompt]:
        """Prompts whose requests are measured."""
        return list(self._measured)

    def bench_kwargs(self) -> dict[str, Any]:
        """Load-shape keyword arguments for :func:`autotune.bench.client.run_benchmark`."""
        return {"api": self.api, "concurrency": self.concurrency,
                "request_rate": self.request_rate, "max_duration_s": self.max_duration_s,
                "seed": self.seed}

    def to_dict(self) -> dict[str, Any]:
        """The resolved spec (for logging as parameters)."""
        out = {"source": self.source, "path": self.path, "num_prompts": self.num_prompts,
               "warmup_prompts": self.warmup_prompts, "output_len": self.output_len,
               "max_output_len": self.max_output_len, "seed": self.seed,
               "concurrency": self.concurrency, "request_rate": self.request_rate,
               "api": self.api, "max_duration_s": self.max_duration_s}
        if self.sample != "random":
            # Only when chosen: the default's logged parameters stay as they were.
            out["sample"] = self.sample
        if self.concurrency_levels:
            out["concurrency"] = list(self.concurrency_levels)
            out["primary_concurrency"] = self.concurrency
        return out


def primary_concurrency(spec: Mapping[str, Any] | None) -> int | None:
    """The concurrency a ``workload:`` section drives for the search's objective, without loading
    its prompts: its single ``concurrency``, or the primary of its levels (``primary_concurrency``,
    else the first level written). For code that models a workload instead of running it.

    Raises:
        ConfigError: A bad ``concurrency`` list or ``primary_concurrency``.
    """
    spec = spec or {}
    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(msg, field=f"workload.{key}")

    value = spec.get("concurrency", _DEFAULTS["concurrency"])
    levels = _levels(value, bad)
    if levels is None:
        return value
    return _primary(levels, spec.get("primary_concurrency"), bad)


def _levels(value: Any, bad: Any) -> tuple[int, ...] | None:
    """The levels of a ``concurrency:`` list, checked; None for a single value (checked later)."""
    if not isinstance(value, (list, tuple)):
        return None
    if not value:
        raise bad("concurrency", "an empty list measures nothing; write one level (8) or "
                                 "several ([1, 8, 64])")
    if len(value) > MAX_LEVELS:
        raise bad("concurrency", f"{len(value)} levels; at most {MAX_LEVELS} (each level "
                                 "multiplies every trial's measuring time)")
    seen: set[int] = set()
    for i, x in enumerate(value):
        key = f"concurrency[{i}]"
        if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_CONCURRENCY:
            raise bad(key, f"each level must be an integer from 1 to {MAX_CONCURRENCY}, "
                           f"got {x!r}")
        if x in seen:
            raise bad(key, f"level {x} is listed twice; list each concurrency once")
        seen.add(x)
    return tuple(value)


def _primary(levels: tuple[int, ...], value: Any, bad: Any) -> int:
    """The level the search optimises: ``primary_concurrency``, else the first level written."""
    if value is None:
        return levels[0]
    if value not in levels or isinstance(value, bool):
        raise bad("primary_concurrency", f"must be one of the concurrency levels "
                                         f"{list(levels)}, got {value!r}")
    return value


def _dataset_entries(dataset: sglang_datasets.DatasetSource, path: Path, v: Mapping[str, Any],
                     out_len: int | None, count: int, seed: int, api: str, bad: Any) -> list[_Entry]:
    """The prompts SGLang's loader gives for ``dataset``, as entries of the file they came from."""
    if api != "generate":
        # The loaders return finished prompt text (SPEED-Bench's already through the chat
        # template), which the chat API would template a second time.
        raise bad("api", f"source {dataset} sends SGLang's prompt text as it is; use api: generate")
    tokenizer = v["tokenizer"]
    if not isinstance(tokenizer, str) or not tokenizer:
        raise bad("tokenizer", f"source {dataset} needs the model's tokenizer: a folder or a name "
                               "(by default the space's model_path)")
    try:
        rows = sglang_datasets.load_prompts(dataset, path=str(path), tokenizer=tokenizer,
                                            count=count, seed=seed, output_len=out_len)
    except sglang_datasets.DatasetError as exc:
        raise bad("source", str(exc)) from None
    return [_Entry(id=f"{dataset}:{i}", text=text, messages=None, natural_tokens=n, line=i + 1)
            for i, (text, n) in enumerate(rows)]
