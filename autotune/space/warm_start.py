"""The warm start: SGLang's own default speculative config, measured first in every search.

A user who turns speculation on and sets none of ``--speculative-num-steps``, ``--speculative-eagle-topk``
and ``--speculative-num-draft-tokens`` gets what SGLang auto-picks for the target
(:func:`autotune.sglang.speculative.auto_speculative_params`: 5/4/8 for Llama and Grok targets, 3/1/4
otherwise). That is the config a tuned one has to beat, so a search measures it first, and its summary,
MLflow and the export say how much faster the winner is than it, also when it loses to plain decoding.

:func:`sglang_default` finds that config in a space: the space's first EAGLE-family algorithm, SGLang's
auto-picked triple, and every other parameter at the value SGLang runs when the flag is unset (``None``
where the space offers it, else SGLang's default where the space has it, else the first choice; for
``tp_size`` without TP 1, the largest, the one most likely to fit). Where
the space cannot run it (a range that excludes the triple, a fixed flag that differs), it says why and
nothing is measured for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.sglang import args as sglang_args
from autotune.sglang import speculative
from autotune.space.replay import ReplayTrial, UnfitValue
from autotune.space.rules import ALGO, DRAFT, STEPS, TOPK
from autotune.space.trial_config import config_key

if TYPE_CHECKING:
    from autotune.space._schema_params import Parameter
    from autotune.space.search_space import SearchSpace

__all__ = ["WarmStart", "compare_to_default", "gain", "sglang_default", "versus_default"]


@dataclass(frozen=True)
class WarmStart:
    """SGLang's default speculative config for a space, or why the space cannot run it.

    Attributes:
        algorithm: The speculative algorithm it uses (None: the space has no EAGLE-family one).
        model_arch: The target architecture that picked the triple (None: unknown).
        triple: SGLang's auto-picked (steps, topk, draft tokens), or None.
        params: The config in the space's terms (every value, derived ones included), or None.
        asked: The values a sampler is asked for (what ``enqueue_trial`` takes), or None.
        reason: Why there is no config, else None.
    """

    algorithm: str | None
    model_arch: str | None
    triple: tuple[int, int, int] | None
    params: dict[str, Any] | None
    asked: dict[str, Any] | None
    reason: str | None

    def describe(self) -> str:
        """One line for the console: what is measured first, or why nothing is."""
        if self.triple is None:
            return f"no SGLang default speculative config: {self.reason}"
        s, k, n = self.triple
        arch = self.model_arch or 'an unknown architecture'
        what = f"SGLang's default {self.algorithm} {s}/{k}/{n} (auto-picked for {arch})"
        return f"{what}, measured first" if self.params is not None else f"{what} not measured: {self.reason}"


def _choices(p: Parameter) -> list[Any] | None:
    if p.type == "categorical":
        return list(p.choices or ())
    return None


def _in_range(p: Parameter, value: Any) -> bool:
    choices = _choices(p)
    if choices is not None:
        return value in choices
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    low, high = p.bounds()
    if not float(low) <= float(value) <= float(high):
        return False
    step = p.step or (1 if p.type == "int" else None)
    if step is None:
        return True
    steps = (float(value) - float(low)) / float(step)
    return abs(steps - round(steps)) < 1e-9


def _unset_value(p: Parameter) -> Any:
    """The value SGLang runs when the flag is not given, as far as the space offers it."""
    choices = _choices(p)
    if choices is not None and None in choices:
        return None
    try:
        default = sglang_args.default_value(p.name)
    except Exception:  # not a server flag (an env var, an NCCL bundle): the space's first value
        default = None
    if default is not None and _in_range(p, default):
        return default
    if choices is not None:
        # SGLang's TP 1 is not offered: the largest TP shards the weights most, so it is the one
        # most likely to fit (a user running the model at all runs one that fits).
        return max(choices) if p.name == "tp_size" else choices[0]
    low, high = p.bounds()
    end = high if p.name == "tp_size" else low
    return int(end) if p.type == "int" else float(end)


def sglang_default(space: SearchSpace) -> WarmStart:
    """SGLang's default speculative config in ``space`` (see the module doc)."""
    algo_param = space.parameters.get(ALGO)
    fixed = dict(getattr(space, "fixed_args", {}) or {})
    if algo_param is not None:
        algos = [a for a in (_choices(algo_param) or []) if a in speculative.EAGLE_FAMILY]
    else:
        algos = [fixed[ALGO]] if fixed.get(ALGO) in speculative.EAGLE_FAMILY else []
    if not algos:
        return WarmStart(None, None, None, None, None, "the space has no EAGLE-family speculative algorithm")
    algorithm = algos[0]
    arch = speculative.infer_model_arch(getattr(space, "model_path", None))
    triple = speculative.auto_speculative_params(algorithm, arch)
    want = dict(zip((STEPS, TOPK, DRAFT), triple, strict=True))
    values: dict[str, Any] = {}
    for name, p in space.parameters.items():
        values[name] = algorithm if name == ALGO else want[name] if name in want else _unset_value(p)
    for name, value in want.items():
        if name not in space.parameters and name in fixed and fixed[name] != value:
            return WarmStart(algorithm, arch, triple, None, None,
                             f"fixed_args sets {name}={fixed[name]}, SGLang's default is {value}")
    probe = ReplayTrial(values)
    try:
        params = space.suggest(probe)
    except UnfitValue as exc:
        return WarmStart(algorithm, arch, triple, None, None, f"the space cannot run it: {exc}")
    why = space.validate_config(params)
    if why is not None:
        return WarmStart(algorithm, arch, triple, None, None, f"the space rules it out: {why}")
    got = tuple(params.get(k, fixed.get(k)) for k in (STEPS, TOPK, DRAFT))
    if got != triple:
        return WarmStart(algorithm, arch, triple, None, None,
                         f"the space resolves it to {'/'.join(str(v) for v in got)}")
    return WarmStart(algorithm, arch, triple, params, probe.asked, None)




