"""Human-readable renderings of trial results (the seed's phase-profile table)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.space import synthetic
from autotune.trial.level_results import LoadLevel

if TYPE_CHECKING:
    from autotune.trial.result import TrialResult


def _ms(v: float | None) -> str:
    return "      n/a" if v is None else f"{v:9.2f}"


def _pct(v: float | None) -> str:
    return "   n/a" if v is None else f"{v:5.1f}%"


def _num(v: float | None, fmt: str = ".2f") -> str:
    return "n/a" if v is None else format(v, fmt)


def phase_rows(*, speculative: bool) -> list[tuple[str, str]]:
    """The phases a profile table shows, as ``(label, key)``: ``PhaseProfile`` keeps ``<key>_ms``
    and ``<key>_pct`` for each."""
    rows = ([("Draft steps", "draft"), ("Target verify", "verify"), ("Draft re-extend", "extend")]
            if speculative else [("Decode", "decode")])
    return rows + [("Prefill (extend)", "prefill"), ("Other overhead", "other")]


def phase_table(result: TrialResult) -> str:
    """The seed's profile table: ms per cycle and share for each phase, then the verdict."""
    ph = result.phases or {}
    lines = []
    spec = not result.is_baseline
    for label, key in phase_rows(speculative=spec):
        lines.append(f"{label + ':':17s}{_ms(ph.get(f'{key}_ms'))} ms/cycle  ({_pct(ph.get(f'{key}_pct'))})")
    lines.append(f"{'TOTAL:':17s}{_ms(ph.get('cycle_ms'))} ms/cycle")
    if spec:
        lines.append(f"Accept len:      {_num(result.accept_length)}"
                     f"   (per-request meta_info {_num(result.accept_length_meta_info)},"
                     f" /server_info {_num(result.accept_length_server_info)})")
        note = synthetic.describe(result.env)
        if note and getattr(result, "acceptance", None) == synthetic.SYNTHETIC:
            lines.append(f"  {note}")
        lines.append(f"Break-even len:  {_num(result.break_even_accept_length)}")
    spread = f" +- {result.output_tok_s_spread:.1f}" if result.output_tok_s_spread is not None else ""
    lines.append(f"Eff tok/s:       {_num(result.output_tok_s, '.1f')}{spread}")
    lines.append(f"Baseline tok/s:  {_num(result.baseline_tok_s, '.1f')}")
    lines.append(f"Speedup:         {_num(result.speedup, '.3f')}x")
    verdict = result.status.upper() + (f": {result.reason}" if result.reason else "")
    lines.append(f"Verdict:         {verdict}")
    for level in getattr(result, "levels", None) or []:
        # The figures above are the primary level's; each level was judged on its own baseline.
        lines.append(f"At {LoadLevel.of_record(level).describe()}: {_num(level.get('output_tok_s'), '.1f')} tok/s, "
                     f"baseline {_num(level.get('baseline_tok_s'), '.1f')}, speedup "
                     f"{_num(level.get('speedup'), '.3f')}x, break-even len "
                     f"{_num(level.get('break_even_accept_length'))}: {level.get('status')}")
    return "\n".join(lines)


def summary_json(result: TrialResult) -> dict[str, Any]:
    """The keys promised by ``python -m autotune.trial --json``, plus the rest of the result."""
    d = result.to_dict()
    ph = result.phases or {}
    d["phases"] = {k: ph.get(k) for k in (
        "draft_ms", "verify_ms", "extend_ms", "decode_ms", "other_ms", "cycle_ms", "draft_pct",
        "verify_pct", "extend_pct", "decode_pct", "other_pct", "cycles", "cycles_source")}
    # Percent of the window's cycle time per phase; an unknown share stays None.
    d["phases"]["shares"] = {name: ph.get(f"{name}_pct") for name in (
        "draft", "verify", "extend", "decode", "prefill", "gpu_other", "other")}
    d["phases_full"] = ph or None
    d["server_startup"] = _startup_breakdown(getattr(result, "server_info", None))
    return d


def portable_paths(value: Any, roots: Mapping[str, str]) -> Any:
    """``value`` (a trial record, or any JSON value) with each root folder's absolute path replaced.

    Records carry the paths of the machine that measured them (model paths in the launch
    command, log paths); a record committed to the repo names them relative to a root instead:
    ``{"/srv/checkout": "", "/scratch/results": "<results>"}`` turns
    ``/srv/checkout/.gpu/models/x`` into ``.gpu/models/x`` and ``/scratch/results/rs/c00.log`` into
    ``<results>/rs/c00.log``. Every occurrence in a string is replaced (a path inside a command
    line too), on a path boundary only.
    """
    # A root followed by "/" or by the end of the path (space, quote, end of text).
    subs = [(re.compile(re.escape(root.rstrip("/")) + r"(/|(?=[\s'\"]|$))"), name)
            for root, name in roots.items()]

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            for pattern, name in subs:
                def repl(m: re.Match[str], name: str = name) -> str:
                    return (name + "/" if name else "") if m.group(1) else (name or ".")

                node = pattern.sub(repl, node)
            return node
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(value)


def _startup_breakdown(server_info: Any) -> dict[str, Any] | None:
    """SGLang's own start-up timings (weight load, CUDA-graph capture per kind), if it reports them."""
    if not isinstance(server_info, dict):
        return None
    states = server_info.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    startup = first.get("startup_time", server_info.get("startup_time"))
    return startup if isinstance(startup, dict) and startup else None
