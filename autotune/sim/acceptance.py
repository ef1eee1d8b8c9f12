"""Speculative acceptance: how many draft tokens one verify cycle accepts, and its moments.

Acceptance decays with depth, a top-k tree recovers part of the top-1 misses, and the N - 1
verified slots go where they are most likely accepted (SGLang's best-score tree). This module
turns a profile's acceptance parameters into an :class:`AcceptanceDist` per prompt factor, the
forced distribution of ``SGLANG_SIMULATE_ACC_LEN``, and the expectations over prompts that
:class:`~autotune.sim.model.PerformanceModel` needs; the results are cached, as the engine asks
for them per request.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.sglang.speculative import simulated_mean

if TYPE_CHECKING:
    from autotune.sim.profile import Acceptance

__all__ = ["AcceptanceDist", "accept_moments", "cached_acceptance", "expected_cycles",
           "forced_acceptance", "rates_acceptance"]


@dataclass(frozen=True)
class AcceptanceDist:
    """Distribution of tokens produced by one cycle for one request (the bonus token included).

    Attributes:
        probs: ``probs[j]`` is P(j draft tokens accepted), j = 0..depth.
        widths: tree width per depth (1 for a chain).
        num_proposed: draft tokens proposed per cycle (N - 1).
    """

    probs: tuple[float, ...]
    widths: tuple[int, ...]
    num_proposed: int
    _cum: tuple[float, ...] = field(default=(), repr=False)

    @property
    def mean(self) -> float:
        return 1.0 + sum(j * p for j, p in enumerate(self.probs))

    @property
    def max_tokens(self) -> int:
        return len(self.probs)

    def sample(self, rng: random.Random) -> int:
        """Tokens produced by one cycle (accepted drafts + 1)."""
        u = rng.random()
        cum = self._cum or tuple(_accumulate(self.probs))
        for j, c in enumerate(cum):
            if u < c:
                return j + 1
        return len(self.probs)


def _accumulate(values: tuple[float, ...]) -> list[float]:
    out, total = [], 0.0
    for v in values:
        total += v
        out.append(total)
    return out


@functools.lru_cache(maxsize=65536)
def _tree_widths(acc: Acceptance, steps: int, topk: int, draft_tokens: int) -> tuple[int, ...]:
    """How many of the N - 1 verified slots sit at each depth.

    SGLang keeps the N - 1 draft nodes with the best cumulative draft score. Scoring a node by
    the chance that it is the accepted token (its ancestors being the top-1 chain) reproduces
    that: each slot goes where it is most likely to be accepted.
    """
    if topk == 1:
        return tuple(1 for _ in range(min(steps, draft_tokens - 1)))
    return _widths_for(acc, tuple(_position_probs(acc, steps, 1.0)), topk, draft_tokens)


def _widths_for(acc: Acceptance, p: tuple[float, ...], topk: int, draft_tokens: int) -> tuple[int, ...]:
    """:func:`_tree_widths` for explicit top-1 rates ``p`` (one a depth)."""
    slots = draft_tokens - 1
    steps = len(p)
    if topk == 1:
        return tuple(1 for _ in range(min(steps, slots)))
    nodes = []
    reach = 1.0
    for d in range(steps):
        for j in range(1, topk + 1):
            nodes.append((reach * _rank_prob(acc, p[d], j), d, j))
        reach *= p[d]
    nodes.sort(key=lambda n: (-n[0], n[1], n[2]))
    widths = [0] * steps
    for _, d, _ in nodes[:slots]:
        widths[d] += 1
    depth = 0
    while depth < steps and widths[depth] > 0:
        depth += 1
    return tuple(widths[:depth])


def _position_probs(acc: Acceptance, steps: int, factor: float) -> list[float]:
    return [min(acc.cap, acc.first * factor * acc.decay ** i * (acc.after_first if i else 1.0))
            for i in range(steps)]


def _rank_prob(acc: Acceptance, p: float, rank: int) -> float:
    """P(the rank-th draft candidate is the accepted token) at a position with top-1 rate p."""
    if rank == 1:
        return p
    return (1 - p) * acc.topk_recall * (acc.rank_decay ** (rank - 2)) * (1 - acc.rank_decay)


@functools.lru_cache(maxsize=262144)
def cached_acceptance(acc: Acceptance, steps: int, topk: int, draft_tokens: int, factor: float) -> AcceptanceDist:
    widths = _tree_widths(acc, steps, topk, draft_tokens)
    return _dist(acc, widths, _position_probs(acc, len(widths), factor), draft_tokens)


@functools.lru_cache(maxsize=4096)
def rates_acceptance(acc: Acceptance, rates: tuple[float, ...], steps: int, topk: int,
                     draft_tokens: int) -> AcceptanceDist:
    """The cycle distribution of a draft whose top-1 rates per position are ``rates`` exactly
    (``AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT``): no per-prompt factor; a tree's extra candidates
    recover the profile's ``topk_recall`` share of the misses, as with the profile's own rates.

    Raises:
        ValueError: The config drafts more positions than ``rates`` names.
    """
    if steps > len(rates):
        raise ValueError(f"AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT names {len(rates)} positions, "
                         f"the config drafts {steps}")
    widths = _widths_for(acc, rates[:steps], topk, draft_tokens)
    return _dist(acc, widths, list(rates[:len(widths)]), draft_tokens)


def _dist(acc: Acceptance, widths: tuple[int, ...], p: list[float], draft_tokens: int) -> AcceptanceDist:
    reach = [1.0]
    for d, w in enumerate(widths):
        covered = p[d] + (1 - p[d]) * acc.topk_recall * (1 - acc.rank_decay ** (w - 1))
        reach.append(reach[-1] * covered)
    depth = len(widths)
    probs = tuple(reach[j] - (reach[j + 1] if j < depth else 0.0) for j in range(depth + 1))
    return AcceptanceDist(probs=probs, widths=widths, num_proposed=draft_tokens - 1,
                          _cum=tuple(_accumulate(probs)))


@functools.lru_cache(maxsize=4096)
def forced_acceptance(acc: Acceptance, steps: int, topk: int, draft_tokens: int,
                       forced: float) -> AcceptanceDist:
    """SGLang's ``SGLANG_SIMULATE_ACC_LEN`` with its default method ``match-expected``.

    As ``_sample_simulated_acc_len`` in SGLang 0.5.17 ``srt/speculative/spec_utils.py``: the
    forced length is clamped to ``[1, steps + 1]`` and each verify produces ``floor(x)`` tokens or
    one more, the latter with probability ``x - floor(x)``, so the mean is exactly ``x``.
    SGLang draws once per verify for the whole batch; the emulator draws per request, which has
    the same mean at any batch size and is identical at batch 1.
    """
    max_len = steps + 1
    x = simulated_mean(forced, steps)
    lower = int(x // 1)
    upper = lower + 1 if lower < max_len else lower
    probs = [0.0] * max_len
    probs[lower - 1] += 1.0 - (x - lower)
    probs[upper - 1] += x - lower
    return AcceptanceDist(probs=tuple(probs), widths=_tree_widths(acc, steps, topk, draft_tokens),
                          num_proposed=draft_tokens - 1, _cum=tuple(_accumulate(tuple(probs))))


@functools.lru_cache(maxsize=4096)
def expected_cycles(probs: tuple[float, ...], tokens: int) -> float:
    """Expected verify cycles until ``tokens`` tokens are made, each cycle making ``j + 1`` with
    probability ``probs[j]`` (the last cycle's surplus is cut, as at ``max_tokens``)."""
    need = [0.0] * (tokens + 1)
    for n in range(1, tokens + 1):
        need[n] = 1.0 + sum(p * need[max(n - j - 1, 0)] for j, p in enumerate(probs) if p)
    return need[tokens]


@functools.lru_cache(maxsize=65536)
def accept_moments(acc: Acceptance, steps: int, topk: int, draft_tokens: int,
                    points: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    """E[accept length] and E[1 / accept length] over weighted prompt factors."""
    widths = _tree_widths(acc, steps, topk, draft_tokens)
    gains = [acc.topk_recall * (1 - acc.rank_decay ** (w - 1)) for w in widths]
    base = [acc.first * acc.decay ** i * (acc.after_first if i else 1.0) for i in range(len(widths))]
    cap = acc.cap
    mean = inv = 0.0
    for f, w in points:
        f = round(f, 4)  # as cached_acceptance rounds, so sampling and expectation agree
        a = reach = 1.0
        for b, g in zip(base, gains, strict=True):
            p = min(cap, b * f)
            reach *= p + (1 - p) * g
            a += reach
        mean += w * a
        inv += w / a
    return mean, inv
