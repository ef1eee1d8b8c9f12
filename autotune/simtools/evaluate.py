"""Model-only evaluator: the emulator's performance model, in process, with no HTTP.

:class:`ModelEvaluator` gives what the model expects a trial of a config of a search space to
measure: output tok/s, accept length, phase profile, the baseline of its non-speculative group,
speedup and break-even accept length. Its command is ``autotune evaluate``
(:mod:`autotune.cli.evaluate`; also ``python -m autotune.simtools.evaluate``).

The search-strategy benchmark drives :class:`ModelEvaluator` directly, with measurement noise.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from autotune.errors import AutotuneError
from autotune.sim.closed_loop import Request, replay
from autotune.sim.config import ModelConfig
from autotune.sim.engine import natural_length
from autotune.sim.model import PerformanceModel
from autotune.sim.profile import Profile, load_profile
from autotune.sim.tokens import apply_chat_template, count_tokens
from autotune.space.workload import Workload
from autotune.trial.verdict import pays

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace


@dataclass(frozen=True)
class WorkloadShape:
    """What the expectation depends on: concurrency and mean prompt/output token counts."""

    concurrency: int = 1
    input_len: int = 128
    output_len: int = 256
    # The prompts' texts as the emulator sees them: acceptance varies per prompt, so the
    # expectation of a small workload is over its own prompts, not the whole distribution.
    prompts: tuple[str, ...] = ()
    input_lens: tuple[int, ...] = ()
    output_lens: tuple[int, ...] = ()


def workload_shape(space: SearchSpace, *, concurrency: int | None = None) -> WorkloadShape:
    """Mean prompt and output lengths of a space's measured prompts, as the emulator counts them."""
    workload = Workload.from_spec(space.workload, file=getattr(space, "file", None))
    prompts = workload.measured()
    api = getattr(workload, "api", "generate")
    ins, outs, texts = [], [], []
    for p in prompts:
        text = apply_chat_template(p.as_messages()) if api == "chat" else p.as_text()
        texts.append(text)
        ins.append(count_tokens(text))
        outs.append(p.max_tokens if p.ignore_eos else natural_length(text, p.max_tokens)[0])
    conc = concurrency or getattr(workload, "concurrency", None) or 1
    return WorkloadShape(concurrency=int(conc), input_len=round(sum(ins) / len(ins)),
                         output_len=round(sum(outs) / len(outs)), prompts=tuple(texts),
                         input_lens=tuple(ins), output_lens=tuple(outs))


