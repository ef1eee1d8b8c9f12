"""The ``workload:`` of a search space: which prompts a trial sends, and the load shape.

A :class:`Workload` is built from the ``workload:`` section of a search-space file and holds two
disjoint, seeded samples of distinct prompts: a warm-up set and a measured set. Output length
is either fixed (``output_len: N``: every request asks for N tokens with ``ignore_eos``) or
natural (``output_len: null``: each prompt's own length from the data, stopping at EOS, capped at
``max_output_len``). The prompt files and their formats are :mod:`autotune.space.prompts`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, overload

from autotune.errors import ConfigError
from autotune.sglang import datasets as sglang_datasets
from autotune.space import sampling
from autotune.space.load_levels import CONCURRENCY, PRIMARY_KEYS, LoadLevel, concurrency_of, primary_level, read_levels
from autotune.space.prompts import Prompt, _Entry, read_builtin, read_jsonl, read_sample, read_sharegpt, to_prompts

SOURCES = ("builtin", "jsonl", "sharegpt")
APIS = ("generate", "chat")

_DEFAULTS: dict[str, Any] = {
    # num_prompts: sized_num_prompts decides when it is not written.
    "source": "builtin", "path": None, "num_prompts": None, "warmup_prompts": 4,
    # concurrency: 1, or no cap beside a request rate; load_levels.concurrency_of decides.
    "output_len": 256, "max_output_len": 2048, "seed": 0, "concurrency": 1,
    "request_rate": None, "api": "generate", "max_duration_s": None, "tokenizer": None,
    "primary_concurrency": None, "primary_request_rate": None, "sample": "random",
    "production_sample": None,
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
    concurrency: int | None  # with concurrency levels, the primary level (what bench_kwargs drives)
    request_rate: float | None  # with request-rate levels, the primary level
    api: str
    max_duration_s: float | None
    _warmup: tuple[Prompt, ...]
    _measured: tuple[Prompt, ...]
    # ``concurrency: [1, 8, 64]`` or ``request_rate: [2, 8]``: every level, as written; None for
    # a single load (autotune.space.load_levels).
    load_levels: tuple[LoadLevel, ...] | None = None
    # How the prompts were drawn (autotune.space.sampling): random or stratified by kind.
    sample: str = "random"
    # A file of production's prompts to compare this workload's shape with
    # (autotune.bench.shape_match); its path, resolved; None when the space declares none.
    production_sample: str | None = None

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, *, file: str | None = None,
                  base_dir: str | Path | None = None,
                  lines: Mapping[str, int] | None = None) -> Workload:
        """Validate a ``workload:`` section and load and sample its prompts.

        Args:
            spec: The section; missing keys take defaults (``source: builtin``,
                ``num_prompts``: :func:`sized_num_prompts` (64, or 6 waves of the largest
                concurrency above 10), ``warmup_prompts: 4``, ``output_len: 256``,
                ``max_output_len: 2048``, ``seed: 0``, ``concurrency: 1`` (beside a
                ``request_rate``: null, no cap on requests in flight),
                ``request_rate: null``, ``api: generate``, ``max_duration_s: null``).
                ``concurrency`` or ``request_rate`` may be a list of levels (each trial measures
                every one, see :meth:`levels` and :mod:`autotune.space.load_levels`);
                ``primary_concurrency`` / ``primary_request_rate``, one of them, is the level the
                search optimises (default: the first). ``sample`` is how prompts are drawn:
                ``random`` (default) or ``stratified`` by kind (:mod:`autotune.space.sampling`).
                ``production_sample``: a file of production's prompts (JSONL, ShareGPT JSON or
                text, :func:`autotune.space.prompts.read_sample`), read by
                :func:`read_production_sample` where the space loads; null (default) for none.
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
        v = {**_DEFAULTS, **spec, CONCURRENCY: concurrency_of(spec)}

        # Only optional=True can give None; the overloads say so to the type checker.
        @overload
        def integer(key: str, low: int, *, optional: Literal[False] = False, hint: str = "") -> int: ...
        @overload
        def integer(key: str, low: int, *, optional: bool = False, hint: str = "") -> int | None: ...
        def integer(key: str, low: int, *, optional: bool = False, hint: str = "") -> int | None:
            x = v[key]
            if x is None and optional:
                return None
            if isinstance(x, bool) or not isinstance(x, int) or x < low:
                raise bad(key, f"must be an integer >= {low}"
                               f"{' or null' if optional else ''}, got {x!r}{hint}")
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
        warm = integer("warmup_prompts", 0)
        out_len = integer("output_len", 1, optional=True)
        max_out = integer("max_output_len", 1)
        seed = integer("seed", 0)
        levels, primary = read_levels(v, bad)
        if primary is not None:
            v[primary.axis] = primary.value  # the workload's own load is the primary level's
        conc = integer("concurrency", 1, optional=True, hint="; beside a request_rate it caps "
                       "the requests in flight: leave it out (or null) for no cap, as "
                       "bench_serving --request-rate" if v["request_rate"] is not None else "")
        rate = positive("request_rate")
        num = integer("num_prompts", 1) if "num_prompts" in spec else num_prompts_of(spec)
        max_dur = positive("max_duration_s")
        if conc is None and rate is None:
            raise bad("concurrency", "set concurrency, request_rate, or both; with neither "
                                     "there is no load shape")
        production = _production_sample(v["production_sample"], base_dir, bad)

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
                entries = _dataset_entries(dataset, p, v, out_len, warm + num, seed, api, bad)
            else:
                reader = read_jsonl if source == "jsonl" else read_sharegpt
                entries = reader(p)
        display = shown or "autotune/data/prompts.jsonl"

        prompts = to_prompts(entries, output_len=out_len, max_output_len=max_out,
                              display=display)
        need = warm + num
        if len(prompts) < need:
            sized = "" if "num_prompts" in spec else (
                f" (num_prompts, not written, is {WINDOW_WAVES} waves of the largest concurrency)")
            raise bad("num_prompts", f"{display} has {len(prompts)} distinct prompts, fewer than "
                                     f"warmup_prompts + num_prompts = {need}{sized}; lower num_prompts "
                                     "or use a larger file")
        try:
            warm_idx, measured_idx = sampling.pick(prompts, warmup=warm, measured=num,
                                                   seed=seed, sample=sample)
        except ValueError as exc:
            raise bad("sample", f"{display}: {exc}") from None
        return cls(source=source, path=shown, num_prompts=num,
                   warmup_prompts=warm, output_len=out_len,
                   max_output_len=max_out, seed=seed, concurrency=conc,
                   request_rate=rate, api=api, max_duration_s=max_dur,
                   _warmup=tuple(prompts[i] for i in warm_idx),
                   _measured=tuple(prompts[i] for i in measured_idx),
                   load_levels=levels, sample=sample, production_sample=production)

    @property
    def concurrency_levels(self) -> tuple[int, ...] | None:
        """The concurrency levels as written; None without a concurrency list."""
        if not self.load_levels or self.load_levels[0].axis != CONCURRENCY:
            return None
        return tuple(int(lv.value) for lv in self.load_levels)

    def primary_level(self) -> LoadLevel | None:
        """The level the search optimises (this workload's own load); None without levels."""
        if not self.load_levels:
            return None
        axis = self.load_levels[0].axis
        return LoadLevel.of(axis, self.concurrency if axis == CONCURRENCY else self.request_rate)

    def levels(self) -> list[Workload]:
        """One workload per level, in the order written; ``[self]`` for one level.

        Each level's workload has that level as its single ``concurrency`` (or ``request_rate``)
        and the same prompts, so a trial measures every level with the same requests on the same
        server. :meth:`level_of` names a level's workload.
        """
        if not self.load_levels:
            return [self]
        return [self._at(lv) for lv in self.load_levels]

    def _at(self, level: LoadLevel) -> Workload:
        """This workload with ``level`` as its one load (LoadLevel.of made the value an int or float)."""
        if level.axis == CONCURRENCY:
            return replace(self, load_levels=None, concurrency=int(level.value))
        return replace(self, load_levels=None, request_rate=float(level.value))

    def level_of(self, level_workload: Workload) -> LoadLevel | None:
        """The level one of :meth:`levels` stands for; None when this workload has no levels."""
        if not self.load_levels:
            return None
        axis = self.load_levels[0].axis
        return LoadLevel.of(axis, getattr(level_workload, axis))

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
        out: dict[str, Any]
        out = {"source": self.source, "path": self.path, "num_prompts": self.num_prompts,
               "warmup_prompts": self.warmup_prompts, "output_len": self.output_len,
               "max_output_len": self.max_output_len, "seed": self.seed,
               "concurrency": self.concurrency, "request_rate": self.request_rate,
               "api": self.api, "max_duration_s": self.max_duration_s}
        if self.sample != "random":
            # Only when chosen: the default's logged parameters stay as they were.
            out["sample"] = self.sample
        if self.production_sample is not None:
            out["production_sample"] = self.production_sample
        primary = self.primary_level()
        if primary is not None:
            out[primary.axis] = [lv.value for lv in self.load_levels or ()]
            out[PRIMARY_KEYS[primary.axis]] = primary.value
        return out


