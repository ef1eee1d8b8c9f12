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

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.space._expr import values_equal
from autotune.space._build import build_space
from autotune.space._nccl import NCCL_BUNDLE, infer_candidate
from autotune.space.rules import (
    ALGO,
    ARG_IMPLIED_ENV,
    ATTENTION_ARGS,
    DRAFT,
    EAGLE_FAMILY,
    NEEDS_DRAFT_MODEL,
    PAGED_TREE_BACKENDS,
    RULES,
    STEPS,
    TOPK,
    TRIPLE,
)
from autotune.names import is_env_name
from autotune.space._schema import closest, env_text, is_int, is_number, join, show, type_name
from autotune.space._schema_names import Forbidden, is_speculation_only
from autotune.space._schema_params import Parameter
from autotune.space._schema_sections import (
    Budget,
    Constraints,
    Measure,
    NcclPrescreen,
    Objective,
    Resources,
    SearchSettings,
)
from autotune._yaml_lines import load_yaml_text
from autotune.space.synthetic import ENV as SYNTHETIC_ENV, AcceptanceModel, forced_value
from autotune.errors import ConfigError

__all__ = ["ALGO", "DRAFT", "EAGLE_FAMILY", "RULES", "STEPS", "TOPK", "TRIPLE", "SearchSpace",
           "TrialConfig", "load_space"]

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+\Z")

_SKIP, _SET, _CHOOSE, _INVALID = "skip", "set", "choose", "invalid"