class ModelEvaluator:
    """Evaluates configs of one space on one profile, as a trial would measure them.

    Args:
        space: A loaded ``SearchSpace``.
        profile: Profile override; defaults to the space's own.
        shape: Workload shape; defaults to the space's workload.
        noise_cv: Multiplicative log-normal noise on measured tok/s (0 = exact expectation).
        seed: Seed of the noise.
    """

    def __init__(self, space: SearchSpace, *, profile: Profile | str | None = None,
                 shape: WorkloadShape | None = None, noise_cv: float = 0.0, seed: int = 0) -> None:
        self.space = space
        chosen = profile if profile is not None else getattr(space, "profile", None)
        if chosen is None:
            raise AutotuneError("no profile: give --profile or use a space with backend: sim")
        self.profile = chosen if isinstance(chosen, Profile) else load_profile(chosen)
        self.shape = shape or workload_shape(space)
        self.noise_cv = noise_cv
        self._rng = random.Random(seed)
        self._cache: dict[tuple, dict[str, Any]] = {}
        self._prompt_factors: tuple[float, ...] | None = None

    def model(self, params: Mapping[str, Any]) -> PerformanceModel:
        """The emulator's performance model of one config of the space."""
        cfg = self.space.trial_config(dict(params))
        return PerformanceModel(self.profile, ModelConfig.from_server_args(cfg.server_args, cfg.env))

    def _factors(self, model: PerformanceModel) -> tuple[float, ...] | None:
        if self._prompt_factors is None and self.shape.prompts:
            self._prompt_factors = tuple(model.prompt_factor(t) for t in self.shape.prompts)
        return self._prompt_factors or None

    def _replay(self, model: PerformanceModel) -> float:
        """Closed-loop expectation at concurrency > 1 (batched prefills, draining batch)."""
        s = self.shape
        factors = self._factors(model) or (1.0,) * len(s.output_lens)
        reqs = []
        for n_in, n_out, f in zip(s.input_lens, s.output_lens, factors, strict=True):
            a = model.acceptance(f).mean if model.config.spec is not None else 1.0
            reqs.append(Request(input_len=n_in, output_len=n_out, tokens_per_cycle=a))
        return replay(model, reqs, s.concurrency,
                      max_running=model.config.max_running_requests)[0]

    def expected(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Noise-free result of one config, with its baseline and the break-even verdict."""
        key = tuple(sorted((k, _hashable(v)) for k, v in params.items()))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        model = self.model(params)
        failure = model.check_startup(visible_gpus=None)
        out: dict[str, Any] = {"params": dict(params), "status": "ok", "reason": None}
        if failure:
            out.update(status="failed", reason=failure.splitlines()[0], output_tok_s=None,
                       feasible=False)
            self._cache[key] = out
            return out
        s = self.shape
        factors = self._factors(model)
        exp = model.expected(batch=s.concurrency, input_len=s.input_len, output_len=s.output_len,
                             prompt_factors=factors)
        out.update(exp.to_dict())
        if s.concurrency > 1 and s.output_lens:
            out["output_tok_s"] = self._replay(model)
        # One tok/s per record, replayed or analytic, and every verdict is taken from it: a
        # speedup of the analytic figure over a replayed baseline would mix two models.
        tok = out.get("output_tok_s")
        base_params = self.space.baseline_params(dict(params))
        if model.config.spec is None:
            out.update(baseline_tok_s=tok, speedup=1.0, break_even_accept_length=None,
                       feasible=True, is_baseline=True)
        else:
            base = self.expected(base_params)
            bt = base.get("output_tok_s")
            step = base.get("phases", {}).get("cycle_ms")
            speedup = tok / bt if (tok and bt) else None
            out.update(baseline_tok_s=bt, speedup=speedup, is_baseline=False,
                       break_even_accept_length=(exp.cycle.total_ms / step) if step else None,
                       feasible=pays(speedup, min_speedup=self.space.constraints.min_speedup))
        self._cache[key] = out
        return out

    def measure(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Like :meth:`expected`, with this evaluator's measurement noise on tok/s."""
        out = dict(self.expected(params))
        if self.noise_cv > 0 and out.get("output_tok_s") is not None:
            cv = self.noise_cv
            out["output_tok_s"] *= math.exp(self._rng.gauss(0.0, cv) - cv * cv / 2)
        return out

    def evaluate_all(self, *, baselines: bool = False) -> Iterable[dict[str, Any]]:
        """Every config of the space; with ``baselines``, also each group's baseline (once)."""
        seen: set[tuple] = set()
        for params in self.space.enumerate():
            if baselines:
                base = self.space.baseline_params(params)
                key = tuple(sorted((k, _hashable(v)) for k, v in base.items()))
                if key not in seen:
                    seen.add(key)
                    yield self.expected(base)
            yield self.expected(params)

    def optimum(self) -> dict[str, Any]:
        """The best feasible config: the fastest speculative one that beats its baseline, else the
        fastest baseline."""
        best = None
        for rec in self.evaluate_all(baselines=True):
            if not rec.get("feasible") or rec.get("output_tok_s") is None:
                continue
            if best is None or rec["output_tok_s"] > best["output_tok_s"]:
                best = rec
        if best is None:
            raise AutotuneError("no config of the space can run on this profile")
        return best


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _num(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(rec: Mapping[str, Any]) -> str:
    """One config as a table row: its non-null params, tok/s, speedup, accept and break-even lengths."""
    config = " ".join(f"{k}={v}" for k, v in rec.get("params", {}).items() if v is not None) or "(defaults)"
    verdict = "feasible" if rec.get("feasible") else "infeasible" if rec.get("status") == "ok" else "failed"
    return (f"{_num(rec.get('output_tok_s'), '10.1f')} {_num(rec.get('speedup'), '8.3f')} "
            f"{_num(rec.get('accept_length'), '7.2f')} {_num(rec.get('break_even_accept_length'), '10.2f')}  "
            f"{verdict:<10} {config}")


def render(records: Sequence[Mapping[str, Any]], *, optimum: bool) -> str:
    """The records as a person reads them: a table (the best feasible config with ``optimum``)."""
    head = f"{'tok/s':>10} {'speedup':>8} {'accept':>7} {'break-even':>10}  {'verdict':<10} config"
    if optimum:
        return f"The best feasible config of {records[0]['configs']} the model expects:\n{head}\n{_row(records[0])}"
    return "\n".join([head, *(_row(r) for r in records), f"{len(records)} configs"])


if __name__ == "__main__":
    import functools

    from autotune import command_line as cli
    from autotune.cli.evaluate import main

    sys.exit(cli.run_main(functools.partial(main, prog="python -m autotune.simtools.evaluate")))
