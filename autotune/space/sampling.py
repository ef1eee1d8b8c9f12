"""How a workload draws its warm-up and measured prompts: ``workload.sample``.

``random`` (the default, and the only behaviour before ``sample`` existed) draws ``warmup_prompts
+ num_prompts`` distinct prompts uniformly with ``random.Random(seed)``: the first
``warmup_prompts`` warm up, the rest are measured. Every figure the project prints (``make demo``,
the calibration benchmarks, the GPU plans) was made this way, so it stays the default.

``stratified`` balances the prompts' kinds (a JSONL line's ``"category"``; ``chat``, ``code`` and
``math`` in the built-in set). Acceptance length depends on the kind of text, so a small uniform
draw can over-represent one kind and move the answer. It shuffles each kind's prompts with
``random.Random(seed)``, then deals them by smooth weighted round-robin, each kind weighted by its
share of the file: after any number of picks, each kind's count is within one of its
proportional share (``n * share``), and kinds alternate rather than come in runs, so a run cut
short by ``max_duration_s`` keeps the mix too. The measured prompts are dealt first (they carry
the guarantee), then the warm-up prompts from what is left. A kind that runs out drops out of
the rotation. The draw depends only on the prompts and the seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from autotune.space.prompts import Prompt

__all__ = ["SAMPLES", "pick"]

SAMPLES = ("random", "stratified")


def pick(prompts: Sequence[Prompt], *, warmup: int, measured: int, seed: int,
         sample: str) -> tuple[list[int], list[int]]:
    """Indices of the warm-up and the measured prompts, disjoint.

    Args:
        prompts: The distinct prompts to draw from (at least ``warmup + measured`` of them).
        warmup: How many warm-up prompts.
        measured: How many measured prompts.
        seed: The workload's seed.
        sample: One of :data:`SAMPLES`.

    Returns:
        ``(warm-up indices, measured indices)`` into ``prompts``, each in sending order.

    Raises:
        ValueError: An unknown ``sample``, or a stratified draw from prompts without a kind.
    """
    if sample == "random":
        picks = random.Random(seed).sample(range(len(prompts)), warmup + measured)
        return picks[:warmup], picks[warmup:]
    if sample != "stratified":
        raise ValueError(f"sample must be one of {', '.join(SAMPLES)}, got {sample!r}")
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        if p.kind is None:
            raise ValueError(f"prompt {p.id} has no kind; sample: stratified needs a \"category\" "
                             "on every prompt")
        groups.setdefault(p.kind, []).append(i)
    rng = random.Random(seed)
    kinds = sorted(groups)  # a fixed order, so the seed alone decides the draw
    for kind in kinds:
        rng.shuffle(groups[kind])
    # The file's shares, not what is left after the measured deal: the warm-up keeps the mix too.
    weights = {kind: len(groups[kind]) for kind in kinds}
    queues = {kind: list(groups[kind]) for kind in kinds}
    measured_idx = _deal(queues, weights, measured)
    return _deal(queues, weights, warmup), measured_idx


def _deal(queues: dict[str, list[int]], weights: dict[str, int], count: int) -> list[int]:
    """``count`` indices off the kinds' queues by smooth weighted round-robin (nginx's)."""
    credit = dict.fromkeys(queues, 0)
    out: list[int] = []
    while len(out) < count:
        live = [k for k in queues if queues[k]]
        if not live:
            break  # the caller checked there are enough prompts; this is only a guard
        total = sum(weights[k] for k in live)
        for k in live:
            credit[k] += weights[k]
        # Ties go to the earlier kind in name order (max keeps the first maximum).
        best = max(live, key=lambda k: credit[k])
        credit[best] -= total
        out.append(queues[best].pop(0))
    return out
