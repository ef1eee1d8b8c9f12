"""Building a :class:`~autotune.space.search_space.SearchSpace` from parsed YAML: sections, cross-checks,
parameter order and the load-time proof that the space only yields valid configs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.space._expr import ORDER_OPS
from autotune.space._nccl import NCCL_BUNDLE, apply_kept, check_prescreen
from autotune.space.rules import (
    ALGO,
    ARG_IMPLIED_ENV,
    ATTENTION_ARGS,
    DRAFT,
    NEEDS_DRAFT_MODEL,
    RESERVED,
    RULES,
    SPEC_ALGORITHMS,
    STEPS,
    TOPK,
    TRIPLE,
)
from autotune.space._schema import (
    Parameter,
    Reader,
    check_arg_value,
    check_name,
    closest,
    env_text,
    is_env_name,
    is_int,
    is_number,
    items,
    read_budget,
    read_constraints,
    read_forbidden,
    read_measure,
    read_nccl_prescreen,
    read_objective,
    read_parameter,
    read_resources,
    read_search,
    read_workload,
    show,
    type_name,
)
from autotune._yaml_lines import key_line_of, line_of
from autotune.errors import ConfigError
from autotune.sglang.backend import BACKENDS, get_backend
from autotune.sim.profile import builtin_profiles, load_profile
from autotune.space import synthetic

_TOP_KEYS = ("name", "description", "backend", "profile", "model_path", "draft_model_path",
             "fixed_args", "fixed_env", "parameters", "rules", "forbidden", "workload",
             "measure", "objective", "constraints", "budget", "resources", "search",
             "exclusive_node", "nccl_prescreen", "synthetic_acceptance")
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


def plain(value: Any) -> Any:
    """Drop the line-tracking containers (for pickling and storing)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def build_space(cls: type, data: Any, file: str | None) -> Any:
    """Validate ``data`` and return ``cls(...)`` (a SearchSpace).

    Raises:
        ConfigError: With file, line, field, what is wrong and what is allowed.
    """
    return _Builder(cls, data, file).build()


