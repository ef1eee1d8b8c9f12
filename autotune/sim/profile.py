"""Calibration profiles for the SGLang emulator.

A profile describes one target model, its draft and the hardware, in the units a user can measure on
their own cluster (ms per forward, bytes per all-reduce, acceptance per draft position). The format is
documented in ``docs/sim-profiles.md``. Built-in profiles live in ``autotune/sim/profiles/*.yaml``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from autotune.errors import ConfigError

_BUILTIN_DIR = Path(__file__).parent / "profiles"


@dataclass(frozen=True)
class NcclModel:
    """All-reduce cost through NCCL: ``latency_us + bytes / bandwidth``, per call.

    ``algo`` and ``proto`` map a ``NCCL_ALGO`` / ``NCCL_PROTO`` value to ``[latency factor, bandwidth
    factor]`` relative to NCCL's own automatic choice (unset). Channels scale bandwidth up to
    ``channels_saturate`` and add ``latency_us_per_channel`` each.
    """

    latency_us: float
    bandwidth_gbps: float
    default_channels: int = 4
    channels_saturate: int = 8
    latency_us_per_channel: float = 0.2
    # Past this size NCCL leaves the low-latency protocols for the bandwidth-bound one.
    large_message_bytes: int = 262144
    large_bandwidth_gbps: float = 20.0
    algo: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    proto: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class CustomAllReduce:
    """SGLang's custom all-reduce kernel: used for messages up to ``max_bytes`` when enabled."""

    latency_us: float
    bandwidth_gbps: float
    max_bytes: int = 8 * 1024 * 1024


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance of the draft.

    ``first`` is P(top-1 draft token accepted) at depth 1; each deeper position multiplies it by
    ``decay``. A top-k tree recovers ``topk_recall`` of the top-1 misses, the rank-j candidate adding
    ``rank_decay**(j-2)`` of that share. ``prompt_spread`` is the per-prompt log-normal spread of
    acceptance.
    """

    first: float
    decay: float
    topk_recall: float = 0.5
    rank_decay: float = 0.5
    prompt_spread: float = 0.05
    cap: float = 0.97
    # Acceptance is correlated along a chain: once the first draft token is right the context is an
    # easy one, so the conditional acceptance of position 2 onwards is raised by this factor.
    after_first: float = 1.0


@dataclass(frozen=True)
class Profile:
    """One calibrated target + draft + hardware. All times in ms at batch 1 on the reference TP."""

    name: str
    description: str
    # Target model.
    architecture: str                 # "moe" or "dense"
    num_layers: int
    hidden_size: int
    weights_gib: float                # whole target, all ranks
    draft_weights_gib: float
    draft_architectures: tuple[str, ...]  # auto-pick (5,4,8) targets, per SGLang
    # Hardware.
    gpus_per_node: int
    gpu_memory_gib: float
    reference_tp: int
    # Target forward, split into what shards with TP and what does not.
    dense_ms: float                   # weight-bound time of attention/shared layers for one token
    per_token_ms: float               # extra compute per extra token in a forward (dense part)
    fixed_ms: float                   # launch/sync overhead per forward, does not shard
    # MoE expert streaming: every distinct expert touched costs expert_ms.
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ms: float = 0.0
    effective_experts: float = 0.0    # routing correlation: fewer distinct experts than uniform
    # Draft model.
    draft_step_ms: float = 0.3        # one draft forward, batch 1, topk 1
    draft_topk_ms: float = 0.02       # extra per extra top-k branch per request
    draft_first_step_ms: float = 0.0  # the first step also runs the draft's input projection
    draft_skip_steps: int = 0         # steps with no draft forward (SGLang EAGLE: 1, see docs)
    extend_ms: float = 0.6            # draft re-extend, fixed
    extend_per_token_ms: float = 0.05
    verify_fixed_ms: float = 0.0      # TARGET_VERIFY extras a plain decode does not run (mask, sampling)
    verify_tree_ms: float = 0.05      # tree-mask attention overhead per verified token when topk > 1
    verify_decode_mode_ms: float = 0.0  # saving of --speculative-attention-mode decode for topk==1
    # CPU work not hidden by overlap scheduling.
    other_ms: float = 0.1
    spec_other_ms: float = 0.15
    spec_other_per_step_ms: float = 0.0   # CPU per draft step (launches not in a CUDA graph)
    spec_other_per_token_ms: float = 0.0  # CPU per verified token (tree build, accept bookkeeping)
    overlap_hidden_ms: float = 0.5    # CPU scheduling the overlap scheduler hides
    # Batching: weight-bound parts are shared by the batch; compute parts grow per token.
    # Prefill.
    prefill_ms_per_token: float = 0.02
    prefill_fixed_ms: float = 5.0
    # Communication.
    nccl: NcclModel = NcclModel(latency_us=10.0, bandwidth_gbps=10.0)
    custom_all_reduce: CustomAllReduce | None = None
    allreduce_per_layer: int = 2
    # Attention backends: factor on the dense part; missing = unsupported on this hardware.
    attention_backends: Mapping[str, float] = field(default_factory=lambda: {"triton": 1.0})
    default_attention_backend: str = "triton"
    acceptance: Acceptance = Acceptance(first=0.6, decay=0.9)
    startup_s: float = 1.0
    # Share of startup_s spent capturing prefill CUDA graphs, which a launch without them skips
    # (--disable-prefill-cuda-graph, --cuda-graph-backend-prefill disabled). SGLang 0.5.17 on an
    # H200: 90 s with them, 62 s without (shared/gpu/README.md).
    prefill_graph_share: float = 0.3
    noise_cv: float = 0.01
    mem_fraction_static: float = 0.85
    activation_gib: float = 2.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SECTIONS = {"nccl": NcclModel, "custom_all_reduce": CustomAllReduce, "acceptance": Acceptance}


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with autotune."""
    return sorted(p.stem for p in _BUILTIN_DIR.glob("*.yaml"))