def freeze(value: Any) -> Any:
    """A hashable copy of a parameter value (lists and mappings become sorted tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


def config_key(params: Mapping[str, Any]) -> tuple:
    """Hashable identity of a config; a parameter set to None counts as unset."""
    return tuple(sorted((k, freeze(v)) for k, v in params.items() if v is not None))


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
        args = tuple(sorted((k, freeze(v)) for k, v in self.server_args.items()
                            if not is_speculation_only(k)))
        env = tuple(sorted((k, v) for k, v in self.env.items() if not is_speculation_only(k)))
        return (self.backend, self.profile, args, env,
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
        workload: The ``workload:`` section as given (relative path made absolute), checked
            by ``autotune.space.workload.Workload.from_spec``, which owns its defaults.
        measure, objective, constraints, budget, resources, search: Their sections.
        exclusive_node: Whether a trial takes a whole node.
        description: Free text.
        raw: The file's content as plain data.
        nccl_prescreen: The ``nccl_prescreen:`` section, or None.
        synthetic_acceptance: The ``synthetic_acceptance:`` model, or None: every speculative
            config then gets ``SGLANG_SIMULATE_ACC_LEN`` from it (:mod:`autotune.space.synthetic`).
        nccl_bundle: With ``nccl_prescreen.kept``: kept candidate name -> its NCCL_* values;
            the NCCL_* parameters are then derived from the ``nccl_candidate`` parameter.
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
    nccl_prescreen: NcclPrescreen | None = None
    nccl_bundle: dict[str, dict[str, Any]] | None = field(default=None, repr=False)
    synthetic_acceptance: AcceptanceModel | None = None
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
        return build_space(cls, data, None if file is None else str(file))

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
        if self.nccl_bundle is not None and p.name.startswith("NCCL_"):
            return _SET, self.nccl_bundle[ctx[NCCL_BUNDLE]][p.name]
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
                if p.contains(1):
                    return _SET, 1
                return _INVALID, f"{why}, but 1 is not a choice of {TOPK}"
        if p.when is not None and not p.when.holds(ctx):
            return _SKIP, f"its condition '{p.when}' does not hold"
        if algo in EAGLE_FAMILY and p.name == DRAFT and p.type == "int":
            return self._draft_bounds(p, ctx)
        return _CHOOSE, None

    def _draft_bounds(self, p: Parameter, ctx: Mapping[str, Any]) -> tuple[str, Any]:
        step = int(p.step or 1)
        low, high = int(p.low), int(p.high)
        steps, topk = ctx.get(STEPS), ctx.get(TOPK)
        floor = 2 if self.rules["draft_tokens_min"] else None
        if self.rules["tree_draft_tokens_depth"] and is_int(steps) and is_int(topk) and topk > 1:
            floor = max(floor or 0, steps + 1)
        if floor is not None and low < floor:
            low += step * -(-(floor - low) // step)
        tree = None
        if self.rules["draft_tokens_max"] and is_int(steps) and is_int(topk):
            tree = steps * topk + 1
            if tree < high:
                high = int(p.low) + step * ((tree - int(p.low)) // step)
        if high < low:
            return _INVALID, (f"no {DRAFT} value in [{p.low}, {p.high}] fits "
                              f"{floor or 2} <= n <= steps*topk+1 = {tree}")
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
    def _values(p: Parameter, bounds: tuple[int, int] | None) -> Sequence[Any]:
        if bounds is None:
            return p.values()
        return range(bounds[0], bounds[1] + 1, int(p.step or 1))

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
        fixed_env = {k: v for k, v in self.fixed_env.items()
                     if spec_on or not is_speculation_only(k)}
        env = {k: env_text(v) for k, v in fixed_env.items() if v is not None}
        unset = [k for k, v in fixed_env.items() if v is None]
        for name, value in params.items():
            if name == NCCL_BUNDLE:
                continue  # a label: its NCCL_* values are params of their own
            if not spec_on and is_speculation_only(name):
                continue
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
        if (spec_on and self.synthetic_acceptance is not None
                and all(args.get(n) is not None for n in (STEPS, TOPK, DRAFT))):
            env[SYNTHETIC_ENV] = forced_value(self.synthetic_acceptance.accept_length(
                steps=int(args[STEPS]), topk=int(args[TOPK]), draft_tokens=int(args[DRAFT])))
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
        if self.rules["tree_draft_tokens_depth"] and topk > 1 and draft < steps + 1:
            return (f"{DRAFT}={draft} < steps + 1 = {steps + 1} with topk {topk}: SGLang's EAGLE "
                    "worker crashes at the first verify (rule tree_draft_tokens_depth)")
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
            return {}, ("a config must be a mapping of parameter names to values, got "
                        f"{type_name(params)}")
        given = dict(params)
        if self.nccl_bundle is not None and NCCL_BUNDLE not in given:
            name, why = infer_candidate(self.nccl_bundle, given)
            if why is not None:
                return {}, why
            given[NCCL_BUNDLE] = name
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
                    return resolved, self._forced_message(p.name, info, value, resolved)
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
                if p.contains(value):  # inside the range, outside what the rules leave
                    why = self._check_triple(self._context({**resolved, p.name: value}))
                    return resolved, why or (f"{p.name}={show(value)} is outside "
                                             f"[{info[0]}, {info[1]}], the range the rules "
                                             "leave here")
                return resolved, (f"{p.name}={show(value)} is not allowed; allowed: "
                                  f"{p.describe()}")
            if p.type == "categorical":  # the choice as written: 2, not 2.0
                value = next(c for c in p.choices or () if values_equal(c, value))
            resolved[p.name] = value
        resolved = self._finish(resolved)
        for name, value in given.items():
            if name in resolved:
                if not values_equal(resolved[name], value):
                    return resolved, self._forced_message(name, resolved[name], value, resolved)
            elif name in skipped:
                if value is not None:
                    return resolved, f"{name} must not be set: {skipped[name]}"
            elif not (name == ALGO and value is None):
                return resolved, (f"unknown parameter {name!r}{closest(str(name), self.parameters)}"
                                  f"; parameters: {', '.join(self.parameters) or '(none)'}")
        return resolved, self._check_final(resolved)

    def _forced_message(self, name: str, forced: Any, given: Any,
                        resolved: Mapping[str, Any]) -> str:
        why = ""
        if name == DRAFT:
            why = " (topk 1 makes it steps + 1: rule topk1_draft_tokens)"
        elif name == TOPK:
            why = f" ({self._forced_topk(self._context(resolved))})"
        return f"{name} must be {show(forced)} here, got {show(given)}{why}"

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
        out = {k: v for k, v in params.items() if not is_speculation_only(k)}
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
        pass). The emulator needs none; workload files are checked when the space loads.

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