class _Builder:
    """Reads a whole file and runs the cross-section checks."""

    def __init__(self, cls: type, data: Any, file: str | None) -> None:
        self.cls = cls
        self.data = data
        self.file = file
        self.reader = Reader(file)
        self.base = Path(file).resolve().parent if file else Path.cwd()

    def fail(self, message: str, *, field: str | None, line: int | None) -> None:
        self.reader.fail(message, field=field, line=line)

    def resolve(self, path: str) -> str:
        expanded = Path(path).expanduser()
        return str(expanded if expanded.is_absolute() else (self.base / expanded).resolve())

    def build(self) -> Any:
        data = self.data
        if data is None:
            self.fail("the file is empty; a search space needs at least model_path and "
                      "parameters", field=None, line=None)
        r = self.reader
        r.mapping(data, "", 1 if hasattr(data, "key_lines") else None, allowed=_TOP_KEYS)
        # Section-level errors point at the section's key, not at its first entry.
        lines = {key: key_line_of(data, key) for key in data}

        backend = r.string(data.get("backend", "sglang"), "backend", lines.get("backend"),
                           choices=tuple(BACKENDS))
        profile = self._profile(backend, data.get("profile"), lines.get("profile"))
        if "model_path" not in data:
            self.fail("missing required key 'model_path' (the target model)",
                      field="model_path", line=None)
        model_path = self._model_path(r.string(data["model_path"], "model_path",
                                               lines.get("model_path")))
        draft = r.string(data.get("draft_model_path"), "draft_model_path",
                         lines.get("draft_model_path"), allow_none=True)
        draft = None if draft is None else self._model_path(draft)

        fixed_args = self._fixed_args(data.get("fixed_args"), lines.get("fixed_args"))
        fixed_env = self._fixed_env(data.get("fixed_env"), lines.get("fixed_env"))
        parameters = self._parameters(data.get("parameters"), lines.get("parameters"),
                                      fixed_args)
        rules = self._rules(data.get("rules"), lines.get("rules"))
        forbidden = read_forbidden(r, data.get("forbidden"), lines.get("forbidden"))
        workload = read_workload(r, data.get("workload"), lines.get("workload"),
                                 base_dir=str(self.base))
        name = data.get("name", Path(self.file).stem if self.file else "space")
        description = data.get("description", "")
        r.string(name, "name", lines.get("name"))
        if not isinstance(description, str):
            self.fail(f"must be a string, got {type_name(description)}", field="description",
                      line=lines.get("description"))

        space = self.cls(
            name=name, file=self.file, backend=backend, profile=profile,
            model_path=model_path, draft_model_path=draft, fixed_args=fixed_args,
            fixed_env=fixed_env, parameters=parameters, rules=rules, forbidden=forbidden,
            workload=workload,
            measure=read_measure(r, data.get("measure"), lines.get("measure")),
            objective=read_objective(r, data.get("objective"), lines.get("objective")),
            constraints=read_constraints(r, data.get("constraints"), lines.get("constraints")),
            budget=read_budget(r, data.get("budget"), lines.get("budget")),
            resources=read_resources(r, data.get("resources"), lines.get("resources")),
            search=read_search(r, data.get("search"), lines.get("search")),
            exclusive_node=r.boolean(data.get("exclusive_node", False), "exclusive_node",
                                     lines.get("exclusive_node")),
            description=description, raw=plain(data), lines=lines,
            nccl_prescreen=read_nccl_prescreen(r, data.get("nccl_prescreen"),
                                               lines.get("nccl_prescreen")),
            synthetic_acceptance=self._synthetic(data, lines))
        self._nccl_prescreen(space, data, lines.get("nccl_prescreen"))
        self._check_forbidden_static(space, data)
        self._check_conditions(space)
        self._check_speculation(space, data, lines)
        self._check_fast_start(space, data)
        self._check_synthetic(space, lines.get("synthetic_acceptance"))
        self._check_sampler_objective(space, data, lines)
        space._order = self._order(space)
        self._verify(space, lines.get("parameters"))
        return space

    def _check_sampler_objective(self, space: Any, data: Mapping[str, Any],
                                 lines: Mapping[str, int | None]) -> None:
        # The phase model predicts tok/s from the cycle's physics; it cannot rank by a latency.
        if space.search.sampler == "phase-model" and space.objective.metric != "output_tok_s":
            search = data.get("search") if isinstance(data.get("search"), Mapping) else {}
            self.fail(f"sampler phase-model models output tok/s, but the objective is "
                      f"{space.objective.metric}; use sampler tpe, random or grid, or the objective "
                      "output_tok_s (keep a latency bound as an SLO under constraints.slos)",
                      field="search.sampler", line=line_of(search, "sampler") or lines.get("search"))

    # -- sections

    def _profile(self, backend: str, value: Any, line: int | None) -> str | None:
        if not get_backend(backend).emulated:
            if value is not None:
                self.fail("profile is only for backend: sim", field="profile", line=line)
            return None
        builtins = builtin_profiles()
        if value is None:
            self.fail("backend sim needs a profile: a built-in name (" + ", ".join(builtins)
                      + ") or a path to a profile YAML", field="profile", line=line)
        name = self.reader.string(value, "profile", line)
        if "/" in name or name.endswith((".yaml", ".yml")):
            path = self.resolve(name)
            if not Path(path).is_file():
                self.fail(f"profile file {path} does not exist", field="profile", line=line)
            try:
                load_profile(path)  # a bad profile fails now, not in the first trial
            except ConfigError as exc:
                self.fail(f"invalid profile: {exc}", field="profile", line=line)
            except (ValueError, TypeError) as exc:
                self.fail(f"invalid profile {path}: {exc}", field="profile", line=line)
            return path
        if name not in builtins:
            self.fail(f"unknown built-in profile {name!r}{closest(name, builtins)}; allowed: "
                      + ", ".join(builtins) + ", or a path to a profile YAML",
                      field="profile", line=line)
        return name

    def _model_path(self, value: str) -> str:
        if value.startswith(("./", "../", "~")):
            return self.resolve(value)
        return value

    def _fixed_args(self, value: Any, line: int | None) -> dict[str, Any]:
        if value is None:
            return {}
        self.reader.mapping(value, "fixed_args", line)
        out: dict[str, Any] = {}
        for name, item, fld, iline in items(value, "fixed_args"):
            check_name(self.reader, name, fld, key_line_of(value, name))
            if is_env_name(name):
                self.fail(f"{name} is an environment variable; put it under fixed_env",
                          field=fld, line=key_line_of(value, name))
            if name in RESERVED:
                self.fail(f"{name} cannot be a fixed arg: {RESERVED[name]}", field=fld,
                          line=key_line_of(value, name))
            check_arg_value(self.reader, name, item, fld, iline)
            out[name] = plain(item)
        for name in TRIPLE + ("tp_size",):
            item = out.get(name)
            if item is not None and item < 1:
                self.fail(f"must be >= 1, got {item}", field=f"fixed_args.{name}",
                          line=line_of(value, name))
        if ALGO in out:
            self._check_algorithm(out[ALGO], f"fixed_args.{ALGO}", line_of(value, ALGO))
        return out

    def _fixed_env(self, value: Any, line: int | None) -> dict[str, Any]:
        if value is None:
            return {}
        self.reader.mapping(value, "fixed_env", line)
        out: dict[str, Any] = {}
        for name, item, fld, iline in items(value, "fixed_env"):
            if not is_env_name(name):
                self.fail(f"environment variable names are UPPER_CASE, got {name!r}; server "
                          "arguments go under fixed_args", field=fld,
                          line=key_line_of(value, name))
            check_arg_value(self.reader, name, item, fld, iline)
            out[name] = item
        return out

    def _parameters(self, value: Any, line: int | None,
                    fixed_args: Mapping[str, Any]) -> dict[str, Parameter]:
        if value is None:
            return {}
        self.reader.mapping(value, "parameters", line)
        out: dict[str, Parameter] = {}
        for name, spec, fld, pline in items(value, "parameters"):
            kline = key_line_of(value, name)
            if isinstance(name, str) and name in RESERVED:
                self.fail(f"{name} cannot be searched: {RESERVED[name]}", field=fld,
                          line=kline)
            param = read_parameter(self.reader, name, spec, fld, kline)
            if name in fixed_args:
                self.fail(f"{name} is both a parameter and in fixed_args; keep one",
                          field=fld, line=kline)
            self._check_param_values(param, spec, fld)
            out[name] = param
        return out

    def _check_param_values(self, p: Parameter, spec: Mapping[str, Any], fld: str) -> None:
        if p.name in TRIPLE or p.name == "tp_size":
            if p.type == "float":
                self.fail(f"{p.name} takes integers; use type: int", field=f"{fld}.type",
                          line=line_of(spec, "type"))
            if p.type == "int" and p.low < 1:
                self.fail(f"must be >= 1, got {p.low}", field=f"{fld}.low",
                          line=line_of(spec, "low"))
            for index, choice in enumerate(p.choices or ()):
                bad = (not is_int(choice) or choice < 1) if p.name in TRIPLE else \
                    (choice is not None and (not is_int(choice) or choice < 1))
                if bad:
                    wanted = "an integer >= 1" + ("" if p.name in TRIPLE else " or null")
                    why = (f"; SGLang needs {', '.join(TRIPLE)} all set or all unset"
                           if choice is None else "")
                    self.fail(f"each choice must be {wanted}, got {show(choice)}{why}",
                              field=f"{fld}.choices[{index}]",
                              line=line_of(spec["choices"], index))
        if p.name == ALGO:
            for index, choice in enumerate(p.choices or ()):
                if choice is not None:
                    self._check_algorithm(choice, f"{fld}.choices[{index}]",
                                          line_of(spec["choices"], index))

    def _check_algorithm(self, value: Any, fld: str, line: int | None) -> None:
        if value not in SPEC_ALGORITHMS:
            self.fail(f"unknown speculative algorithm {show(value)}"
                      f"{closest(str(value).upper(), SPEC_ALGORITHMS)}; allowed: "
                      + ", ".join(SPEC_ALGORITHMS) + " (or null for off, in choices)",
                      field=fld, line=line)

    def _rules(self, value: Any, line: int | None) -> dict[str, bool]:
        rules = {name: True for name in RULES}
        if value is None:
            return rules
        self.reader.mapping(value, "rules", line, allowed=RULES)
        for name, item, fld, iline in items(value, "rules"):
            rules[name] = self.reader.boolean(item, fld, iline)
        return rules

    # -- cross-section checks

    def _nccl_prescreen(self, space: Any, data: Mapping[str, Any], line: int | None) -> None:
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

    def _check_forbidden_static(self, space: Any, data: Mapping[str, Any]) -> None:
        """Fail on any fixed value or choice that would produce a forbidden setting."""
        fixed_args_raw = data.get("fixed_args") or {}
        fixed_env_raw = data.get("fixed_env") or {}
        for name, value in space.fixed_args.items():
            reason = space._check_forbidden({name: value}, {})
            if reason is not None:
                self.fail(reason, field=f"fixed_args.{name}", line=line_of(fixed_args_raw, name))
        for name, value in space.fixed_env.items():
            if value is not None:
                reason = space._check_forbidden({}, {name: env_text(value)})
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
    def _forbidden_value(space: Any, name: str, value: Any) -> str | None:
        if value is None:
            return None
        if is_env_name(name):
            return space._check_forbidden({}, {name: env_text(value)})
        return space._check_forbidden({name: value}, {})

    def _check_speculation(self, space: Any, data: Mapping[str, Any],
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

    def _synthetic(self, data: Mapping[str, Any],
                   lines: Mapping[str, int | None]) -> synthetic.AcceptanceModel | None:
        if data.get("synthetic_acceptance") is None:
            return None
        value = data["synthetic_acceptance"]
        line = lines.get("synthetic_acceptance")
        if isinstance(value, Mapping) and "rates" in value:
            line = line_of(value, "rates") or line
        try:
            return synthetic.model_from_section(value)
        except ValueError as exc:
            self.fail(f"{exc}; e.g. synthetic_acceptance: {{rates: [0.8, 0.7, 0.6]}}",
                      field="synthetic_acceptance", line=line)

    def _check_synthetic(self, space: Any, line: int | None) -> None:
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
    def _highest(space: Any, name: str) -> int | None:
        p = space.parameters.get(name)
        if p is None:
            value = space.fixed_args.get(name)
            return int(value) if is_int(value) else None
        values = [v for v in p.values() if is_int(v)]
        return max(values) if values else None

    def _check_fast_start(self, space: Any, data: Mapping[str, Any]) -> None:
        """``measure.fast_start``: decode-throughput objectives only, and a flag that does it."""
        if not space.measure.fast_start:
            return
        from autotune.sglang import fast_start  # resolves flags through the SGLang in use (may import it)
        from autotune.errors import LaunchArgsError

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
    def _always_one(space: Any, name: str) -> bool:
        if name in space.fixed_args:
            return space.fixed_args[name] == 1
        p = space.parameters[name]
        values = p.values()
        return len(values) == 1 and values[0] == 1

    def _check_conditions(self, space: Any) -> None:
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

    def _order(self, space: Any) -> tuple[Parameter, ...]:
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

    def _verify(self, space: Any, line: int | None) -> None:
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