def _build(cls: type, data: Any, *, file: str, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"must be a mapping, got {type(data).__name__}", file=file, field=where)
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown}; allowed: {sorted(names)}", file=file, field=where)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SECTIONS and value is not None:
            value = _build(_SECTIONS[key], value, file=file, where=f"{where}.{key}" if where else key)
        elif key in ("algo", "proto"):
            value = {str(k): tuple(float(x) for x in v) for k, v in (value or {}).items()}
        elif key == "draft_architectures":
            value = tuple(value)
        kwargs[key] = value
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{exc}", file=file, field=where or None) from None
    for f in dataclasses.fields(cls):
        v = getattr(obj, f.name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise ConfigError(f"must be >= 0, got {v}", file=file, field=f"{where}.{f.name}" if where else f.name)
    return obj


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a built-in profile by name, or a YAML profile file by path.

    Raises:
        ConfigError: unknown name, unreadable file, or a field that is missing, unknown or negative.
    """
    text_path = Path(name_or_path)
    if text_path.suffix in (".yaml", ".yml") or text_path.exists():
        path = text_path
    else:
        path = _BUILTIN_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ConfigError(
                f"unknown simulator profile {str(name_or_path)!r}; built-in profiles: "
                f"{', '.join(builtin_profiles())}, or give a path to a YAML profile file")
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read profile: {exc.strerror}", file=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"invalid YAML: {getattr(exc, 'problem', exc)}", file=str(path),
                          line=mark.line + 1 if mark else None) from None
    profile = _build(Profile, data, file=str(path), where="")
    if profile.prefill_graph_share > 1:
        raise ConfigError(f"must be a share in [0, 1], got {profile.prefill_graph_share}", file=str(path),
                          field="prefill_graph_share")
    if profile.architecture not in ("moe", "dense"):
        raise ConfigError(f"architecture must be 'moe' or 'dense', got {profile.architecture!r}",
                          file=str(path), field="architecture")
    if profile.architecture == "moe" and not (profile.num_experts and profile.experts_per_token):
        raise ConfigError("a moe profile needs num_experts and experts_per_token", file=str(path))
    if profile.default_attention_backend not in profile.attention_backends:
        raise ConfigError("default_attention_backend must be one of attention_backends",
                          file=str(path), field="default_attention_backend")
    return profile
