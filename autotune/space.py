"""Search spaces: the declarative, validated description of what a search may try.

A space file (``search_spaces/*.yaml``, format in ``docs/search-spaces.md``) names the backend,
the model, fixed server arguments and environment, the searched parameters with their
conditions, forbidden settings, the workload, the objective, constraints and budget. Loading it
checks everything up front and fails with a :class:`~autotune.errors.ConfigError` that names the
file, line and field.

From a loaded :class:`SearchSpace`:

- :meth:`SearchSpace.suggest` is Optuna's define-by-run: it only asks for parameters whose
  conditions hold, derives values SGLang would force (topk 1 means draft tokens = steps + 1), and
  narrows the draft-token range to ``steps * topk + 1``, so it never proposes an invalid config;
- :meth:`SearchSpace.enumerate` yields every valid config of a gridded space;
- :meth:`SearchSpace.validate_config` re-checks any config (rules and forbidden settings);
- :meth:`SearchSpace.trial_config` turns a config into a :class:`TrialConfig` (server args and
  environment), and :meth:`SearchSpace.baseline_params` gives the matching no-speculation config.
"""

from __future__ import annotations

import math
import os
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from autotune._expr import ORDER_OPS, values_equal
from autotune._space_schema import (
    Budget,
    Constraints,
    Forbidden,
    Measure,
    Objective,
    Parameter,
    Reader,
    Resources,
    SearchSettings,
    check_arg_value,
    check_name,
    closest,
    env_text,
    is_env_name,
    is_int,
    is_number,
    items,
    join,
    read_budget,
    read_constraints,
    read_forbidden,
    read_measure,
    read_objective,
    read_parameter,
    read_resources,
    read_search,
    read_workload,
    show,
    type_name,
)
from autotune._yaml_lines import key_line_of, line_of, load_yaml_text
from autotune.errors import ConfigError

__all__ = ["RULES", "SearchSpace", "TrialConfig", "load_space", "BUILTIN_PROFILES"]

ALGO = "speculative_algorithm"
STEPS = "speculative_num_steps"
TOPK = "speculative_eagle_topk"
DRAFT = "speculative_num_draft_tokens"
TRIPLE = (STEPS, TOPK, DRAFT)
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
#: Algorithms that go through SGLang's EAGLE rules (all-or-none triple, topk 1 forcing).
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})
NEEDS_DRAFT_MODEL = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
BACKENDS = ("sglang", "sim")
BUILTIN_PROFILES = ("kimi-k2.5-eagle3-tp8", "llama-3.1-8b-eagle3-h100")
ATTENTION_ARGS = ("attention_backend", "decode_attention_backend", "prefill_attention_backend")
PAGED_TREE_BACKENDS = ("flashinfer", "fa3", "triton")
#: Server flags that make SGLang set environment variables itself.
ARG_IMPLIED_ENV = {"enable_symm_mem": {"NCCL_NVLS_ENABLE": "1"},
                   "enable_nccl_nvls": {"NCCL_NVLS_ENABLE": "1"}}
_RESERVED = {
    "model_path": "set the top-level model_path instead",
    "speculative_draft_model_path": "set the top-level draft_model_path instead",
    "host": "autotune binds each trial's server itself",
    "port": "autotune picks a free port for each trial",
}

#: Built-in rules, all on by default; ``rules: {name: false}`` turns one off.
RULES: dict[str, str] = {
    "topk1_draft_tokens": "speculative_eagle_topk == 1 sets speculative_num_draft_tokens to "
                          "steps + 1, as SGLang forces; the value is derived, not searched",
    "draft_tokens_max": "speculative_num_draft_tokens <= steps * topk + 1 (a draft tree has no "
                        "more nodes); the searched range follows steps and topk",
    "draft_tokens_min": "speculative_num_draft_tokens >= 2",
    "trtllm_mha_topk1": "attention backend trtllm_mha supports only topk 1, so topk is set to 1",
    "paged_tree_backends": "topk > 1 with page_size > 1 needs attention_backend flashinfer, fa3 "
                           "or triton; with another explicit backend topk is set to 1",
}

