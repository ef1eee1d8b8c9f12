"""The settings sections of a search-space file: measure, objective, constraints, budget,
resources, search and workload (``nccl_prescreen``: :mod:`autotune.space._schema_prescreen`).

Each section has a frozen dataclass with its defaults and a ``read_*`` function that checks the raw
YAML and fills it in. They sit apart from :mod:`autotune.space._schema_params` because they only
configure how a search runs and is judged, never what it tries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune._yaml_lines import key_line_of, line_of
from autotune.sglang import datasets as sglang_datasets
from autotune.space._expr import ExprError, parse_slo
from autotune.space._schema import Reader, closest, join, type_name
from autotune.space.prompts import _Entry
from autotune.space.workload import Workload, read_production_sample

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
#: SGLang auto_benchmark's tiers: the sampler benchmark runs them as peers, a search cannot, so a
#: space naming one is told where they went rather than only that the name is not allowed.
PEER_STRATEGIES = ("auto-tier1", "auto-tier2")


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
    #: Why this sampler: ``search.sampler`` given in the file, or the default's reason
    #: (:func:`autotune.space._build.default_sampler` decides it at load).
    sampler_why: str = "search.sampler"
    seed: int = 0
    finalists: int = 3
    finalist_repeats: int = 3
    max_concurrent: int | None = None
    #: Where the Optuna study lives: None (in memory, inside Ray's searcher), ``sqlite`` or
    #: ``journal`` (files under ``mlruns/``), or an Optuna RDB URL.
    storage: str | None = None
    #: Stop before ``budget.trials`` when no unmeasured config can plausibly beat the incumbent
    #: (:mod:`autotune.search.stopping`); applies to samplers that bound their predictions.
    stop_rule: bool = True
    #: A runner-up that the trials' readings put at most this many percent ahead of the best config
    #: (at the stated confidence) is not worth a confirmation server: naming either loses at most
    #: this much (:attr:`autotune.search.evidence.WinnerEvidence.decisive`). 0: only a separated
    #: winner skips the finalists.
    equivalence_pct: float = 2.0
    #: A Ray Tune trial scheduler acting on the trials' rounds; None: none (every trial ends by
    #: its own sequential rule).
    scheduler: Scheduler | None = None


#: The largest ``search.equivalence_pct``: a wider one would call configs equal that a user sees apart.
MAX_EQUIVALENCE_PCT = 10.0


#: The trial schedulers ``search.scheduler.kind`` may name.
SCHEDULERS = ("asha",)


@dataclass(frozen=True)
class Scheduler:
    """``search.scheduler``: Ray Tune's ASHA (``AsyncHyperBandScheduler``) over the trials' rounds.

    It compares trials on the median of their round readings at rungs ``grace_period``,
    ``grace_period * reduction_factor``, ... (rounds), and stops the trials below the top
    ``1 / reduction_factor`` at a rung. A stopped trial is recorded ``stopped``, never feasible.

    Attributes:
        kind: ``asha``.
        grace_period: Rounds before the scheduler may stop a trial (None: the sequential rule's
            ``min_rounds``, the round at which a trial's own rule first decides).
        reduction_factor: The rung's keep fraction's inverse (>= 2).
    """

    kind: str = "asha"
    grace_period: int | None = None
    reduction_factor: int = 4


STUDY_STORAGES = ("sqlite", "journal")
_RDB_SCHEMES = ("sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+")


#: The most trials a search may plan: each is a server started and measured, so even at a few
#: seconds a trial this is weeks of work; a bigger number is a typo or a wish for a deadline.
MAX_TRIALS = 100_000


def read_budget(reader: Reader, value: Any, line: int | None) -> Budget:
    """Parse ``budget: {trials, wall_time_s}``."""
    if value is None:
        return Budget()
    reader.mapping(value, "budget", line, allowed=("trials", "wall_time_s"))
    return Budget(
        trials=reader.integer(value.get("trials", 40), "budget.trials",
                              line_of(value, "trials"), minimum=1, maximum=MAX_TRIALS,
                              hint="for a search that runs until a deadline, set budget.wall_time_s "
                                   "(seconds) and trials to the most it may run"),
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
    """Parse ``search: {sampler, seed, finalists, finalist_repeats, max_concurrent, storage, stop_rule,
    equivalence_pct, scheduler}``."""
    if value is None:
        return SearchSettings()
    reader.mapping(value, "search", line, allowed=("sampler", "seed", "finalists",
                                                   "finalist_repeats", "max_concurrent", "storage",
                                                   "stop_rule", "equivalence_pct", "scheduler"))
    storage = reader.string(value.get("storage"), "search.storage", line_of(value, "storage"),
                            allow_none=True)
    if storage is not None and storage not in STUDY_STORAGES and not storage.startswith(_RDB_SCHEMES):
        reader.fail(f"{storage!r} is not a study storage; allowed: sqlite (mlruns/optuna.db), journal "
                    "(mlruns/optuna.journal), or an Optuna RDB URL (sqlite:////abs/path.db, "
                    "postgresql://..., mysql://...)", field="search.storage", line=line_of(value, "storage"))
    sampler = value.get("sampler")
    if isinstance(sampler, str) and sampler.strip().lower().replace("_", "-") in PEER_STRATEGIES:
        reader.fail(f"{sampler} is a peer strategy for the sampler benchmark (python -m autotune.bench_search), "
                    f"not a product sampler; allowed: {', '.join(SAMPLERS)}",
                    field="search.sampler", line=line_of(value, "sampler"))
    equivalence = reader.number(value.get("equivalence_pct", SearchSettings.equivalence_pct),
                                "search.equivalence_pct", line_of(value, "equivalence_pct"), minimum=0)
    if equivalence > MAX_EQUIVALENCE_PCT:
        reader.fail(f"must be at most {MAX_EQUIVALENCE_PCT:g} (percent), got {equivalence}: a runner-up "
                    "further ahead than that is a different answer, worth confirming",
                    field="search.equivalence_pct", line=line_of(value, "equivalence_pct"))
    return SearchSettings(
        equivalence_pct=equivalence,
        scheduler=read_scheduler(reader, value.get("scheduler"), line_of(value, "scheduler") or line),
        storage=storage,
        stop_rule=reader.boolean(value.get("stop_rule", True), "search.stop_rule",
                                 line_of(value, "stop_rule")),
        sampler=reader.string(value.get("sampler", "tpe"), "search.sampler",
                              line_of(value, "sampler"), choices=SAMPLERS),
        # NumPy's and Optuna's samplers take seeds below 2**32.
        seed=reader.integer(value.get("seed", 0), "search.seed", line_of(value, "seed"),
                            minimum=0, maximum=2**32 - 1),
        finalists=reader.integer(value.get("finalists", 3), "search.finalists",
                                 line_of(value, "finalists"), minimum=0),
        finalist_repeats=reader.integer(value.get("finalist_repeats", 3),
                                        "search.finalist_repeats",
                                        line_of(value, "finalist_repeats"), minimum=1),
        max_concurrent=reader.integer(value.get("max_concurrent"), "search.max_concurrent",
                                      line_of(value, "max_concurrent"), minimum=1,
                                      allow_none=True))


def read_scheduler(reader: Reader, value: Any, line: int | None) -> Scheduler | None:
    """Parse ``search.scheduler``: ``{kind: asha, grace_period, reduction_factor}``, or null."""
    if value is None:
        return None
    reader.mapping(value, "search.scheduler", line, allowed=("kind", "grace_period", "reduction_factor"))
    kind = reader.string(value.get("kind"), "search.scheduler.kind", line_of(value, "kind") or line,
                         choices=SCHEDULERS)
    return Scheduler(
        kind=kind,
        grace_period=reader.integer(value.get("grace_period"), "search.scheduler.grace_period",
                                    line_of(value, "grace_period"), minimum=1, allow_none=True),
        reduction_factor=reader.integer(value.get("reduction_factor", 4), "search.scheduler.reduction_factor",
                                        line_of(value, "reduction_factor"), minimum=2))


def read_workload(reader: Reader, value: Any, line: int | None, *, base_dir: str,
                  model_path: str | None = None,
                  read_sample: bool = True) -> tuple[dict[str, Any], tuple[_Entry, ...] | None]:
    """Check ``workload:`` with :class:`autotune.space.workload.Workload` and return it as given,
    with its production sample parsed (None without one).

    ``autotune.space.workload`` owns the keys and defaults; the returned dict holds only the keys in
    the file, with a relative ``path`` or ``production_sample`` made absolute (trials run in other
    directories). The sample is read here, once (:func:`autotune.space.workload.read_production_sample`).

    Args:
        reader: Error helper.
        value: The raw section (None for all defaults).
        line: Its line.
        base_dir: Folder of the space file, for a relative ``path``.
        model_path: The target model, the tokenizer of a ``sglang:<dataset>`` source unless
            ``tokenizer`` names another.
        read_sample: Parse the production sample (False: None, the file left unread).
    """
    if value is None:
        value = {}
    reader.mapping(value, "workload", line)
    out = {key: (list(item) if isinstance(item, list) else item) for key, item in value.items()}
    for key in ("path", "production_sample"):  # trials and the summary read them from elsewhere
        path = out.get(key)
        if isinstance(path, str) and path:
            expanded = Path(path).expanduser()
            out[key] = str(expanded if expanded.is_absolute() else Path(base_dir) / expanded)
    if sglang_datasets.is_sglang_source(out.get("source")):
        tok = out.get("tokenizer")
        if tok is None:
            out["tokenizer"] = model_path
        elif isinstance(tok, str) and tok and (Path(base_dir) / Path(tok).expanduser()).exists():
            out["tokenizer"] = str(Path(base_dir) / Path(tok).expanduser())
    lines = {key: n for key in value if (n := line_of(value, key)) is not None}
    for key, item in value.items():  # list items by index: workload.concurrency[2]
        if isinstance(item, list):
            lines.update({f"{key}[{i}]": n for i in range(len(item))
                          if (n := line_of(item, i)) is not None})
    workload = Workload.from_spec(dict(out), file=reader.file, base_dir=base_dir, lines=lines)
    if not read_sample:
        return out, None
    return out, read_production_sample(workload, file=reader.file, line=lines.get("production_sample"))
