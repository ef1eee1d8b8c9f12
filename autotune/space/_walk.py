"""The walk over a space's parameters: what each parameter does given the values so far, every
config depth-first, the replay of a given config, and the checks of a complete one.

:class:`SpaceWalk` is the half of :class:`autotune.space.search_space.SearchSpace` that knows
SGLang's rules and the built-in ones; ``SearchSpace`` inherits it and adds the loaded sections and
the public API (``suggest``, ``enumerate``, ``trial_config``...). It is a base class rather than
functions so that the methods keep reading the space's attributes as ``self``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from autotune.names import is_env_name
from autotune.sglang.speculative import EAGLE_FAMILY, PAGED_TREE_BACKENDS
from autotune.space._expr import values_equal
from autotune.space._nccl import NCCL_BUNDLE, infer_candidate
from autotune.space._schema import closest, env_text, is_int, is_number, show, type_name
from autotune.space._schema_names import Forbidden, is_speculation_only
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
from autotune.space.synthetic import ENV as SYNTHETIC_ENV
from autotune.space.synthetic import SyntheticAcceptance, forced_value

#: What :meth:`SpaceWalk.step` says of a parameter.
SKIP, SET, CHOOSE, INVALID = "skip", "set", "choose", "invalid"


class SpaceWalk:
    """The define-by-run rules of a :class:`~autotune.space.search_space.SearchSpace`.

    It reads the space's ``parameters``, ``_order``, ``rules``, ``fixed_args``, ``fixed_env``,
    ``forbidden``, ``model_path``, ``draft_model_path``, ``synthetic_acceptance`` and
    ``nccl_bundle``.
    """

    # Declared here for the type checker; SearchSpace (a dataclass) defines them as its fields.
    parameters: dict[str, Parameter]
    _order: tuple[Parameter, ...]
    rules: dict[str, bool]
    fixed_args: dict[str, Any]
    fixed_env: dict[str, Any]
    forbidden: Forbidden
    model_path: str
    draft_model_path: str | None
    synthetic_acceptance: SyntheticAcceptance | None
    nccl_bundle: dict[str, dict[str, Any]] | None

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

        Returns ``(SKIP, why)``, ``(SET, value)`` for a derived value, ``(CHOOSE, bounds)``
        with bounds None or a narrowed ``(low, high)``, or ``(INVALID, why)``.
        """
        if self.nccl_bundle is not None and p.name.startswith("NCCL_"):
            return SET, self.nccl_bundle[ctx[NCCL_BUNDLE]][p.name]
        algo = ctx.get(ALGO)
        if p.is_speculative and p.name != ALGO and algo is None:
            return SKIP, "speculation is off"
        if algo in EAGLE_FAMILY and p.name == DRAFT:
            steps, topk = ctx.get(STEPS), ctx.get(TOPK)
            if self.rules["topk1_draft_tokens"] and topk == 1 and is_int(steps):
                return SET, steps + 1
        if algo in EAGLE_FAMILY and p.name == TOPK:
            why = self._forced_topk(ctx)
            if why is not None:
                if p.contains(1):
                    return SET, 1
                return INVALID, f"{why}, but 1 is not a choice of {TOPK}"
        if p.when is not None and not p.when.holds(ctx):
            return SKIP, f"its condition '{p.when}' does not hold"
        if algo in EAGLE_FAMILY and p.name == DRAFT and p.type == "int":
            return self._draft_bounds(p, ctx)
        return CHOOSE, None

    def _draft_bounds(self, p: Parameter, ctx: Mapping[str, Any]) -> tuple[str, Any]:
        step = int(p.step or 1)
        p_low, p_high = p.bounds()
        low, high = int(p_low), int(p_high)
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
                high = int(p_low) + step * ((tree - int(p_low)) // step)
        if high < low:
            return INVALID, (f"no {DRAFT} value in [{p.low}, {p.high}] fits "
                              f"{floor or 2} <= n <= steps*topk+1 = {tree}")
        if (low, high) == (p.low, p.high):
            return CHOOSE, None
        return CHOOSE, (low, high)

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
        if kind == INVALID:
            yield dict(params), info
            return
        if kind == SKIP:
            yield from self._walk(index + 1, params, sample)
            return
        values: Sequence[Any]
        if kind == SET:
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
        low, high = p.bounds()
        probes = {float(low), float(high), (low + high) / 2}
        for other in self.parameters.values():
            if other.when is not None:
                for term in other.when.terms:
                    if term.name == p.name and is_number(term.value):
                        for delta in (-1e-6, 0.0, 1e-6):
                            value = term.value + delta
                            if low <= value <= high:
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
        return self.forbidden_reason(args, env)

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

    def forbidden_reason(self, args: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
        """Why ``args`` and ``env`` break the space's ``forbidden:`` section, or None.

        Args:
            args: Server args (underscore names); None and False count as unset.
            env: Environment values as the server would see them (text).

        Returns:
            The first forbidden flag or value in words (with the section that forbids it), or
            None when nothing is forbidden. A server arg that makes SGLang set a forbidden env
            value counts too.
        """
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
        # A misspelt name first: otherwise the walk stops at the parameter it was meant to be, as
        # "missing", and the name the user typed is never shown.
        for key, value in given.items():
            if key not in self.parameters and key != DRAFT and not (key == ALGO and value is None):
                return {}, (f"unknown parameter {key!r}{closest(str(key), self.parameters)}"
                            f"; parameters: {', '.join(self.parameters) or '(none)'}")
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
            if kind == INVALID:
                return resolved, info
            if kind == SKIP:
                skipped[p.name] = info
                continue
            if kind == SET:
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
            elif not (name == ALGO and value is None):  # a derived name this config does not derive
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