_TOP_KEYS = ("name", "description", "backend", "profile", "model_path", "draft_model_path",
             "fixed_args", "fixed_env", "parameters", "rules", "forbidden", "workload",
             "measure", "objective", "constraints", "budget", "resources", "search",
             "exclusive_node")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+\Z")
#: Above this many combinations of the rule-relevant parameters, loading checks a sample.
_VERIFY_EXHAUSTIVE_LIMIT = 20000
_VERIFY_SAMPLES = 2000

_SKIP, _SET, _CHOOSE, _INVALID = "skip", "set", "choose", "invalid"


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _plain(value: Any) -> Any:
    """Drop the line-tracking containers (for pickling and storing)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class TrialConfig:
    """Everything needed to launch one trial's server.

    Attributes:
        params: The searched values (derived ones included), keyed by parameter name.
        server_args: Full server arguments in ServerArgs underscore names: ``model_path``,
            fixed args, searched args, ``speculative_draft_model_path`` and ``tp_size``. With
            speculation off there is no ``speculative_*`` key at all.
        env: Environment variables to set (fixed_env plus searched env vars).
        unset_env: Environment variables that must be absent (a ``null`` choice or value).
        tp_size: GPUs the trial needs.
        backend: ``sglang`` or ``sim``.
        profile: Sim profile (a built-in name or an absolute path), None for sglang.
        model_path: Target model.
        draft_model_path: Draft model, None when speculation is off.
        is_baseline: True when speculation is off.
    """

    params: Mapping[str, Any]
    server_args: Mapping[str, Any]
    env: Mapping[str, str]
    unset_env: tuple[str, ...]
    tp_size: int
    backend: str
    profile: str | None
    model_path: str
    draft_model_path: str | None
    is_baseline: bool

    @property
    def is_speculative(self) -> bool:
        """True when speculation is on."""
        return not self.is_baseline

    def group_key(self) -> tuple:
        """Hashable key of everything but the speculative settings.

        Two configs with the same key share one no-speculation baseline.
        """
        args = tuple(sorted((k, _freeze(v)) for k, v in self.server_args.items()
                            if not k.startswith("speculative_")))
        return (self.backend, self.profile, args, tuple(sorted(self.env.items())),
                tuple(sorted(self.unset_env)))

    def describe(self) -> str:
        """Short ``name=value`` text of the searched values, for run names and logs."""
        if not self.params:
            return "baseline" if self.is_baseline else "fixed"
        return " ".join(f"{k}={show(v)}" for k, v in self.params.items())

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly copy."""
        out = asdict(self)
        out["unset_env"] = list(self.unset_env)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialConfig:
        """Inverse of :meth:`to_dict`."""
        values = dict(data)
        values["unset_env"] = tuple(values.get("unset_env", ()))
        return cls(**values)


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
            return low + step * self.rng.randint(0, int(round((high - low) / step)))
        if log:
            return math.exp(self.rng.uniform(math.log(low), math.log(high)))
        return self.rng.uniform(low, high)