#: Waves of requests (requests over the concurrency) a measured window holds when ``num_prompts`` is
#: not written: at the H200's batch levels (issue 34) the repeats' robust spread times the waves a
#: window held was about constant (0.69% x 8 waves at concurrency 16, 2.00% x 2.7 waves at 64 capped
#: at 48: 5.5 and 5.3), so a spread within 1% needs about 5.5 waves; 6 is the next whole wave.
WINDOW_WAVES = 6
#: ``num_prompts`` when not written, at concurrency 1 to 10 and in an open loop.
MIN_NUM_PROMPTS = 64


def largest_closed_loop(levels: tuple[LoadLevel, ...] | None, concurrency: int | None,
                        request_rate: float | None) -> int | None:
    """The most requests a closed loop keeps in flight over its levels; None for an open loop."""
    if levels and levels[0].axis == CONCURRENCY:
        return max(int(lv.value) for lv in levels)
    return concurrency if request_rate is None and not levels else None


def sized_num_prompts(concurrency: int | None) -> int:
    """``num_prompts`` when not written: :data:`WINDOW_WAVES` waves of the largest concurrency, at
    least :data:`MIN_NUM_PROMPTS` (a server cap below the concurrency only adds waves)."""
    return max(MIN_NUM_PROMPTS, WINDOW_WAVES * (concurrency or 0))


