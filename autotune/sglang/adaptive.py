"""SGLang's per-batch-size adaptive speculation: the table it reads, and whether a launch can use it.

SGLang 0.5.23 (``sglang.srt.speculative.adaptive_spec_params``) has ``--speculative-adaptive`` and
``--speculative-adaptive-config FILE``: a JSON object keyed by batch size (digit strings), each
entry with ``candidate_steps`` (non-negative ints; 0 turns drafting off at that batch size) and
optional tuning knobs (``up_hysteresis``, ``down_hysteresis``, ``ema_alpha``, ...). A running
batch is padded to its CUDA-graph batch size and served by the entry of the largest key not
above it (the smallest key below the first). Within an entry SGLang moves ``num_steps`` among the
candidates by an EMA of the accept length, so an entry of one candidate pins that batch size to
that step count. Only EAGLE and EAGLE3 with topk 1 support it (SGLang falls back to static
speculation otherwise, with a warning); draft tokens are always steps + 1.

This module writes that table from per-level step counts (:func:`adaptive_table`), checks a table
file with SGLang's own loader when SGLang is importable (:func:`check_table`, else a mirror of the
loader's rules, said so), and says why a launch cannot use it (:func:`unsupported`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.errors import LaunchArgsError
from autotune.sglang import flags

__all__ = ["ADAPTIVE_ALGORITHMS", "CONFIG_ARG", "SWITCH_ARG", "adaptive_table", "check_table",
           "unsupported"]

SWITCH_ARG, CONFIG_ARG = "speculative_adaptive", "speculative_adaptive_config"
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")


def adaptive_table(steps_by_level: Mapping[int, int]) -> dict[str, dict[str, Any]]:
    """SGLang's adaptive config with one pinned step count per batch size.

    Args:
        steps_by_level: Concurrency level (taken as the batch size) -> ``speculative_num_steps``
            to run there; 0 for no speculation.
    """
    if not steps_by_level:
        raise ValueError("an adaptive table needs at least one level")
    table = {}
    for level, steps in sorted(steps_by_level.items()):
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise ValueError(f"a level is a batch size >= 1, got {level!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps at level {level} must be an int >= 0, got {steps!r}")
        table[str(level)] = {"candidate_steps": [steps]}
    return table


def check_table(path: str | Path) -> tuple[list[int], str]:
    """Read a table file the way SGLang does; the union of its candidate steps, and who checked.

    SGLang's ``resolve_candidate_steps_from_config`` when SGLang is importable (``"SGLang <ver>"``),
    else a mirror of its rules (``"autotune's mirror of SGLang 0.5.23's loader"``).

    Raises:
        LaunchArgsError: The table is not one SGLang accepts, with SGLang's message.
    """
    if flags.sglang_importable():
        import sglang
        from sglang.srt.speculative.adaptive_spec_params import resolve_candidate_steps_from_config

        try:
            steps = resolve_candidate_steps_from_config(cfg_path=str(path))
        except (ValueError, OSError, AttributeError, TypeError) as exc:
            raise LaunchArgsError(f"SGLang rejects the adaptive config {path}: {exc}") from None
        return list(steps), f"SGLang {getattr(sglang, '__version__', '?')}"
    return _mirror_steps(path), "autotune's mirror of SGLang 0.5.23's loader"


def _mirror_steps(path: str | Path) -> list[int]:
    """SGLang 0.5.23's ``_load_adaptive_config`` rules, for machines without SGLang."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise LaunchArgsError(f"cannot read the adaptive config {path}: {exc}") from None
    if not isinstance(cfg, dict):
        raise LaunchArgsError(f"the adaptive config {path} must be a JSON object")
    steps: set[int] = set()
    for key, entry in cfg.items():
        if not key.isdigit():
            continue  # SGLang reads non-digit keys as shared knobs, not batch sizes
        cand = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (not isinstance(cand, list) or not cand
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in cand)):
            raise LaunchArgsError(f"BS {key}: candidate_steps must be a list of non-negative ints, "
                                  f"got {cand!r}")
        steps.update(cand)
    if not steps:
        raise LaunchArgsError(f"the adaptive config {path} has no batch-size key such as "
                              '{"1": {"candidate_steps": [1, 3, 7]}}')
    return sorted(steps)


def unsupported(server_args: Mapping[str, Any]) -> str | None:
    """Why a speculative launch cannot run SGLang's adaptive speculation, or None when it can.

    The checks SGLang makes on the arguments alone (``adaptive_unsupported_reason``: algorithm,
    topk, multi-layer EAGLE, two-batch overlap, PD multiplexing), and that the SGLang in use has
    the flags at all.
    """
    active = flags.active_flags()
    for name in (SWITCH_ARG, CONFIG_ARG):
        if active.lookup(name) is None:
            return f"{active.describe()} has no --{name.replace('_', '-')}"
    algorithm = server_args.get("speculative_algorithm")
    if algorithm not in ADAPTIVE_ALGORITHMS:
        return f"speculative_algorithm={algorithm} (SGLang adapts only {', '.join(ADAPTIVE_ALGORITHMS)})"
    topk = server_args.get("speculative_eagle_topk")
    if topk not in (None, 1):
        return f"speculative_eagle_topk={topk} (SGLang adapts only topk 1 chains)"
    for flag in ("enable_multi_layer_eagle", "enable_two_batch_overlap", "enable_pdmux"):
        if server_args.get(flag):
            return f"{flag}=true (SGLang's adaptive speculation does not support it)"
    return None
