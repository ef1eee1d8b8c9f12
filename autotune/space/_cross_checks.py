"""The load-time checks of a search space that span sections, and the proof that its walk only
yields valid configs.

:mod:`autotune.space._build` reads each section on its own; once the space exists, these checks
look across sections (forbidden settings against fixed values and choices, conditions against the
parameters they name, speculation against the draft model, synthetic acceptance and fast_start
against the rest), put the parameters in dependency order and walk the space. They are the
:class:`CrossChecks` base of the builder, so they fail through its located ``fail``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from autotune._yaml_lines import key_line_of, line_of
from autotune.errors import ConfigError
from autotune.names import is_env_name
from autotune.space import synthetic
from autotune.space._expr import ORDER_OPS
from autotune.space._nccl import NCCL_BUNDLE, apply_kept, check_prescreen
from autotune.space._schema import env_text, is_int, is_number, show
from autotune.space._schema_measure import ROUND_METRICS
from autotune.space._schema_params import Parameter
from autotune.space.rules import (
    ALGO,
    ARG_IMPLIED_ENV,
    ATTENTION_ARGS,
    DRAFT,
    NEEDS_DRAFT_MODEL,
    STEPS,
    TOPK,
    TRIPLE,
)

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

#: Above this many combinations of the rule-relevant parameters, loading checks a sample.
_VERIFY_EXHAUSTIVE_LIMIT = 20000
_VERIFY_SAMPLES = 2000


class _RandomTrial:
    """Stands in for an Optuna trial when checking a space by random sampling."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self.rng.choice(choices)

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        return low + step * self.rng.randint(0, (high - low) // step)

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        if step is not None:
            return low + step * self.rng.randint(0, round((high - low) / step))
        if log:
            return math.exp(self.rng.uniform(math.log(low), math.log(high)))
        return self.rng.uniform(low, high)


class CrossChecks:
    """The cross-section checks, parameter order and walk proof of a freshly built space.

    The builder that inherits them provides ``fail(message, *, field, line)``.
    """

    def fail(self, message: str, *, field: str | None, line: int | None) -> NoReturn:
        """Raise a located ConfigError; the builder overrides this."""
        raise NotImplementedError

    def _check_sampler_objective(self, space: SearchSpace, data: Mapping[str, Any],
                                 lines: Mapping[str, int | None]) -> None:
        # The phase model predicts tok/s from the cycle's physics; it cannot rank by a latency.
        if space.search.sampler == "phase-model" and space.objective.metric != "output_tok_s":
            search = data.get("search") if isinstance(data.get("search"), Mapping) else {}
            self.fail(f"sampler phase-model models output tok/s, but the objective is "
                      f"{space.objective.metric}; use sampler tpe, random or grid, or the objective "
                      "output_tok_s (keep a latency bound as an SLO under constraints.slos)",
                      field="search.sampler", line=line_of(search, "sampler") or lines.get("search"))

    def _check_scheduler(self, space: SearchSpace, data: Mapping[str, Any],
                         lines: Mapping[str, int | None]) -> None:
        # A scheduler acts on the rounds a trial reports; without rounds it would never act.
        scheduler = space.search.scheduler
        if scheduler is None:
            return
        raw = data.get("search")
        search: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        where = line_of(search, "scheduler") or lines.get("search")
        rule = space.measure.sequential
        if rule is None:
            self.fail("search.scheduler acts on the rounds of trials measuring in rounds, but "
                      "measure.sequential is off (or measure.repeats is written); set measure.sequential: "
                      "true or remove search.scheduler", field="search.scheduler", line=where)
        if space.objective.metric not in ROUND_METRICS:
            self.fail(f"search.scheduler compares the rounds' readings of the objective, which rounds give "
                      f"only for {' or '.join(ROUND_METRICS)}; the objective is {space.objective.metric}",
                      field="search.scheduler", line=where)
        grace = scheduler.grace_period
        if grace is not None and grace > rule.max_rounds:
            self.fail(f"grace_period {grace} is beyond measure.sequential.max_rounds ({rule.max_rounds}): "
                      "the scheduler would never act; use a grace_period of at most max_rounds",
                      field="search.scheduler.grace_period",
                      line=line_of(search.get("scheduler") or {}, "grace_period") or where)

    def _nccl_prescreen(self, space: SearchSpace, data: Mapping[str, Any], line: int | None) -> None:
        settings = space.nccl_prescreen
        if settings is None:
            return
        check_prescreen(space, self.fail, line)
        if settings.kept:
            kept = (data.get("nccl_prescreen") or {}).get("kept")
            apply_kept(space, settings.kept, self.fail, lambda i: line_of(kept, i))

    def _param_line(self, data: Mapping[str, Any], name: str,
                    index: int | None = None) -> int | None:
        params = data.get("parameters")
        if index is not None and isinstance(params, dict):
            choices = params.get(name, {}).get("choices")
            if choices is not None:
                return line_of(choices, index)
        return key_line_of(params, name) if isinstance(params, dict) else None

    def _check_forbidden_static(self, space: SearchSpace, data: Mapping[str, Any]) -> None:
        """Fail on any fixed value or choice that would produce a forbidden setting."""
        fixed_args_raw = data.get("fixed_args") or {}
        fixed_env_raw = data.get("fixed_env") or {}
        for name, value in space.fixed_args.items():
            reason = space.forbidden_reason({name: value}, {})
            if reason is not None:
                self.fail(reason, field=f"fixed_args.{name}", line=line_of(fixed_args_raw, name))
        for name, value in space.fixed_env.items():
            if value is not None:
                reason = space.forbidden_reason({}, {name: env_text(value)})
                if reason is not None:
                    self.fail(reason, field=f"fixed_env.{name}",
                              line=line_of(fixed_env_raw, name))
        for p in space.parameters.values():
            fld = f"parameters.{p.name}"
            if p.type == "categorical":
                for index, choice in enumerate(p.choices or ()):
                    reason = self._forbidden_value(space, p.name, choice)
                    if reason is not None:
                        self.fail(f"choice {show(choice)} is forbidden: {reason}",
                                  field=f"{fld}.choices[{index}]",
                                  line=self._param_line(data, p.name, index))
                continue
            if p.name in space.forbidden.args or p.name in ARG_IMPLIED_ENV:
                for probe in (p.low, p.high):
                    reason = self._forbidden_value(space, p.name, probe)
                    if reason is not None:
                        self.fail(f"{p.name} is forbidden and cannot be searched: {reason}",
                                  field=fld, line=p.line)
            values = space.forbidden.env.get(p.name, ()) if p.is_env else ()
            if p.is_env and p.name in space.forbidden.env and values is None:
                self.fail(f"{p.name} is forbidden (forbidden.env) and cannot be searched",
                          field=fld, line=p.line)
            for text in values or ():
                try:
                    number = float(text)
                except ValueError:
                    continue
                if p.contains(int(number) if number.is_integer() and p.type == "int"
                              else number):
                    self.fail(f"the range includes {text}, which is forbidden for {p.name} "
                              "(forbidden.env)", field=fld, line=p.line)

    @staticmethod
    def _forbidden_value(space: SearchSpace, name: str, value: Any) -> str | None:
        if value is None:
            return None
        if is_env_name(name):
            return space.forbidden_reason({}, {name: env_text(value)})
        return space.forbidden_reason({name: value}, {})

    def _check_speculation(self, space: SearchSpace, data: Mapping[str, Any],
                           lines: Mapping[str, int | None]) -> None:
        algo_param = space.parameters.get(ALGO)
        possible = ([c for c in algo_param.choices or () if c is not None] if algo_param
                    else [space.fixed_args[ALGO]] if space.fixed_args.get(ALGO) else [])
        if not possible:
            where = (f"parameters.{ALGO}" if algo_param else "fixed_args")
            self.fail(f"speculation is never on: set {ALGO} in fixed_args (e.g. EAGLE3) or "
                      f"give it non-null choices in parameters", field=where,
                      line=algo_param.line if algo_param else lines.get("fixed_args")
                      or lines.get("parameters"))
        if any(a in NEEDS_DRAFT_MODEL for a in possible) and not space.draft_model_path:
            self.fail(f"{ALGO} {'/'.join(a for a in possible if a in NEEDS_DRAFT_MODEL)} "
                      "needs a draft model; set the top-level draft_model_path",
                      field="draft_model_path", line=None)
        draft = space.parameters.get(DRAFT)
        if draft is not None and draft.type != "int" and space.rules["draft_tokens_max"]:
            self.fail(f"{DRAFT} must be type int so its range can follow steps*topk+1 (rule "
                      "draft_tokens_max); or turn the rule off under rules:",
                      field=f"parameters.{DRAFT}.type", line=draft.line)
        named = [n for n in TRIPLE if n in space.parameters or n in space.fixed_args]
        derivable = (DRAFT not in named and space.rules["topk1_draft_tokens"]
                     and STEPS in named and TOPK in named and self._always_one(space, TOPK))
        if named and len(named) < 3 and not derivable:
            missing = [n for n in TRIPLE if n not in named]
            self.fail(f"SGLang needs {', '.join(TRIPLE)} all set or all unset; add "
                      f"{', '.join(missing)} to parameters or fixed_args",
                      field="parameters", line=lines.get("parameters"))

    def _check_synthetic(self, space: SearchSpace, line: int | None) -> None:
        """The acceptance model must decide the forced length of every speculative config alone."""
        model = space.synthetic_acceptance
        if model is None:
            return
        fld = "synthetic_acceptance"
        for where, names in (("fixed_env", space.fixed_env), ("parameters", space.parameters)):
            if synthetic.ENV in names:
                self.fail(f"{where} sets {synthetic.ENV}, which synthetic_acceptance derives for "
                          "each config; remove one of the two", field=fld, line=line)
        steps_high = self._highest(space, STEPS)
        for name in TRIPLE:
            if name not in space.parameters and name not in space.fixed_args and not (
                    name == DRAFT and space.rules["topk1_draft_tokens"]
                    and self._always_one(space, TOPK)):
                self.fail(f"needs {name} set in every speculative config (fixed_args or "
                          "parameters): the forced accept length follows the draft shape, and "
                          "SGLang's own pick is not known here", field=fld, line=line)
        if steps_high is not None and steps_high > len(model.rates):
            self.fail(f"rates name {len(model.rates)} draft positions, but "
                      f"speculative_num_steps goes up to {steps_high}; give one rate per "
                      "position", field=fld, line=line)

    @staticmethod
    def _highest(space: SearchSpace, name: str) -> int | None:
        p = space.parameters.get(name)
        if p is None:
            value = space.fixed_args.get(name)
            return int(value) if is_int(value) else None
        values = [v for v in p.values() if is_int(v)]
        return max(values) if values else None

    def _check_fast_start(self, space: SearchSpace, data: Mapping[str, Any]) -> None:
        """``measure.fast_start``: decode-throughput objectives only, and a flag that does it."""
        if not space.measure.fast_start:
            return
        from autotune.errors import LaunchArgsError
        from autotune.sglang import fast_start  # resolves flags through the SGLang in use (may import it)

        line = line_of(data.get("measure"), "fast_start")
        why = fast_start.refusal(space.objective.metric, [s.metric for s in space.constraints.slos])
        if why is None:
            try:
                args = fast_start.fast_start_args()
                clash = fast_start.conflicts(space.fixed_args)
            except LaunchArgsError as exc:
                self.fail(exc.message, field="measure.fast_start", line=line)
            clash += [f"a searched {name}" for name in args if name in space.parameters]
            if clash:
                why = (f"fast_start sets {', '.join(f'{k}={show(v)}' for k, v in args.items())} on every "
                       f"trial server, but the space has {', '.join(clash)}; keep one")
        if why is not None:
            self.fail(why, field="measure.fast_start", line=line)

    @staticmethod
    def _always_one(space: SearchSpace, name: str) -> bool:
        if name in space.fixed_args:
            return space.fixed_args[name] == 1
        p = space.parameters[name]
        values = p.values()
        return len(values) == 1 and values[0] == 1

    def _check_conditions(self, space: SearchSpace) -> None:
        for p in space.parameters.values():
            if p.when is None:
                continue
            fld = f"parameters.{p.name}.when"
            for term in p.when.terms:
                other = space.parameters.get(term.name)
                if other is None or other is p:
                    what = "itself" if other is p else f"unknown parameter {term.name!r}"
                    self.fail(f"condition refers to {what}; it may refer to other parameters: "
                              + (", ".join(n for n in space.parameters if n != p.name)
                                 or "(none)"), field=fld, line=p.when_line)
                if not p.is_speculative and other.is_speculative:
                    self.fail(f"a non-speculative parameter may not depend on {term.name}: "
                              "the no-speculation baseline must keep the same settings",
                              field=fld, line=p.when_line)
                self._check_term(term, other, fld, p.when_line)

    def _check_term(self, term: Any, other: Parameter, fld: str, line: int | None) -> None:
        if term.op in ORDER_OPS:
            numeric = other.type != "categorical" or all(
                is_number(c) for c in other.choices or () if c is not None)
            if not numeric:
                self.fail(f"'{term}' compares with {term.op} but {other.name} is not numeric",
                          field=fld, line=line)
            return
        if term.value is None:
            if other.type == "categorical" and None in (other.choices or ()):
                return
            self.fail(f"'{term}': {other.name} is never null ({other.describe()})",
                      field=fld, line=line)
        if not other.contains(term.value) and not (
                other.type != "categorical" and is_number(term.value)):
            self.fail(f"'{term}': {show(term.value)} is not a value of {other.name}; "
                      f"allowed: {other.describe()}", field=fld, line=line)

    def _order(self, space: SearchSpace) -> tuple[Parameter, ...]:
        """Parameters in an order where each comes after everything it depends on."""
        params = space.parameters
        deps: dict[str, set[str]] = {name: set() for name in params}
        for p in params.values():
            if p.when is not None:
                deps[p.name] |= set(p.when.names)
            if p.is_speculative and p.name != ALGO:
                deps[p.name].add(ALGO)
            if p.name == DRAFT:
                deps[p.name] |= {STEPS, TOPK}
            if p.name == TOPK:
                deps[p.name] |= set(ATTENTION_ARGS) | {"page_size"}
            if space.nccl_bundle is not None and p.name.startswith("NCCL_"):
                deps[p.name].add(NCCL_BUNDLE)  # derived from the kept candidate
            deps[p.name] &= set(params)
        placed: list[Parameter] = []
        done: set[str] = set()
        pending = list(params.values())
        while pending:
            ready = next((p for p in pending if deps[p.name] <= done), None)
            if ready is None:
                names = ", ".join(p.name for p in pending)
                self.fail(f"parameters depend on each other in a cycle (via when: conditions "
                          f"and the speculative rules) among: {names}",
                          field=f"parameters.{pending[0].name}", line=pending[0].line)
            placed.append(ready)
            done.add(ready.name)
            pending.remove(ready)
        return tuple(placed)

    def _verify(self, space: SearchSpace, line: int | None) -> None:
        """Prove at load time that the walk only produces valid configs."""
        relevant = {ALGO, *TRIPLE, *ATTENTION_ARGS, "page_size"}
        for p in space.parameters.values():
            if p.when is not None:
                relevant |= p.when.names
        sample = frozenset(relevant)
        valid = 0
        exhaustive = True
        for config, reason in space._walk(0, {}, sample):
            if reason is not None:
                self._invalid(config, reason, line)
            valid += 1
            if valid > _VERIFY_EXHAUSTIVE_LIMIT:
                exhaustive = False
                break
        if not exhaustive:
            rng = random.Random(0)
            for _ in range(_VERIFY_SAMPLES):
                try:
                    config = space.suggest(_RandomTrial(rng))
                except ConfigError as exc:
                    self.fail(exc.message, field=exc.field, line=exc.line)
                reason = space._check_final(config)
                if reason is not None:
                    self._invalid(config, reason, line)
        if valid == 0:
            self.fail("the space has no valid configuration", field="parameters", line=line)

    def _invalid(self, config: Mapping[str, Any], reason: str, line: int | None) -> None:
        shown = ", ".join(f"{k}={show(v)}" for k, v in config.items()) or "(no parameters)"
        self.fail(f"the space can produce a configuration that must be rejected ({shown}): "
                  f"{reason}. Narrow the ranges, add a when: condition, or change fixed_args",
                  field="parameters", line=line)