def num_prompts_of(spec: Mapping[str, Any] | None) -> int:
    """The measured requests a ``workload:`` section sends per repeat, without loading its prompts:
    ``num_prompts`` as written, else :func:`sized_num_prompts` of its largest closed-loop
    concurrency. For code that models a workload instead of running it (bench_search's GPU time),
    and :meth:`Workload.from_spec`'s default.

    Raises:
        ConfigError: A bad list of levels or primary key.
    """
    spec = spec or {}
    if spec.get("num_prompts") is not None:
        return int(spec["num_prompts"])
    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(msg, field=f"workload.{key}")

    levels, _ = read_levels(spec, bad)
    if levels:
        return sized_num_prompts(largest_closed_loop(levels, None, None))
    rate = spec.get("request_rate")
    return sized_num_prompts(largest_closed_loop(None, concurrency_of(spec), None if rate is None else float(rate)))


def primary_concurrency(spec: Mapping[str, Any] | None) -> int | None:
    """The concurrency a ``workload:`` section drives for the search's objective, without loading
    its prompts: its single ``concurrency``, or the primary of its concurrency levels
    (``primary_concurrency``, else the first level written); beside a request rate, the
    ``concurrency`` that caps it, None where none is written (no cap). For code that models a
    workload instead of running it.

    Raises:
        ConfigError: A bad list of levels or primary key.
    """
    spec = spec or {}
    level = primary_level(spec)
    if level is not None and level.axis == CONCURRENCY:
        return int(level.value)
    return concurrency_of(spec)


def _production_sample(value: Any, base_dir: str | Path | None,
                       bad: Callable[[str, str], ConfigError]) -> str | None:
    """The resolved path of ``production_sample``; None without one. The file itself is read where
    the space loads (:func:`read_production_sample`), not in every trial: a trial never reads it."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise bad("production_sample", f"must be the path of a file of production prompts (JSONL, "
                                       f"ShareGPT JSON or one prompt a line) or null, got {value!r}")
    p = Path(value).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return str(p)


def read_production_sample(workload: Workload, *, file: str | None = None,
                           line: int | None = None) -> tuple[_Entry, ...] | None:
    """The workload's production sample, parsed: read once, when its space loads
    (:attr:`autotune.space.search_space.SearchSpace.production_sample` keeps it for the search's
    comparisons); None without one.

    Raises:
        ConfigError: The file is missing (at the space's ``production_sample:`` line), unreadable or
            malformed (at the sample's own line), or holds too few prompts.
    """
    if workload.production_sample is None:
        return None
    if not Path(workload.production_sample).is_file():
        raise ConfigError(f"production sample not found: {workload.production_sample}", file=file, line=line,
                          field="workload.production_sample")
    return tuple(read_sample(workload.production_sample))  # its own errors name the file and line


def _dataset_entries(dataset: sglang_datasets.DatasetSource, path: Path, v: Mapping[str, Any],
                     out_len: int | None, count: int, seed: int, api: str,
                     bad: Callable[[str, str], ConfigError]) -> list[_Entry]:
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
