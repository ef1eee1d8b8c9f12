"""Synthetic acceptance: the accept length a trained draft would give, forced on dummy weights.

With ``--load-format dummy`` a draft accepts almost nothing, so the speed of a speculative config
says nothing about the config. SGLang's ``SGLANG_SIMULATE_ACC_LEN`` forces the mean accept
length instead. A fixed forced value would be a free parameter that always wins (more steps,
same acceptance), so a space declares an *acceptance model* and every config gets the accept
length that model predicts for its shape:

```yaml
synthetic_acceptance:
  rates: [0.80, 0.72, 0.66, 0.60, 0.55, 0.50]   # per draft position, top-1 candidate
```

``rates[i]`` is the probability that draft position ``i + 1`` is accepted given that every
position before it was, for the draft's top-1 candidate, the way a draft's speculation profile
(SpecForge, ``bench_speculative``'s per-position acceptance) reports it. This is the cost side of
the search, tuned before the draft is trained: every figure measured this way is labelled
"synthetic acceptance" and is never mixed with a measured acceptance.

This module is the one place that knows the env name, the model and the label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

# SGLang's forced mean accept length: the name is an SGLang fact, kept in autotune.sglang.
from autotune.sglang.speculative import SIMULATE_ACC_LEN_ENV as ENV
from autotune.sglang.speculative import simulated_mean

SYNTHETIC, MEASURED = "synthetic", "measured"
"""Values of :func:`acceptance_source`, the ``autotune.acceptance`` tag and the trial JSON key."""

LABEL = "synthetic acceptance"


@dataclass(frozen=True)
class SyntheticAcceptance:
    """Per-position acceptance of the top-1 draft candidate.

    Attributes:
        rates: ``rates[i]`` is P(position i+1 accepted | positions 1..i accepted), each in (0, 1].
    """

    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError("rates must name at least one draft position")
        for i, r in enumerate(self.rates):
            if not (isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r <= 1
                    and math.isfinite(r)):
                raise ValueError(f"rates[{i}] = {r!r} is not a probability in (0, 1]")

    def accept_length(self, *, steps: int, topk: int, draft_tokens: int) -> float:
        """Expected accepted tokens per verify cycle, the bonus token included.

        A chain (topk 1) accepts position i with the product of the first i rates. A tree of
        ``draft_tokens - 1`` nodes puts one node per depth first (the chain, as deep as
        ``steps`` and the node budget allow), then spends what is left on alternatives at the
        shallowest depths, at most ``topk`` candidates per depth. A depth with m candidates is
        passed with ``1 - (1 - r)**m``: each further candidate catches the same share of what the
        ones before it missed. The result is at most ``steps + 1``, as SGLang caps it.

        Raises:
            ValueError: Shape out of range, or more steps than the model has rates for.
        """
        if steps < 1 or topk < 1 or draft_tokens < 2:
            raise ValueError(f"no speculative shape: steps={steps}, topk={topk}, "
                             f"draft_tokens={draft_tokens}")
        if steps > len(self.rates):
            raise ValueError(f"the acceptance model has rates for {len(self.rates)} draft "
                             f"positions, the config drafts {steps}")
        budget = draft_tokens - 1
        depth = min(steps, budget)
        per_depth = [1] * depth
        spare = budget - depth
        for i in range(depth):
            extra = min(spare, topk - 1)
            per_depth[i] += extra
            spare -= extra
        length, reach = 1.0, 1.0
        for rate, m in zip(self.rates, per_depth, strict=False):
            reach *= 1.0 - (1.0 - rate) ** m
            length += reach
        return min(length, steps + 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {"rates": list(self.rates)}


def model_from_section(value: Any) -> SyntheticAcceptance:
    """An :class:`SyntheticAcceptance` from a parsed ``synthetic_acceptance:`` mapping.

    Raises:
        ValueError: With what is wrong; the space loader adds file and line.
    """
    if not isinstance(value, Mapping):
        raise ValueError("must be a mapping like {rates: [0.8, 0.7, 0.6]}")
    unknown = sorted(set(value) - {"rates"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; allowed: rates")
    rates = value.get("rates")
    if not isinstance(rates, Sequence) or isinstance(rates, (str, bytes)):
        raise ValueError("rates must be a list of per-position acceptance probabilities")
    return SyntheticAcceptance(tuple(rates))


def forced_value(length: float) -> str:
    """The env text for a forced accept length (3 decimals: SGLang parses a float)."""
    return f"{length:.3f}"


def forced_accept_length(env: Mapping[str, Any] | None) -> float | None:
    """The accept length a launch env forces, None when it forces none.

    SGLang reads the variable as a float and ignores it when it is not positive.
    """
    raw = (env or {}).get(ENV)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 and math.isfinite(value) else None


def acceptance_source(env: Mapping[str, Any] | None, *, speculative: bool) -> str | None:
    """``synthetic`` when the accept length was forced, ``measured`` for other speculative
    runs, None without speculation (no acceptance at all)."""
    if not speculative:
        return None
    return SYNTHETIC if forced_accept_length(env) is not None else MEASURED


#: How far the server's measured mean accept length may be from the forced one, at least. SGLang's
#: `match-expected` simulation came within +0.00% to +0.75% on every speculative server of the H200
#: and H100 searches (docs/measurements/README.md, 2026-12-06); a server that kept another value (a
#: forked child that did not bind its own, autotune/server/_prefork/autotune_prefork_rebind.py) is
#: far outside, its fork server's probe being about 1.0.
TAKEN_REL = 0.10
#: And in standard errors of a mean over the measured cycles: each cycle accepts the integer below
#: or above the forced mean, a spread of at most 0.5 tokens, so a short round's mean is noisy.
TAKEN_SE = 5.0


def not_taken(forced: float | None, measured: float | None, cycles: float | None,
              steps: int | None) -> str | None:
    """Why a measured accept length (the mean over ``cycles`` decode cycles of a config with
    ``steps`` draft steps) shows the forced one did not take effect; None where it did, or where
    the forced value, the measured one, the number of cycles or the steps is unknown."""
    if forced is None or measured is None or steps is None or not cycles or cycles < 1:
        return None
    expected = simulated_mean(forced, steps)
    bound = max(TAKEN_REL * expected, TAKEN_SE * 0.5 / math.sqrt(cycles))
    if abs(measured - expected) <= bound:
        return None
    clamped = f" (SGLang simulates {expected:g} with {steps} steps)" if expected != forced else ""
    return (f"the forced accept length did not take effect: {ENV}={forced:g}{clamped}, but the server "
            f"accepted {measured:.3g} tokens per cycle over {cycles:.0f} cycles (at most {bound:.2g} apart); "
            "its figures are not this config's")


def describe(env: Mapping[str, Any] | None) -> str | None:
    """One line for summaries and export comments, None when acceptance was not forced."""
    forced = forced_accept_length(env)
    if forced is None:
        return None
    return (f"{LABEL}: the accept length was forced to {forced:g} with {ENV} (dummy weights); "
            "the speed is the config's cost side, not a trained draft's measured acceptance")
