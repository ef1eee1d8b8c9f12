"""Measured trial summaries for fitting an emulator profile: loading, checking and splitting.

Each input is one JSON object as ``autotune.trial.report.summary_json`` writes it (``python -m
autotune.trial --json``, ``scripts/gpu_trials.py``). A summary that cannot be used (a failed trial,
a phase that is unknown, a batch above 1) is *excluded with its reason*, never read as zero.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.figures import finite
from autotune.tracking.content import spec_from_argv

_OK_STATUSES = ("ok", "feasible", "infeasible")
# The device timer's phases that a window spreads over its cycles; "other" is the rest.
_GPU_PHASES = ("draft", "verify", "extend", "decode", "prefill", "gpu_other")


@dataclass(frozen=True)
class MeasuredConfig:
    """One usable measured config, in per-cycle milliseconds of its measured window.

    Attributes:
        id: ``plain`` or ``STEPS-TOPK-DRAFT[@FORCED_ACC]`` (``#2`` etc. for a repeated config).
        source: The file (and item) it came from.
        server_args: Launch flags as ``ServerArgs`` names (from the summary's ``argv``).
        env: The launch environment.
        steps, topk, draft_tokens: Speculative settings; None for plain decode.
        forced_acc: ``SGLANG_SIMULATE_ACC_LEN`` if set and > 0.
        tok_s: Measured output tok/s (median of repeats); tok_s_spread: its half-range or None.
        repeats: Measured repeats.
        cycles_per_request: Decode cycles (verify cycles, or plain decode steps) per request.
        output_len: Output tokens per request.
        phases: Per-cycle ms: draft, verify, extend, decode, prefill, gpu_other, other, cycle.
        accept_window_decode, accept_meta_info, accept_server_info: The three accept readings.
        startup_s: Server start-up seconds, if measured.
        notes: What was assumed while reading it.
    """

    id: str
    source: str
    server_args: Mapping[str, Any]
    env: Mapping[str, str]
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    forced_acc: float | None
    tok_s: float
    tok_s_spread: float | None
    repeats: int
    cycles_per_request: float
    output_len: float
    phases: Mapping[str, float]
    accept_window_decode: float | None = None
    accept_meta_info: float | None = None
    accept_server_info: float | None = None
    startup_s: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def is_baseline(self) -> bool:
        return self.steps is None

    @property
    def spec_steps(self) -> int:
        """``steps`` of a speculative observation.

        Raises:
            ValueError: For plain decode, which has none.
        """
        if self.steps is None:
            raise ValueError(f"{self.id} is plain decode: it has no speculative steps")
        return self.steps

    @property
    def spec_draft_tokens(self) -> int:
        """``draft_tokens`` of a speculative observation.

        Raises:
            ValueError: For plain decode, which has none.
        """
        if self.draft_tokens is None:
            raise ValueError(f"{self.id} is plain decode: it has no draft tokens")
        return self.draft_tokens

    @property
    def is_tree(self) -> bool:
        return bool(self.topk and self.topk > 1)

    @property
    def unmodelled_ms(self) -> float:
        """Timed GPU work per cycle the model has no phase for; it is compared as "other"."""
        return self.phases["gpu_other"] + (0.0 if self.is_baseline else self.phases["decode"])


@dataclass(frozen=True)
class Excluded:
    """A summary left out of the fit, and why."""

    source: str
    reason: str


@dataclass
class Dataset:
    """Every summary read: the usable ones and the excluded ones."""

    observations: list[MeasuredConfig] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)

    def by_id(self) -> dict[str, MeasuredConfig]:
        return {o.id: o for o in self.observations}


class _Skip(Exception):
    """Internal: this summary cannot be used, for the reason given."""


def server_args_of(argv: Sequence[str]) -> dict[str, Any]:
    """The server args of a trial's launch command, read the way tracking reads them."""
    try:
        return dict(spec_from_argv([str(w) for w in argv]).server_args)
    except ValueError:
        return {}


def _spec_settings(args: Mapping[str, Any], params: Mapping[str, Any]) -> tuple[int, int, int] | None:
    algo = args.get("speculative_algorithm") or params.get("speculative_algorithm")
    steps = args.get("speculative_num_steps", params.get("speculative_num_steps"))
    if not algo and steps is None:
        return None
    try:
        s = int(steps)
        k = int(args.get("speculative_eagle_topk", params.get("speculative_eagle_topk", 1)))
        n = args.get("speculative_num_draft_tokens", params.get("speculative_num_draft_tokens"))
        n = int(n) if n is not None else (s + 1 if k == 1 else None)
    except (TypeError, ValueError) as exc:
        raise _Skip(f"speculative settings unreadable: {exc}") from None
    if n is None:
        raise _Skip("speculative_num_draft_tokens unknown for a top-k > 1 config")
    return s, k, n


def _observation(data: Any, source: str) -> MeasuredConfig:
    if not isinstance(data, Mapping):
        raise _Skip(f"not a trial summary (a JSON object), got {type(data).__name__}")
    status = data.get("status")
    if status not in _OK_STATUSES:
        raise _Skip(f"trial status {status!r} ({data.get('reason') or 'no reason given'}); only "
                    f"{', '.join(_OK_STATUSES)} trials are measurements")
    tok_s = finite(data.get("output_tok_s"))
    if tok_s is None or tok_s <= 0:
        raise _Skip(f"output_tok_s is {data.get('output_tok_s')!r}, needs a positive number")
    full = data.get("phases_full")
    if not isinstance(full, Mapping) and isinstance(data.get("phases"), Mapping) \
            and "delta_requests" in data["phases"]:
        full = data["phases"]  # a TrialResult dict (a FileBaselineStore file) holds the full profile
    if not isinstance(full, Mapping):
        raise _Skip("phases_full missing (needs summary_json of a run with the device timer)")
    raw_params = data.get("params")
    params: Mapping[str, Any] = raw_params if isinstance(raw_params, Mapping) else {}
    argv = data.get("argv")
    args = server_args_of(argv) if isinstance(argv, list) else {}
    if not args:
        args = {k: v for k, v in params.items() if not str(k).isupper()}
    env = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
    spec = _spec_settings(args, params)
    tp = int(args.get("tp_size", 1) or 1)
    if tp != 1:
        raise _Skip(f"tp_size {tp}: the fit covers a single GPU (tp_size 1) only")
    notes: list[str] = []

    def need(key: str) -> float:
        v = finite(full.get(key))
        if v is None:
            raise _Skip(f"phases_full.{key} is unknown ({full.get(key)!r})")
        return v

    cycles, requests, gen = need("cycles"), need("delta_requests"), need("delta_generation_tokens")
    cycle_ms = need("cycle_ms")
    if cycles <= 0 or requests <= 0 or cycle_ms <= 0:
        raise _Skip(f"empty window (cycles {cycles}, requests {requests}, cycle_ms {cycle_ms})")
    if spec is not None:
        verify_calls = need("delta_verify_calls")
        batch = verify_calls / cycles
    else:
        batch = (gen - requests) / cycles
    if batch > 1.05:
        raise _Skip(f"mean batch {batch:.2f}: the fit covers concurrency 1 only")
    phases: dict[str, float] = {"cycle": cycle_ms}
    needed = ("verify", "extend") if spec else ("decode",)
    for name in _GPU_PHASES:
        v = finite(full.get(f"{name}_ms"))
        if v is None and name == "draft" and spec is not None and spec[0] == 1:
            # One step runs no draft forward in SGLang, so its timer has no eagle_draft series
            # and the trial leaves draft (and so other) unknown; it is a known zero here.
            v = 0.0
            notes.append("draft_ms unknown at 1 step: taken as 0 (SGLang runs no draft forward)")
        if v is None and (name in needed or name == "draft" and spec is not None):
            raise _Skip(f"phases_full.{name}_ms is unknown (device timer off, or no series)")
        phases[name] = v if v is not None else 0.0
    other = finite(full.get("other_ms"))
    if other is None:
        other = cycle_ms - math.fsum(phases[p] for p in _GPU_PHASES)
        notes.append("other_ms recomputed as cycle_ms minus the timed phases")
    phases["other"] = other
    forced = None
    raw = env.get("SGLANG_SIMULATE_ACC_LEN")
    if spec is not None and raw not in (None, ""):
        try:
            forced = float(raw) if float(raw) > 0 else None
        except ValueError:
            forced = None
    if spec is None:
        oid = "plain"
    else:
        oid = f"{spec[0]}-{spec[1]}-{spec[2]}" + (f"@{forced:g}" if forced else "")
    repeats = data.get("output_tok_s_repeats")
    return MeasuredConfig(
        id=oid, source=source, server_args=args, env=env,
        steps=spec[0] if spec else None, topk=spec[1] if spec else None,
        draft_tokens=spec[2] if spec else None, forced_acc=forced,
        tok_s=tok_s, tok_s_spread=finite(data.get("output_tok_s_spread")),
        repeats=len(repeats) if isinstance(repeats, list) and repeats else 1,
        cycles_per_request=cycles / requests, output_len=gen / requests, phases=phases,
        accept_window_decode=finite(full.get("accept_length_window_decode")),
        accept_meta_info=finite(data.get("accept_length_meta_info")),
        accept_server_info=finite(data.get("accept_length_server_info")),
        startup_s=finite(data.get("startup_s")), notes=tuple(notes))


def _files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(p.glob("*.json")))
        elif p.exists():
            out.append(p)
        else:
            raise ConfigError("no such file or directory", file=str(p))
    if not out:
        raise ConfigError("no measurement files (*.json) found in "
                          + ", ".join(str(p) for p in paths))
    return out


def load_measurements(paths: Iterable[str | Path]) -> Dataset:
    """Read trial summaries from files and directories (every ``*.json`` in a directory).

    A file may hold one summary or a JSON list of them. Unusable summaries are kept in
    ``Dataset.excluded`` with the reason.

    Raises:
        ConfigError: a path does not exist, nothing was found, or a file is not valid JSON.
    """
    ds = Dataset()
    seen: dict[str, int] = {}
    for path in _files(paths):
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
        except ValueError as exc:
            line = getattr(exc, "lineno", None)
            raise ConfigError(f"not valid JSON: {exc.msg if hasattr(exc, 'msg') else exc}",
                              file=str(path), line=line) from None
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            source = str(path) if len(items) == 1 else f"{path}[{i}]"
            try:
                obs = _observation(item, source)
            except _Skip as skip:
                ds.excluded.append(Excluded(source=source, reason=str(skip)))
                continue
            n = seen.get(obs.id, 0) + 1
            seen[obs.id] = n
            if n > 1:
                obs = _replace_id(obs, f"{obs.id}#{n}")
            ds.observations.append(obs)
    return ds


def _replace_id(obs: MeasuredConfig, new_id: str) -> MeasuredConfig:
    from dataclasses import replace
    return replace(obs, id=new_id)


def split(ds: Dataset, *, half: str | None = None,
          fit_ids: Sequence[str] | None = None) -> tuple[list[MeasuredConfig], list[MeasuredConfig], list[str]]:
    """Deterministic fit / predict halves.

    With ``fit_ids`` those configs (and every plain baseline) are fitted and the rest predicted.
    With ``half`` (``even`` or ``odd``), chains (top-k 1) sorted by (steps, forced accept length)
    and trees sorted the same way alternate between the halves: ``even`` fits positions 0, 2, 4,
    ... of each group, ``odd`` fits 1, 3, 5, ... Plain baselines are always fitted, and a group
    with a single config is always fitted (its parameters could not be fitted otherwise).

    Returns:
        ``(fit, predict, notes)``.

    Raises:
        ConfigError: no plain baseline, an unknown id, or nothing left to fit or to predict.
    """
    obs = ds.observations
    base = [o for o in obs if o.is_baseline]
    if not base:
        raise ConfigError("no usable plain-decode (baseline) summary among the measurements; the "
                          "fit needs one (run the baseline, e.g. python -m autotune.trial with "
                          "{} params, and include its JSON)")
    spec = [o for o in obs if not o.is_baseline]
    notes: list[str] = []
    if fit_ids is not None:
        known = {o.id for o in obs}
        unknown = [i for i in fit_ids if i not in known]
        if unknown:
            raise ConfigError(f"unknown config id(s) {unknown}; known: {sorted(known)}",
                              field="--fit")
        fit = base + [o for o in spec if o.id in fit_ids]
        pred = [o for o in spec if o.id not in fit_ids]
    else:
        if half not in ("even", "odd"):
            raise ConfigError(f"half must be 'even' or 'odd', got {half!r}", field="--fit-half")
        fit, pred = list(base), []
        parity = 0 if half == "even" else 1
        for group in ([o for o in spec if not o.is_tree], [o for o in spec if o.is_tree]):
            group.sort(key=lambda o: (o.steps, o.topk, o.draft_tokens, o.forced_acc or 0.0, o.id))
            if len(group) == 1:
                notes.append(f"{group[0].id} is the only {'tree' if group[0].is_tree else 'chain'}"
                             " config: fitted, not predicted")
                fit.extend(group)
                continue
            for j, o in enumerate(group):
                (fit if j % 2 == parity else pred).append(o)
    if not [o for o in fit if not o.is_baseline]:
        raise ConfigError("no speculative config in the fit half: nothing to fit the draft, "
                          "verify and re-extend phases to")
    if not pred:
        raise ConfigError("no config left to predict; give more configs or a different split")
    return fit, pred, notes