def compare_to_default(warm: WarmStart | None, results: Sequence[Mapping[str, Any]],
                       winner: Mapping[str, Any] | None, *, space: SearchSpace) -> dict[str, Any] | None:
    """How the search's winner compares with SGLang's default speculative config.

    Args:
        warm: The search's warm start.
        results: Trial records (``TrialResult.to_dict()``-like: ``params``, ``status``, ``output_tok_s``,
            ``speedup``); the default's first measured one is used.
        winner: The winner's record, or None.
        space: The space (to compare configs by key).

    Returns:
        None without a default config, else ``{"params", "triple", "status", "output_tok_s", "speedup",
        "gain"}``: ``gain`` is the winner against the default (:func:`gain`), None when unknown.
    """
    if warm is None or warm.params is None:
        return None
    key = config_key(space.coerce_params(warm.params))
    found = None
    for r in results:
        params = r.get("params")
        if params is not None and config_key(space.coerce_params(params)) == key:
            found = r
            break
    tok = found.get("output_tok_s") if found else None
    return {"params": warm.params, "triple": list(warm.triple or ()), "model_arch": warm.model_arch,
            "algorithm": warm.algorithm, "status": found.get("status") if found else "not measured",
            "output_tok_s": tok, "speedup": found.get("speedup") if found else None,
            "gain": gain(winner or {}, found or {})}


def _by_speedup(winner: Mapping[str, Any], default: Mapping[str, Any]) -> bool:
    """Whether :func:`gain` can compare speedups: the winner's known, the default's known and not 0."""
    return winner.get("speedup") is not None and bool(default.get("speedup"))


def gain(winner: Mapping[str, Any], default: Mapping[str, Any]) -> float | None:
    """How many times the default's throughput the winner gives; None when unknown.

    The winner's figure is usually its finalist re-measurement beside a fresh baseline, the
    default's a search trial judged against the search's baseline: two servers minutes apart, and on
    a lent H200 such readings moved 3-5% (the MoE shape's baseline read 225.2 then 231.2 tok/s). So
    when both speedups are known the gain is their ratio, each against the baseline measured beside
    it, and drift between the two measurements divides out; otherwise it is the ratio of tok/s.
    """
    if _by_speedup(winner, default):
        return float(winner["speedup"]) / float(default["speedup"])
    tok, dtok = winner.get("output_tok_s"), default.get("output_tok_s")
    if tok is None or not dtok:
        return None
    return float(tok) / float(dtok)


def versus_default(default: Mapping[str, Any], *, winner: Mapping[str, Any]) -> str:
    """One line: SGLang's default as measured, and how ``winner`` (``output_tok_s``, ``speedup``)
    compares (:func:`gain`)."""
    triple = "/".join(str(v) for v in default.get("triple") or ())
    what = f"SGLang's default {default.get('algorithm') or ''} {triple}".replace("  ", " ")
    tok, speedup = default.get("output_tok_s"), default.get("speedup")
    if tok is None:
        return f"vs {what}: {default.get('status')}, so there is no gain to give"
    slower = " (slower than plain decoding)" if speedup is not None and speedup < 1 else ""
    ratio = gain(winner, default)
    basis = " (by speedup: each against its own baseline)" if _by_speedup(winner, default) else ""
    return (f"vs {what}: it measured {tok:.1f} tok/s, speedup "
            f"{'unknown' if speedup is None else f'{speedup:.3f}x'}{slower}; this is "
            f"{'unknown' if ratio is None else f'{ratio:.3f}x'} that{basis}")