@dataclass(eq=False)
class SearchSpace:
    """A loaded, validated search space. Build it with :func:`load_space` or :meth:`from_dict`.

    Attributes:
        name: Space name (the file stem unless given).
        file: Source file, for messages.
        backend: ``sglang`` or ``sim``.
        profile: Sim profile: built-in name or absolute path; None for sglang.
        model_path: Target model (path or hub id).
        draft_model_path: Draft model, or None.
        fixed_args: Server args applied to every trial (underscore names).
        fixed_env: Environment for every trial; None values mean "unset".
        parameters: Searched parameters by name, in file order.
        rules: Built-in rule name -> on/off.
        forbidden: Flags and env values no trial may use.
        workload: Complete workload settings for ``autotune.workload``.
        measure, objective, constraints, budget, resources, search: Their sections.
        exclusive_node: Whether a trial takes a whole node.
        description: Free text.
        raw: The file's content as plain data.
    """

    name: str
    file: str | None
    backend: str
    profile: str | None
    model_path: str
    draft_model_path: str | None
    fixed_args: dict[str, Any]
    fixed_env: dict[str, Any]
    parameters: dict[str, Parameter]
    rules: dict[str, bool]
    forbidden: Forbidden
    workload: dict[str, Any]
    measure: Measure
    objective: Objective
    constraints: Constraints
    budget: Budget
    resources: Resources
    search: SearchSettings
    exclusive_node: bool = False
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    lines: dict[str, int | None] = field(default_factory=dict, repr=False)
    _order: tuple[Parameter, ...] = field(default=(), repr=False)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_dict(cls, data: Any, *, file: str | os.PathLike[str] | None = None) -> SearchSpace:
        """Build and validate a space from parsed YAML (or any plain dict).

        Args:
            data: The file's content.
            file: Where it came from; relative paths in the space resolve against its folder.

        Raises:
            ConfigError: With file, line, field, what is wrong and what is allowed.
        """
        return _Builder(data, None if file is None else str(file)).build()

    # ------------------------------------------------------------------ the walk

    def _context(self, params: Mapping[str, Any]) -> dict[str, Any]:
        ctx = dict(self.fixed_args)
        ctx.update(params)
        return ctx

    def _forced_topk(self, ctx: Mapping[str, Any]) -> str | None:
        """Why topk must be 1 in this context, or None."""
        if self.rules["trtllm_mha_topk1"]:
            for arg in ATTENTION_ARGS:
                if ctx.get(arg) == "trtllm_mha":
                    return f"{arg} trtllm_mha supports only topk 1 (rule trtllm_mha_topk1)"
        page, backend = ctx.get("page_size"), ctx.get("attention_backend")
        if (self.rules["paged_tree_backends"] and is_int(page) and page > 1
                and backend is not None and backend not in PAGED_TREE_BACKENDS):
            return (f"page_size {page} with attention_backend {backend} supports only topk 1 "
                    "(rule paged_tree_backends)")
        return None

    def _step(self, p: Parameter, ctx: Mapping[str, Any]) -> tuple[str, Any]:
        """What happens to ``p`` given the values chosen so far.

        Returns ``(_SKIP, why)``, ``(_SET, value)`` for a derived value, ``(_CHOOSE, bounds)``
        with bounds None or a narrowed ``(low, high)``, or ``(_INVALID, why)``.
        """
        algo = ctx.get(ALGO)
        if p.is_speculative and p.name != ALGO and algo is None:
            return _SKIP, "speculation is off"
        if algo in EAGLE_FAMILY and p.name == DRAFT:
            steps, topk = ctx.get(STEPS), ctx.get(TOPK)
            if self.rules["topk1_draft_tokens"] and topk == 1 and is_int(steps):
                return _SET, steps + 1
        if algo in EAGLE_FAMILY and p.name == TOPK:
            why = self._forced_topk(ctx)
            if why is not None:
                return (_SET, 1) if p.contains(1) else (_INVALID, f"{why}, but 1 is not a "
                                                                  f"choice of {TOPK}")
        if p.when is not None and not p.when.holds(ctx):
            return _SKIP, f"its condition '{p.when}' does not hold"
        if algo in EAGLE_FAMILY and p.name == DRAFT and p.type == "int":
            return self._draft_bounds(p, ctx)
        return _CHOOSE, None

    def _draft_bounds(self, p: Parameter, ctx: Mapping[str, Any]) -> tuple[str, Any]:
        step = int(p.step or 1)
        low, high = int(p.low), int(p.high)
        if self.rules["draft_tokens_min"] and low < 2:
            low += step * -(-(2 - low) // step)
        steps, topk = ctx.get(STEPS), ctx.get(TOPK)
        tree = None
        if self.rules["draft_tokens_max"] and is_int(steps) and is_int(topk):
            tree = steps * topk + 1
            if tree < high:
                high = int(p.low) + step * ((tree - int(p.low)) // step)
        if high < low:
            return _INVALID, (f"no {DRAFT} in {p.describe()} fits 2 <= n <= steps*topk+1"
                              f" = {tree}")
        if (low, high) == (p.low, p.high):
            return _CHOOSE, None
        return _CHOOSE, (low, high)

    def _finish(self, params: dict[str, Any]) -> dict[str, Any]:
        """Add the derived draft-token count when it is not a parameter of its own."""
        ctx = self._context(params)
        if (ctx.get(ALGO) in EAGLE_FAMILY and DRAFT not in self.parameters
                and self.rules["topk1_draft_tokens"] and ctx.get(TOPK) == 1
                and is_int(ctx.get(STEPS))):
            params[DRAFT] = ctx[STEPS] + 1
        return params

    @staticmethod
    def _values(p: Parameter, bounds: tuple[int, int] | None) -> list[Any]:
        if bounds is None:
            return p.values()
        return list(range(bounds[0], bounds[1] + 1, int(p.step or 1)))

    @staticmethod
    def _contains(p: Parameter, bounds: tuple[int, int] | None, value: Any) -> bool:
        if not p.contains(value):
            return False
        return bounds is None or bounds[0] <= value <= bounds[1]

    def _walk(self, index: int, params: dict[str, Any],
              sample: frozenset[str] | None) -> Iterator[tuple[dict[str, Any], str | None]]:
        """Depth-first over all configs: (config, None) or (partial config, why invalid).

        With ``sample`` set, parameters outside it take only their first value (they cannot
        change validity), which keeps the load-time check small.
        """
        if index == len(self._order):
            done = self._finish(dict(params))
            yield done, self._check_final(done)
            return
        p = self._order[index]
        kind, info = self._step(p, self._context(params))
        if kind == _INVALID:
            yield dict(params), info
            return
        if kind == _SKIP:
            yield from self._walk(index + 1, params, sample)
            return
        if kind == _SET:
            values = [info]
        elif p.type == "float" and p.step is None:
            values = self._float_probes(p)
        else:
            values = self._values(p, info)
        if sample is not None and p.name not in sample:
            values = values[:1]
        for value in values:
            params[p.name] = value
            yield from self._walk(index + 1, params, sample)
        params.pop(p.name, None)

    def _float_probes(self, p: Parameter) -> list[float]:
        """Values of a continuous float worth checking: ends, middle, condition thresholds."""
        probes = {float(p.low), float(p.high), (p.low + p.high) / 2}
        for other in self.parameters.values():
            if other.when is not None:
                for term in other.when.terms:
                    if term.name == p.name and is_number(term.value):
                        for delta in (-1e-6, 0.0, 1e-6):
                            value = term.value + delta
                            if p.low <= value <= p.high:
                                probes.add(float(value))
        return sorted(probes)

    # ------------------------------------------------------------------ checks

    def _build(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str],
                                                         list[str]]:
        ctx = self._context(params)
        spec_on = ctx.get(ALGO) is not None
        args: dict[str, Any] = {"model_path": self.model_path}
        for name, value in self.fixed_args.items():
            if value is None or (not spec_on and name.startswith("speculative_")):
                continue
            args[name] = value
        env = {k: env_text(v) for k, v in self.fixed_env.items() if v is not None}
        unset = [k for k, v in self.fixed_env.items() if v is None]
        for name, value in params.items():
            if is_env_name(name):
                if value is None:
                    env.pop(name, None)
                    if name not in unset:
                        unset.append(name)
                else:
                    env[name] = env_text(value)
                    if name in unset:
                        unset.remove(name)
            elif value is None:
                args.pop(name, None)
            elif spec_on or not name.startswith("speculative_"):
                args[name] = value
        if spec_on and self.draft_model_path:
            args["speculative_draft_model_path"] = self.draft_model_path
        args.setdefault("tp_size", 1)
        return args, env, unset

    def _check_final(self, params: Mapping[str, Any]) -> str | None:
        """SGLang's rules, the built-in rules and the forbidden lists on a complete config."""
        ctx = self._context(params)
        algo = ctx.get(ALGO)
        if algo is not None:
            if algo in NEEDS_DRAFT_MODEL and not self.draft_model_path:
                return f"{ALGO} {algo} needs draft_model_path"
            if algo in EAGLE_FAMILY:
                reason = self._check_triple(ctx)
                if reason is not None:
                    return reason
        args, env, _ = self._build(params)
        return self._check_forbidden(args, env)

    def _check_triple(self, ctx: Mapping[str, Any]) -> str | None:
        present = [n for n in TRIPLE if ctx.get(n) is not None]
        if 0 < len(present) < 3:
            missing = [n for n in TRIPLE if n not in present]
            return (f"SGLang needs {', '.join(TRIPLE)} all set or all unset; "
                    f"{', '.join(missing)} would be unset")
        if not present:
            return None
        steps, topk, draft = (ctx[n] for n in TRIPLE)
        if not all(is_int(v) and v >= 1 for v in (steps, topk, draft)):
            return f"{', '.join(TRIPLE)} must be integers >= 1"
        if self.rules["topk1_draft_tokens"] and topk == 1 and draft != steps + 1:
            return (f"{DRAFT}={draft} but topk 1 makes it steps + 1 = {steps + 1} "
                    "(rule topk1_draft_tokens)")
        if self.rules["draft_tokens_max"] and draft > steps * topk + 1:
            return (f"{DRAFT}={draft} > steps*topk+1 = {steps * topk + 1} "
                    "(rule draft_tokens_max)")
        if self.rules["draft_tokens_min"] and draft < 2:
            return f"{DRAFT}={draft} < 2 (rule draft_tokens_min)"
        if topk != 1:
            why = self._forced_topk(ctx)
            if why is not None:
                return f"{TOPK}={topk}, but {why}"
        return None

    def _check_forbidden(self, args: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
        for name in self.forbidden.args:
            if args.get(name) not in (None, False):
                return f"{name}={show(args[name])} is forbidden (forbidden.args)"
        for name, values in self.forbidden.env.items():
            if name in env and (values is None or env[name] in values):
                return f"{name}={env[name]} is forbidden (forbidden.env)"
            for arg, implied in ARG_IMPLIED_ENV.items():
                value = implied.get(name)
                if (value is not None and args.get(arg) not in (None, False)
                        and (values is None or value in values)):
                    return (f"{arg} makes SGLang set {name}={value}, which is forbidden "
                            "(forbidden.env)")
        return None

    def _resolve(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
        """Replay the walk on given values: fill derived values, report the first problem."""
        if not isinstance(params, Mapping):
            return {}, f"a config must be a mapping of parameter names to values, got " \
                       f"{type_name(params)}"
        given = dict(params)
        resolved: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        if ALGO in given and given[ALGO] is None and ALGO not in self.parameters:
            resolved[ALGO] = None  # a baseline of a space whose algorithm is fixed
        for p in self._order:
            kind, info = self._step(p, self._context(resolved))
            value = given.get(p.name)
            if kind == _INVALID:
                return resolved, info
            if kind == _SKIP:
                skipped[p.name] = info
                continue
            if kind == _SET:
                if p.name in given and not values_equal(value, info):
                    return resolved, f"{p.name} must be {show(info)} here, got {show(value)}"
                resolved[p.name] = info
                continue
            if p.name == ALGO and p.name in given and value is None:
                resolved[ALGO] = None  # the baseline, whether or not null is a choice
                continue
            if p.name not in given:
                if p.type == "categorical" and None in (p.choices or ()):
                    resolved[p.name] = None
                    continue
                return resolved, f"missing parameter {p.name} ({p.describe()})"
            if not self._contains(p, info, value):
                narrowed = f" (narrowed to [{info[0]}, {info[1]}] here)" if info else ""
                return resolved, (f"{p.name}={show(value)} is not allowed; allowed: "
                                  f"{p.describe()}{narrowed}")
            resolved[p.name] = value
        resolved = self._finish(resolved)
        for name, value in given.items():
            if name in resolved:
                if not values_equal(resolved[name], value):
                    return resolved, (f"{name} must be {show(resolved[name])} here, got "
                                      f"{show(value)}")
            elif name in skipped:
                if value is not None:
                    return resolved, f"{name} must not be set: {skipped[name]}"
            elif not (name == ALGO and value is None):
                return resolved, (f"unknown parameter {name!r}{closest(str(name), self.parameters)}"
                                  f"; parameters: {', '.join(self.parameters) or '(none)'}")
        return resolved, self._check_final(resolved)

    # ------------------------------------------------------------------ public API

    def validate_config(self, params: Mapping[str, Any]) -> str | None:
        """Check a config against conditions, rules and forbidden lists.

        Args:
            params: Parameter values (as :meth:`suggest` returns; derived values may be left
                out). ``{"speculative_algorithm": None, ...}`` is the baseline.

        Returns:
            None when valid, else why not.
        """
        return self._resolve(params)[1]

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Optuna define-by-run: ask ``trial`` for each active parameter.

        Parameters whose ``when`` fails, or speculative ones with speculation off, are not
        asked; values SGLang forces are set without asking; the draft-token range is narrowed
        to ``steps * topk + 1``.

        Args:
            trial: An ``optuna.Trial`` (anything with ``suggest_int/float/categorical``).

        Returns:
            The config, derived values included.
        """
        params: dict[str, Any] = {}
        for p in self._order:
            kind, info = self._step(p, self._context(params))
            if kind == _SKIP:
                continue
            if kind == _SET:
                params[p.name] = info
            elif kind == _INVALID:
                # Loading checked the space, so only a sampled (very large) space gets here.
                raise ConfigError(f"the space produced an invalid configuration {params}: {info}",
                                  file=self.file, line=p.line, field=join("parameters", p.name))
            elif p.type == "categorical":
                params[p.name] = trial.suggest_categorical(p.name, list(p.choices or ()))
            elif p.type == "int":
                low, high = info if info is not None else (int(p.low), int(p.high))
                params[p.name] = trial.suggest_int(p.name, low, high, step=int(p.step or 1),
                                                   log=p.log)
            else:
                params[p.name] = trial.suggest_float(p.name, float(p.low), float(p.high),
                                                     step=p.step, log=p.log)
        return self._finish(params)

    def enumerate(self) -> Iterator[dict[str, Any]]:
        """Every valid config, depth-first in parameter order.

        Raises:
            ConfigError: When a float parameter has no step (no grid).
        """
        for p in self.parameters.values():
            if p.type == "float" and p.step is None:
                raise ConfigError("a float parameter needs a step to be enumerated",
                                  file=self.file, line=p.line,
                                  field=join("parameters", p.name) + ".step")
        for config, reason in self._walk(0, {}, None):
            if reason is None:
                yield config

    def count(self) -> int:
        """Number of valid configs (enumerates them)."""
        return sum(1 for _ in self.enumerate())

    def is_speculative(self, params: Mapping[str, Any]) -> bool:
        """Whether speculation is on in this config."""
        return self._context(params).get(ALGO) is not None

    def baseline_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The same non-speculative settings with speculation off."""
        out = {k: v for k, v in params.items() if not k.startswith("speculative_")}
        out[ALGO] = None
        return out

    def trial_config(self, params: Mapping[str, Any]) -> TrialConfig:
        """Resolve a config into launchable server args and environment.

        Raises:
            ConfigError: When the config is invalid (the reason is the message).
        """
        resolved, reason = self._resolve(params)
        if reason is not None:
            raise ConfigError(f"invalid configuration: {reason}", file=self.file,
                              field="parameters")
        args, env, unset = self._build(resolved)
        speculative = self.is_speculative(resolved)
        return TrialConfig(
            params=resolved, server_args=args, env=env, unset_env=tuple(unset),
            tp_size=int(args["tp_size"]), backend=self.backend, profile=self.profile,
            model_path=self.model_path,
            draft_model_path=self.draft_model_path if speculative else None,
            is_baseline=not speculative)

    def tp_sizes(self) -> tuple[int, ...]:
        """Every tp_size a trial of this space may use (sorted)."""
        p = self.parameters.get("tp_size")
        if p is None:
            return (int(self.fixed_args.get("tp_size") or 1),)
        return tuple(sorted({int(v) if v is not None else 1 for v in p.values()}))

    def check_paths(self) -> None:
        """Check that the files a run needs exist; call it before starting any server.

        The sglang backend needs local model and draft weights (hub ids like ``org/name``
        pass); both backends need a jsonl or sharegpt workload file.

        Raises:
            ConfigError: Naming the missing path, its field and line.
        """
        if self.backend == "sglang":
            checks = [("model_path", self.model_path)]
            if self.draft_model_path and self._can_speculate():
                checks.append(("draft_model_path", self.draft_model_path))
            for key, path in checks:
                looks_local = (path.startswith(("/", "./", "../", "~")) or "CHANGE-ME" in path
                               or not _HUB_ID.match(path))
                if looks_local and not Path(path).expanduser().exists():
                    raise ConfigError(
                        f"{key} {path} does not exist; point it at the model weights on this "
                        "machine (or use backend: sim for a dry run)", file=self.file,
                        line=self.lines.get(key), field=key)
        path = self.workload.get("path")
        if path is not None and not Path(path).exists():
            raise ConfigError(f"workload path {path} does not exist", file=self.file,
                              line=self.lines.get("workload.path"), field="workload.path")

    def _can_speculate(self) -> bool:
        p = self.parameters.get(ALGO)
        if p is not None:
            return any(c is not None for c in p.choices or ())
        return self.fixed_args.get(ALGO) is not None

    def coerce_params(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Turn command-line strings (``"3"``, ``"null"``, ``"true"``) into typed values.

        Strings are read as YAML scalars, except for parameters whose choices are strings
        (``"1"`` stays a string for an env var with string choices).
        """
        out: dict[str, Any] = {}
        for name, value in raw.items():
            p = self.parameters.get(name)
            if isinstance(value, str) and not (p is not None and p.type == "categorical"
                                               and value in (p.choices or ())):
                try:
                    value = load_yaml_text(value)
                except ConfigError:
                    pass
            out[name] = value
        return out


# ---------------------------------------------------------------------------- building


class _Builder:
    """Reads a whole file and runs the cross-section checks."""

    def __init__(self, data: Any, file: str | None) -> None:
        self.data = data
        self.file = file
        self.reader = Reader(file)
        self.base = Path(file).resolve().parent if file else Path.cwd()

    def fail(self, message: str, *, field: str | None, line: int | None) -> None:
        self.reader.fail(message, field=field, line=line)

    def resolve(self, path: str) -> str:
        expanded = Path(path).expanduser()
        return str(expanded if expanded.is_absolute() else (self.base / expanded).resolve())

    def build(self) -> SearchSpace:
        data = self.data
        if data is None:
            self.fail("the file is empty; a search space needs at least model_path and "
                      "parameters", field=None, line=None)
        r = self.reader
        r.mapping(data, "", 1 if hasattr(data, "key_lines") else None, allowed=_TOP_KEYS)
        lines = {key: line_of(data, key) for key in data}

        backend = r.string(data.get("backend", "sglang"), "backend", lines.get("backend"),
                           choices=BACKENDS)
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
                                 resolve=self.resolve)
        if isinstance(data.get("workload"), dict):
            lines["workload.path"] = line_of(data["workload"], "path")
        name = data.get("name", Path(self.file).stem if self.file else "space")
        description = data.get("description", "")
        r.string(name, "name", lines.get("name"))
        if not isinstance(description, str):
            self.fail(f"must be a string, got {type_name(description)}", field="description",
                      line=lines.get("description"))

        space = SearchSpace(
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
            description=description, raw=_plain(data), lines=lines)
        self._check_forbidden_static(space, data)
        self._check_speculation(space, data, lines)
        self._check_conditions(space)
        space._order = self._order(space)
        self._verify(space, lines.get("parameters"))
        return space

    # -- sections

    def _profile(self, backend: str, value: Any, line: int | None) -> str | None:
        if backend != "sim":
            if value is not None:
                self.fail("profile is only for backend: sim", field="profile", line=line)
            return None
        builtins = sorted(set(BUILTIN_PROFILES) | {
            p.stem for p in (Path(__file__).parent / "sim" / "profiles").glob("*.yaml")})
        if value is None:
            self.fail("backend sim needs a profile: a built-in name (" + ", ".join(builtins)
                      + ") or a path to a profile YAML", field="profile", line=line)
        name = self.reader.string(value, "profile", line)
        if "/" in name or name.endswith((".yaml", ".yml")):
            path = self.resolve(name)
            if not Path(path).is_file():
                self.fail(f"profile file {path} does not exist", field="profile", line=line)
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
            if name in _RESERVED:
                self.fail(f"{name} cannot be a fixed arg: {_RESERVED[name]}", field=fld,
                          line=key_line_of(value, name))
            check_arg_value(self.reader, name, item, fld, iline)
            out[name] = _plain(item)
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
            if isinstance(name, str) and name in _RESERVED:
                self.fail(f"{name} cannot be searched: {_RESERVED[name]}", field=fld,
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
    def _forbidden_value(space: SearchSpace, name: str, value: Any) -> str | None:
        if value is None:
            return None
        if is_env_name(name):
            return space._check_forbidden({}, {name: env_text(value)})
        return space._check_forbidden({name: value}, {})

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

    @staticmethod
    def _always_one(space: SearchSpace, name: str) -> bool:
        if name in space.fixed_args:
            return space.fixed_args[name] == 1
        p = space.parameters[name]
        return p.values() == [1]

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
                                 or "(none)"), field=fld, line=p.line)
                if not p.is_speculative and other.is_speculative:
                    self.fail(f"a non-speculative parameter may not depend on {term.name}: "
                              "the no-speculation baseline must keep the same settings",
                              field=fld, line=p.line)
                self._check_term(term, other, fld, p.line)

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
        checked = 0
        exhaustive = True
        for config, reason in space._walk(0, {}, sample):
            checked += 1
            if reason is not None:
                self._invalid(config, reason, line)
            valid += 1
            if checked > _VERIFY_EXHAUSTIVE_LIMIT:
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


def load_space(path: str | os.PathLike[str]) -> SearchSpace:
    """Load and validate a search-space YAML file.

    Args:
        path: The file.

    Returns:
        The space.

    Raises:
        ConfigError: When the file cannot be read, is not valid YAML, or is not a valid space;
            the error names the file, line and field.
    """
    name = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the search space: {exc.strerror or exc}",
                          file=name) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                          file=name) from None
    return SearchSpace.from_dict(load_yaml_text(text, file=name), file=name)
