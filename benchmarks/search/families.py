"""Synthetic landscape families whose curves are not the phase-model sampler's (issue 15).

The emulator (:mod:`autotune.sim.model`) and the phase-model sampler share one functional form:
top-1 acceptance decaying smoothly with depth, a tree recovering a constant share of the misses
with a geometric decay over ranks, a verify cost that is flat or saturates smoothly, a constant
CPU "other". A benchmark on emulator landscapes therefore flatters the sampler. These generators
write recorded landscapes (``autotune-landscape/1``, :mod:`benchmarks.search.landscape`) covering every
config of a space, from curves of another form:

- acceptance read from tables: per-position top-1 acceptance ``q[d]`` (any shape: a dip then a
  rise then a cliff, or a fast fall into a long flat tail), and per-(depth, width) tree recall
  ``cover(d, w) = q[d] + (1 - q[d]) * recover[w] * depth[d]`` from two more tables; which nodes a
  tree keeps is chosen by the *draft's own* confidence table, which does not know the truth;
- verify cost interpolated piecewise-linearly from measured H200 points, a roofline
  ``max(memory-bound, per-token compute)`` kink, or a step function that jumps where the MoE
  kernel's tile / CUDA-graph bucket changes;
- CPU other per cycle that falls with the accept length (``o0 + o1 / A``, seen on the H200).

Tok/s is built the way a trial reports it: a round of ``b`` requests (the workload's
concurrency) prefills ``b * P`` ms, then runs ``C = (L - 1) / A`` cycles of ``draft + verify +
extend + other`` ms; ``cycle_ms = wall / C`` (prefill spread over the cycles, as
:mod:`autotune.profile.phases` does) and ``output_tok_s = b * L / wall``. Each config gets ``repeats``
log-normal draws of CV ``noise_cv`` around that truth; ``output_tok_s`` is their median and the
phases move with it. A speculative record is feasible when its median beats its group's baseline
median by more than the space's ``min_speedup``.

``python -m benchmarks.search.families --family F --space SPACE --out FILE [--seed S]
[--noise-cv 0.01] [--repeats R]``; the families are in :data:`FAMILIES`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune import cli
from autotune.errors import AutotuneError
from autotune.space.trial_config import config_key
from autotune.space.workload import primary_concurrency
from autotune.trial.outcome import Status
from autotune.trial.verdict import pays
from benchmarks.search.landscape import FORMAT, load_landscape

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens")
DOCS = "docs/measurements/README.md, 2026-12-01 H200 8B real search"
#: The draft's confidence in its w-th candidate against its first (picks the tree's widths).
RANK_SCORE = (1.0, 0.30, 0.22, 0.10, 0.07, 0.05, 0.04, 0.03)


@dataclass(frozen=True)
class Draft:
    """A draft's acceptance, read from tables.

    Attributes:
        name: Table name.
        q: ``q[d-1]`` = P(top-1 candidate at position d accepted | positions 1..d-1 were).
        recover: ``recover[w-1]`` = share of the top-1 misses a width-w beam catches (depth 1).
        depth: How that share scales at each depth.
        conf: The draft's own per-depth confidence; which N - 1 nodes a tree keeps.
    """

    name: str
    q: tuple[float, ...]
    recover: tuple[float, ...]
    depth: tuple[float, ...]
    conf: tuple[float, ...]

    def cover(self, d: int, w: int) -> float:
        """P(the target's token at depth d is among the w kept candidates | path reached d)."""
        return min(self.q[d] + (1 - self.q[d]) * self.recover[w - 1] * self.depth[d], 0.995)

    def widths(self, s: int, k: int, n: int) -> list[int]:
        """Nodes per depth: the N - 1 best by the draft's path score (depth < s, rank < k)."""
        reach = np.cumprod(self.conf[:s])
        nodes = sorted(((-reach[d] * RANK_SCORE[r], d, r) for d in range(s) for r in range(k)))
        w = [0] * s
        for _, d, _ in nodes[:n - 1]:
            w[d] += 1
        return [x for x in w if x]

    def accept_length(self, s: int, k: int, n: int) -> float:
        """Tokens per cycle, bonus included: ``1 + sum_d prod_{i<=d} cover(i, w_i)``."""
        if s > len(self.q):
            raise ValueError(f"table {self.name} has {len(self.q)} positions, config drafts {s}")
        reach = np.cumprod([self.cover(d, w) for d, w in enumerate(self.widths(s, k, n))])
        return 1.0 + float(reach.sum())


# Acceptance tables. Invented (no trained draft was measured here), with the shapes real drafts
# report per position: high at position 1, a fast fall; the rest is what the sampler cannot fit.
# dip-rise-cliff: a dip at positions 2-3 (ambiguous continuations: the right token is the draft's
# 2nd or 3rd, so a tree recovers most there, little at position 1), a rise (easy stretches stay
# easy), a cliff past the 6 positions the draft was trained to unroll; its confidence misses it.
DIP_CLIFF = Draft(
    "dip-rise-cliff", q=(0.80, 0.52, 0.48, 0.70, 0.80, 0.82, 0.35, 0.30),
    recover=(0.0, 0.35, 0.60, 0.65, 0.67, 0.68, 0.69, 0.70),  # ranks 2, 3 strong, then a knee
    depth=(0.5, 1.0, 1.2, 1.0, 0.8, 0.6, 0.5, 0.5), conf=(0.9, 0.85, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8))
PLATEAU = Draft(  # falls fast over three positions into a long flat tail
    "fall-plateau", q=(0.82, 0.70, 0.64, 0.62, 0.61, 0.61, 0.60, 0.60),
    recover=(0.0, 0.30, 0.40, 0.52, 0.55, 0.57, 0.58, 0.59),  # a bump at rank 4
    depth=(1.0, 0.95, 0.9, 0.85, 0.85, 0.85, 0.85, 0.85),
    conf=(0.85, 0.7, 0.6, 0.55, 0.5, 0.5, 0.5, 0.5))
WEAK = Draft(  # a draft that barely matches its target
    "weak", q=(0.40, 0.30, 0.28, 0.27, 0.27, 0.27, 0.27, 0.27),
    recover=(0.0, 0.15, 0.22, 0.26, 0.28, 0.29, 0.30, 0.30), depth=(1.0,) * 8,
    conf=(0.85, 0.7, 0.6, 0.55, 0.5, 0.5, 0.5, 0.5))


def interp(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through ``points`` (x ascending); outside them is an error."""
    xs, ys = zip(*points, strict=True)
    if not xs[0] <= x <= xs[-1]:
        raise ValueError(f"{x:g} lies outside the interpolation points {xs[0]:g}..{xs[-1]:g}")
    return float(np.interp(x, xs, ys))


# Dense Llama-3.1-8B shape on one H200 (SGLang 0.5.17, triton attention, batch 1), DOCS:
# verify 5.41 ms at 3-4 tokens, 5.45 at 6, 5.47 at 8 (chains and 4-wide trees alike); 2, 16 and
# 26 tokens are assumed (flat level; +0.15 / +0.45 ms as the tokens start to cost compute).
VERIFY_8B = ((2, 5.40), (3, 5.41), (4, 5.41), (6, 5.45), (8, 5.47), (16, 5.62), (26, 5.90))
# Per draft forward by top-k: 0.43 ms (chains) and 0.56 ms (top-k 4) measured; top-k 8 assumed.
DRAFT_8B = ((1, 0.43), (4, 0.56), (8, 0.73))
DECODE_8B, PLAIN_OTHER_8B, EXTEND_8B, PREFILL_8B = 4.69, 0.065, 0.47, 15.8  # measured (prefill:
# the plain record's cycle_ms - decode - other = 0.082 ms over 191 cycles)


def other_ms(a: float, k: int, o0: float = 0.26, o1: float = 0.14, tree: float = 0.12) -> float:
    """CPU other per cycle, falling with the accept length; 8B H200: chains 0.31-0.32 ms at
    A 2.35-3.11, trees 0.44-0.48 (DOCS); the fall with A is the H200 tiny-model finding."""
    return o0 + o1 / a + tree * (k > 1)


Phases = dict[str, float]
#: Per attention backend: (decode factor, verify factor, extra verify ms of a tree). triton is
#: the measured one; the others are assumed.
BACKENDS_8B = {"triton": (1.0, 1.0, 0.0), "fa3": (0.96, 0.97, 0.05)}
BACKENDS_MOE = {"fa3": (1.0, 1.0, 0.0), "flashinfer": (0.96, 1.05, 0.10),
                "triton": (1.05, 1.02, 0.05)}


def interp_verify(s: int, k: int, n: int, b: int, f: tuple, a: float) -> Phases:
    return {"draft_ms": (s - 1) * interp(DRAFT_8B, k),
            "verify_ms": interp(VERIFY_8B, b * n) * f[1] + f[2] * (k > 1),
            "extend_ms": EXTEND_8B, "other_ms": other_ms(a, k)}


def roofline(s: int, k: int, n: int, b: int, f: tuple, a: float) -> Phases:
    """Batch b: verify is memory-bound (the batch-1 flat level) until b*N tokens of compute
    (0.040 ms each: 16 GFLOP at 40% of an H200's 989 TFLOP/s, assumed) take longer: a kink."""
    t = b * n
    return {"draft_ms": (s - 1) * (0.43 + 0.043 * (k - 1) + 0.002 * b * k),
            "verify_ms": max(5.41, 0.040 * t) * f[1] + (f[2] + 0.0015 * t) * (k > 1),
            "extend_ms": EXTEND_8B + 0.002 * b * (s + 1),
            "other_ms": other_ms(a, k) * (1 + 0.1 * (b - 1))}


def plain_8b(b: int, f: tuple) -> Phases:
    return {"decode_ms": max(DECODE_8B + 0.03 * (b - 1), 0.040 * b) * f[0],
            "other_ms": PLAIN_OTHER_8B * (1 + 0.1 * (b - 1))}


def moe_steps(base: float) -> Callable[..., Phases]:
    """A MoE target (assumed constants, an A3B-like shape at TP 2, nothing measured): verify
    is ``base + 0.12 (T - 1)`` ms plus 1.6 ms past 4 tokens and 2.4 ms more past 8: the fused-MoE
    kernel's tile / CUDA-graph bucket changes, a step function, not a smooth saturation."""
    def cost(s: int, k: int, n: int, b: int, f: tuple, a: float) -> Phases:
        t = b * n
        verify = base + 0.12 * (t - 1) + 1.6 * (t > 4) + 2.4 * (t > 8)
        return {"draft_ms": (s - 1) * (0.45 + 0.045 * (k - 1)),
                "verify_ms": verify * f[1] + f[2] * (k > 1), "extend_ms": 0.55,
                "other_ms": other_ms(a, k, o0=0.30, o1=0.16)}
    return cost


def plain_moe(b: int, f: tuple) -> Phases:
    return {"decode_ms": (6.2 + 0.05 * (b - 1)) * f[0], "other_ms": 0.08}


@dataclass(frozen=True)
class Family:
    """One generator: a draft table, a cycle cost, the backends it knows, the words for it."""

    name: str
    draft: Draft
    cost: Callable[..., Phases]
    plain: Callable[[int, tuple], Phases]
    backends: Mapping[str, tuple]
    prefill_ms: float
    formulas: str
    sources: str
    never_pays: bool = False


_OTHER = "other = o0 + o1/A + tree*[k>1] ms"
_ACC = ("A = 1 + sum_d prod_{i<=d} cover(i, w_i), cover(d, w) = q[d] + (1-q[d]) recover[w] "
        "depth[d], widths w_d: the N-1 nodes with the best draft-confidence path score")
_TOK = "tok/s = b*L / (b*P + C*cycle), C = (L-1)/A, cycle_ms = wall/C"
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("table-accept", DIP_CLIFF, roofline, plain_8b, BACKENDS_8B, PREFILL_8B,
           f"acceptance table {DIP_CLIFF.name} q={list(DIP_CLIFF.q)}; {_ACC}; verify = "
           "max(5.41, 0.040*b*N)*f_backend (+ 0.0015 ms a token for trees): a roofline kink; "
           "draft = (s-1)(0.43 + 0.043(k-1) + 0.002 b k); "
           f"{_OTHER} (o0 0.26, o1 0.14, tree 0.12) x (1 + 0.1(b-1)); {_TOK}",
           f"acceptance tables invented; 5.41/4.69/0.43/0.47 ms from {DOCS}; the 0.040 ms per "
           "verify token and the batch terms assumed"),
    Family("interp-verify", PLATEAU, interp_verify, plain_8b, BACKENDS_8B, PREFILL_8B,
           f"acceptance table {PLATEAU.name} q={list(PLATEAU.q)}; {_ACC}; verify = "
           f"interp(b*N; {list(VERIFY_8B)}) piecewise-linear; draft = (s-1)*interp(k; "
           f"{list(DRAFT_8B)}); extend 0.47; decode 4.69; {_OTHER} (0.26, 0.14, 0.12); {_TOK}",
           f"verify at 3-8 tokens, decode, draft at top-k 1 and 4, extend, other from {DOCS}; "
           "verify at 2, 16, 26 tokens, draft at top-k 8, fa3 factors and acceptance assumed"),
    Family("step-verify", PLATEAU, moe_steps(7.0), plain_moe, BACKENDS_MOE, 30.0,
           f"acceptance table {PLATEAU.name} q={list(PLATEAU.q)}; {_ACC}; verify = 7.0 + "
           "0.12(T-1) + 1.6[T>4] + 2.4[T>8] ms, T=b*N: a step function; decode 6.2; draft = "
           f"(s-1)(0.45 + 0.045(k-1)); extend 0.55; {_OTHER} (0.30, 0.16, 0.12); {_TOK}",
           "all assumed (no MoE was measured): an A3B-like MoE at TP 2, chosen so the "
           "verify jumps decide the optimum"),
    Family("never-pays", WEAK, moe_steps(9.4), plain_moe, BACKENDS_MOE, 30.0,
           f"acceptance table {WEAK.name} q={list(WEAK.q)}; {_ACC}; verify = 9.4 + 0.12(T-1) "
           "+ 1.6[T>4] + 2.4[T>8] ms; the rest as step-verify; every speculative config is "
           "slower than its baseline, so the answer is: serve without speculation",
           "all assumed: a weak draft on a MoE whose 2-token verify costs 1.5 decode steps",
           never_pays=True))}


def _triple(space: SearchSpace, cfg: Mapping[str, Any]) -> tuple[int, int, int]:
    ctx = {**(space.fixed_args or {}), **cfg}
    return tuple(int(ctx[key]) for key in SPEC_KEYS[1:])  # type: ignore[return-value]


def truth(fam: Family, space: SearchSpace, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Noise-free tok/s, accept length and phases of one config (or baseline) of ``space``."""
    ctx = {**(space.fixed_args or {}), **cfg}
    unknown = sorted(k for k in cfg if k not in SPEC_KEYS and k != "attention_backend")
    if unknown:
        raise ValueError(f"family {fam.name} models only the EAGLE settings and "
                         f"attention_backend, not {unknown}")
    backend = ctx.get("attention_backend") or next(iter(fam.backends))
    if backend not in fam.backends:
        raise ValueError(f"family {fam.name} knows attention backends {list(fam.backends)}, "
                         f"not {backend!r}")
    f = fam.backends[backend]
    work = space.workload or {}
    b, out_len = int(primary_concurrency(work) or 1), int(work.get("output_len") or 256)
    prefill = b * fam.prefill_ms
    if not space.is_speculative(dict(cfg)):
        a, ph = 1.0, {"draft_ms": 0.0, "verify_ms": 0.0, "extend_ms": 0.0, **fam.plain(b, f)}
    else:
        s, k, n = _triple(space, cfg)
        a = fam.draft.accept_length(s, k, n)
        ph = {**fam.cost(s, k, n, b, f, a), "decode_ms": 0.0}
        prefill *= 1.02  # the draft's own prefill
    cycles = (out_len - 1) / a
    wall = prefill + cycles * sum(ph.values())
    ph.update(prefill_ms=prefill / cycles, cycle_ms=wall / cycles)
    return {"tok_s": 1000.0 * b * out_len / wall, "accept_length": a, "phases": ph}


def _rng(seed: int, params: Mapping[str, Any]) -> np.random.Generator:
    digest = hashlib.blake2b(repr((seed, config_key(params))).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


def record(t: Mapping[str, Any], params: Mapping[str, Any], *, baseline: Mapping | None,
           seed: int, noise_cv: float, repeats: int, min_speedup: float) -> dict[str, Any]:
    """A trial-JSON record of one config: repeats drawn around the truth, phases at the median."""
    draws = t["tok_s"] * np.exp(_rng(seed, params).normal(0, noise_cv, repeats)
                                - noise_cv ** 2 / 2)
    reps = [round(float(x), 3) for x in draws]
    med = float(np.median(reps)) if repeats % 2 else sorted(reps)[repeats // 2]
    scale = t["tok_s"] / med
    ph = {k: round(v * scale, 4) for k, v in t["phases"].items()}
    rec: dict[str, Any] = {
        "params": dict(params), "is_baseline": baseline is None, "output_tok_s": med,
        "output_tok_s_repeats": reps,
        "output_tok_s_range_pct": round(100 * (max(reps) - min(reps)) / med, 3), "phases": ph}
    if baseline is None:
        rec.update(status="feasible", reason=None, accept_length=None, acceptance=None,
                   baseline_tok_s=med, speedup=1.0)
        return rec
    speedup = round(med / baseline["output_tok_s"], 5)
    ok = pays(speedup, min_speedup=min_speedup)
    rec.update(status="feasible" if ok else "infeasible",
               reason=None if ok else f"speedup {speedup:.3f} <= min_speedup {min_speedup:g}",
               accept_length=round(t["accept_length"], 5), acceptance="synthetic-family",
               baseline_tok_s=baseline["output_tok_s"], baseline_status="feasible",
               baseline_decode_step_ms=baseline["phases"]["cycle_ms"], speedup=speedup,
               break_even_accept_length=round(ph["cycle_ms"] / baseline["phases"]["cycle_ms"], 5),
               feasible=ok)
    return rec


def generate(family: str, space_path: str, *, seed: int = 0, noise_cv: float = 0.01,
             repeats: int | None = None) -> dict[str, Any]:
    """The landscape document (space path as given) of ``family`` over every config of a space."""
    from autotune.space.search_space import load_space
    from benchmarks.search.problem import min_speedup

    fam = FAMILIES[family]
    space = load_space(space_path)
    reps = int(repeats or getattr(space.measure, "repeats", 3) or 3)
    if reps < 1 or noise_cv < 0:
        raise ValueError("repeats must be >= 1 and noise_cv >= 0")
    limit = min_speedup(space)
    baselines: dict[tuple, dict[str, Any]] = {}
    records: list[dict[str, Any]] = []
    for cfg in space.enumerate():
        base_params = space.baseline_params(dict(cfg))
        key = config_key(base_params)
        if key not in baselines:
            baselines[key] = record(truth(fam, space, base_params), base_params, baseline=None,
                                    seed=seed, noise_cv=noise_cv, repeats=reps,
                                    min_speedup=limit)
            records.append(baselines[key])
        if space.is_speculative(dict(cfg)):
            records.append(record(truth(fam, space, cfg), cfg, baseline=baselines[key],
                                  seed=seed, noise_cv=noise_cv, repeats=reps,
                                  min_speedup=limit))
    paying = [r for r in records if r["status"] == Status.FEASIBLE and not r["is_baseline"]]
    if fam.never_pays and paying:
        raise ValueError(f"family {family} must never pay, but {len(paying)} configs beat "
                         f"their baseline, e.g. {paying[0]['params']}")
    return {"format": FORMAT, "space": space_path,
            "description": (f"synthetic family {family}: not the sampler's functional form. "
                            f"{fam.formulas}. Sources: {fam.sources}. seed {seed}, noise CV "
                            f"{noise_cv:g}, {reps} repeats a config"),
            "acceptance": f"synthetic family table {fam.draft.name} (not measured)",
            "family": {"name": family, "seed": seed, "noise_cv": noise_cv, "repeats": reps,
                       "draft": {"q": fam.draft.q, "recover": fam.draft.recover,
                                 "depth": fam.draft.depth, "conf": fam.draft.conf,
                                 "rank_score": RANK_SCORE},
                       "backends": {k: list(v) for k, v in fam.backends.items()}},
            "records": records}


def write(doc: Mapping[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write one record a line, the space named relative to the file's folder; load it back."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    head = {k: v for k, v in doc.items() if k != "records"}
    head["space"] = Path(os.path.relpath(os.path.abspath(doc["space"]),
                                         os.path.abspath(out.parent))).as_posix()
    text = json.dumps(head, indent=1)[:-2] + ',\n "records": [\n'
    text += ",\n".join(json.dumps(r, separators=(",", ":")) for r in doc["records"]) + "\n]}\n"
    out.write_text(text, encoding="utf-8")
    load_landscape(out)  # covers the space, or raises naming what is missing
    return out


def main(argv: list[str] | None = None) -> int:
    parser = cli.command_parser("python -m benchmarks.search.families", __doc__, examples=[
        "python -m benchmarks.search.families --family interp-verify "
        "--space bench-family-llama-8b-h200 --out landscape.json"])
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--space", required=True,
                        help="the space to cover (every config): a YAML file or a packaged name")
    parser.add_argument("--out", required=True, help="landscape JSON to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the repeats' noise")
    parser.add_argument("--noise-cv", type=float, default=0.01,
                        help="log-normal CV of the repeats (default 0.01)")
    parser.add_argument("--repeats", type=int, help="repeats a config (default: the space's)")
    args = parser.parse_args(argv)
    try:
        doc = generate(args.family, args.space, seed=args.seed, noise_cv=args.noise_cv,
                       repeats=args.repeats)
        out = write(doc, args.out)
    except (AutotuneError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    recs = doc["records"]
    spec = [r for r in recs if not r["is_baseline"]]
    best = max((r for r in recs if r["status"] == Status.FEASIBLE), key=lambda r: r["output_tok_s"])
    print(f"wrote {out}: {len(recs)} records ({len(recs) - len(spec)} baselines), "
          f"{sum(r['status'] == 'feasible' for r in spec)} of {len(spec)} speculative configs "
          f"pay; best {best['output_tok_s']:.1f} tok/s at {best['params']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
