"""The emulator's performance model: a model of the speculative-decoding mechanism, not a lookup table.

One speculative cycle for a batch of ``b`` running requests with ``s`` steps, top-k ``k`` and ``N``
draft tokens costs:

- draft: ``s`` draft forwards over ``b*k`` tokens each (plus the draft's all-reduces under TP);
- verify: one target forward over ``b*N`` tokens. A dense target streams its weights once whatever
  the token count, so verify is nearly flat in N. A MoE target streams every *distinct expert* the
  tokens route to, so verify grows with N until the experts saturate;
- re-extend: one draft forward over the accepted positions;
- other: CPU work the overlap scheduler cannot hide.

A target forward at TP ``t`` shards its weight-bound time by ``reference_tp / t`` and pays
``layers * allreduce_per_layer`` all-reduces whose cost depends on the NCCL environment
(``NCCL_ALGO``, ``NCCL_PROTO``, channel counts) or on SGLang's custom all-reduce.

Acceptance decays with depth, a top-k tree recovers part of the top-1 misses
(:mod:`autotune.sim.acceptance`), and each prompt scales acceptance by a deterministic factor drawn
from a hash of its text. The launch settings read come from :mod:`autotune.sim.config`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Mapping

from autotune.sim.acceptance import (
    AcceptanceDist,
    accept_moments,
    cached_acceptance,
    expected_cycles,
    forced_acceptance,
    rates_acceptance,
)
from autotune.sim.config import ModelConfig
from autotune.sim.profile import Profile


@dataclass(frozen=True)
class CyclePhases:
    """Time of one speculative cycle (or one plain decode step), in ms, split by phase.

    ``draft_ms``, ``verify_ms``, ``extend_ms`` and ``decode_ms`` are GPU time, as SGLang's device timer
    counts them; ``other_ms`` is the rest of the wall time.
    """

    draft_ms: float = 0.0
    verify_ms: float = 0.0
    extend_ms: float = 0.0
    decode_ms: float = 0.0
    other_ms: float = 0.0

    @property
    def gpu_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.extend_ms + self.decode_ms

    @property
    def total_ms(self) -> float:
        return self.gpu_ms + self.other_ms

    def scaled(self, factor: float) -> "CyclePhases":
        return CyclePhases(self.draft_ms * factor, self.verify_ms * factor, self.extend_ms * factor,
                           self.decode_ms * factor, self.other_ms * factor)


@dataclass(frozen=True)
class Expectation:
    """What the model expects a benchmark to measure, noise-free."""

    output_tok_s: float          # aggregate output tok/s of a closed-loop run, prefill included
    decode_tok_s: float          # steady-state decode tok/s for the whole batch
    accept_length: float | None  # None without speculation
    cycle: CyclePhases
    batch: int
    # Decode cycles of one request and the busy time of one round of ``batch`` requests (prefill
    # and per-request overhead included): what a measured window spreads its wall time over.
    cycles: float | None = None
    busy_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        c = self.cycle
        total = c.total_ms
        spec = self.accept_length is not None
        return {
            "output_tok_s": self.output_tok_s,
            "decode_tok_s": self.decode_tok_s,
            "accept_length": self.accept_length,
            "batch": self.batch,
            "phases": {
                "draft_ms": c.draft_ms if spec else None,
                "verify_ms": c.verify_ms if spec else None,
                "extend_ms": c.extend_ms if spec else None,
                "decode_ms": None if spec else c.decode_ms,
                "other_ms": c.other_ms,
                "cycle_ms": total,
                "draft_pct": 100 * c.draft_ms / total if spec else None,
                "verify_pct": 100 * c.verify_ms / total if spec else None,
                "extend_pct": 100 * c.extend_ms / total if spec else None,
                "other_pct": 100 * c.other_ms / total,
            },
        }


# Seven-point Gauss-Hermite (probabilists') nodes and weights: E[g(Z)] for standard normal Z.
_GH_NODES = (-3.750439717725742, -2.366759410734541, -1.154405394739968, 0.0,
             1.154405394739968, 2.366759410734541, 3.750439717725742)
_GH_WEIGHTS = (0.000548268855972, 0.030757123967586, 0.240123178605013, 0.457142857142857,
               0.240123178605013, 0.030757123967586, 0.000548268855972)


class PerformanceModel:
    """Timing and acceptance of one launch configuration on one profile.

    Args:
        profile: The calibration profile.
        config: The launch settings.
    """

    def __init__(self, profile: Profile, config: ModelConfig) -> None:
        self.profile = profile
        self.config = config
        backend = config.attention_backend or profile.default_attention_backend
        self._attn_factor = profile.attention_backends.get(backend)
        self._ar_calls = profile.num_layers * profile.allreduce_per_layer
        self._steps: dict[int, CyclePhases] = {}

    # ----- start-up -------------------------------------------------------------------------------
    @property
    def startup_s(self) -> float:
        return self.profile.startup_s

    def check_startup(self, visible_gpus: int | None) -> str | None:
        """Why this launch would die at start-up, as SGLang would log it, or None."""
        p, c = self.profile, self.config
        if c.invalid_env:
            return ("NCCL WARN invalid value in environment: " + ", ".join(c.invalid_env)
                    + "; NCCL error: invalid argument (run with NCCL_DEBUG=WARN for details)")
        short = [m for m, rates in c.acceptance_by_text if c.spec is not None and len(rates) < c.spec.num_steps]
        if short:
            return (f"ValueError: AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT rates for {short} name fewer positions "
                    f"than --speculative-num-steps {c.spec.num_steps if c.spec else 0}")
        if visible_gpus is not None and visible_gpus < c.tp_size:
            return (f"RuntimeError: tp_size={c.tp_size} needs {c.tp_size} GPUs, but "
                    f"CUDA_VISIBLE_DEVICES exposes only {visible_gpus}")
        if c.tp_size > p.gpus_per_node:
            return (f"RuntimeError: tp_size={c.tp_size} exceeds the {p.gpus_per_node} GPUs of a "
                    f"node in profile {p.name}")
        if self._attn_factor is None:
            backend = c.attention_backend
            return (f"ValueError: attention backend {backend!r} is not supported on this hardware; "
                    f"supported: {sorted(p.attention_backends)}")
        if c.spec and c.spec.topk > 1 and (c.attention_backend == "trtllm_mha"):
            return "ValueError: trtllm_mha attention backend only supports topk = 1"
        frac = c.mem_fraction_static if c.mem_fraction_static is not None else p.mem_fraction_static
        usable = p.gpu_memory_gib * frac
        weights = (p.weights_gib + (p.draft_weights_gib if c.spec else 0.0)) / c.tp_size
        if weights > usable:
            return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                    f"{weights - usable + 0.5:.2f} GiB. GPU 0 has a total capacity of "
                    f"{p.gpu_memory_gib:.2f} GiB; weights need {weights:.2f} GiB per GPU at "
                    f"tp_size={c.tp_size} with mem_fraction_static={frac}")
        if usable - weights < p.activation_gib:
            return ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                    f"(KV cache would get {max(usable - weights, 0):.2f} GiB per GPU)")
        return None

    # ----- timing ---------------------------------------------------------------------------------
    def _allreduce_us(self, nbytes: float) -> float:
        p, c = self.profile, self.config
        t = c.tp_size
        if t <= 1:
            return 0.0
        ca = p.custom_all_reduce
        if c.custom_all_reduce and ca is not None and nbytes <= ca.max_bytes:
            return ca.latency_us + nbytes / (ca.bandwidth_gbps * 1e3)
        n = p.nccl
        lat_f = bw_f = 1.0
        if c.nccl_algo is not None:
            lat_f, bw_f = _lookup(n.algo, c.nccl_algo, (1.0, 1.0))
        if c.nccl_proto is not None:
            pl, pb = _lookup(n.proto, c.nccl_proto, (1.0, 1.0))
            lat_f, bw_f = lat_f * pl, bw_f * pb
        channels = n.default_channels
        if c.nccl_min_channels is not None:
            channels = max(channels, c.nccl_min_channels)
        if c.nccl_max_channels is not None:
            channels = min(channels, c.nccl_max_channels)
        ch_bw = min(channels, n.channels_saturate) / min(n.default_channels, n.channels_saturate)
        latency = n.latency_us * lat_f + n.latency_us_per_channel * (channels - n.default_channels)
        # Ring all-reduce moves 2(t-1)/t of the message; latency grows with the hop count.
        r = max(p.reference_tp, 2)
        hop = (1 + math.log2(t)) / (1 + math.log2(r))
        vol = (2 * (t - 1) / t) / (2 * (r - 1) / r)
        small = min(nbytes, n.large_message_bytes)
        large = max(nbytes - n.large_message_bytes, 0)
        return (max(latency, 0.5) * hop
                + small * vol / (n.bandwidth_gbps * bw_f * ch_bw * 1e3)
                + large * vol / (n.large_bandwidth_gbps * ch_bw * 1e3))

    def _comm_ms(self, tokens: int, calls: int) -> float:
        return calls * self._allreduce_us(tokens * self.profile.hidden_size * 2) / 1e3

    def _distinct_experts(self, tokens: int) -> float:
        p = self.profile
        e = p.effective_experts or float(p.num_experts)
        k = p.experts_per_token
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def forward_ms(self, tokens: int) -> float:
        """GPU time of one target forward over ``tokens`` tokens (all requests together)."""
        p = self.profile
        shard = p.reference_tp / self.config.tp_size
        weight_bound = p.dense_ms * (self._attn_factor or 1.0) + p.per_token_ms * (tokens - 1)
        if p.architecture == "moe":
            weight_bound += p.expert_ms * self._distinct_experts(tokens)
        return p.fixed_ms + weight_bound * shard + self._comm_ms(tokens, self._ar_calls)

    def _other_ms(self, base: float, batch: int) -> float:
        extra = self.profile.overlap_hidden_ms if self.config.disable_overlap_schedule else 0.0
        return base + extra + 0.01 * (batch - 1)

    def step(self, batch: int) -> CyclePhases:
        """One speculative cycle, or one plain decode step, for ``batch`` running requests."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        cached = self._steps.get(batch)
        if cached is None:
            cached = self._steps[batch] = self._compute_step(batch)
        return cached

    def _compute_step(self, batch: int) -> CyclePhases:
        p, c = self.profile, self.config
        if c.spec is None:
            return CyclePhases(decode_ms=self.forward_ms(batch), other_ms=self._other_ms(p.other_ms, batch))
        s = c.spec
        shard = p.reference_tp / c.tp_size
        draft_tokens = batch * s.topk
        per_step = (p.draft_step_ms + p.draft_topk_ms * (s.topk - 1)) * (1 + 0.02 * (draft_tokens - 1))
        # SGLang's EAGLE worker takes the first draft token from the re-extend's logits, so a
        # profile may say that many steps run no draft forward of their own.
        forwards = max(s.num_steps - p.draft_skip_steps, 0)
        draft = (p.draft_first_step_ms if forwards else 0.0) \
            + forwards * (per_step * shard ** 0.5 + self._comm_ms(draft_tokens, 2))
        verify_tokens = batch * s.num_draft_tokens
        verify = self.forward_ms(verify_tokens) + p.verify_fixed_ms
        if s.topk > 1:
            verify += p.verify_tree_ms * verify_tokens
        if c.speculative_attention_mode == "decode":
            verify += -p.verify_decode_mode_ms if s.topk == 1 else p.verify_decode_mode_ms * 2
        extend_tokens = batch * (s.num_steps + 1)
        extend = (p.extend_ms + p.extend_per_token_ms * (extend_tokens - 1)) * shard ** 0.5 \
            + self._comm_ms(extend_tokens, 2)
        spec_other = p.spec_other_ms + p.spec_other_per_step_ms * s.num_steps \
            + p.spec_other_per_token_ms * verify_tokens
        return CyclePhases(draft_ms=draft, verify_ms=max(verify, 0.1), extend_ms=extend,
                           other_ms=self._other_ms(spec_other, batch))

    def prefill_ms(self, num_tokens: int) -> float:
        """GPU time to prefill ``num_tokens`` prompt tokens (the draft's prefill included)."""
        p = self.profile
        shard = p.reference_tp / self.config.tp_size
        ms = p.prefill_fixed_ms + (p.prefill_ms_per_token * num_tokens) * shard \
            + self._comm_ms(max(num_tokens, 1), self._ar_calls)
        if self.config.spec is not None:
            ms *= 1.02  # the draft's own prefill: one layer against the target's many
        return ms

    # ----- acceptance -----------------------------------------------------------------------------
    def prompt_factor(self, prompt: str) -> float:
        """Deterministic per-prompt acceptance scale (log-normal, mean 1)."""
        digest = hashlib.blake2b(prompt.encode("utf-8", "replace"), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 0.5) / 2.0 ** 64
        return _factor(self.profile.acceptance.prompt_spread, NormalDist().inv_cdf(u))

    def acceptance_of(self, prompt: str) -> AcceptanceDist:
        """The cycle distribution of one prompt: the rates of the first
        ``AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT`` marker it contains (unless the accept length is
        forced), else the profile's acceptance at the prompt's factor."""
        s = self.config.spec
        if s is not None and self.config.simulate_acc_len is None:
            for marker, rates in self.config.acceptance_by_text:
                if marker in prompt:
                    return rates_acceptance(self.profile.acceptance, rates, s.num_steps, s.topk,
                                            s.num_draft_tokens)
        return self.acceptance(self.prompt_factor(prompt))

    def acceptance(self, factor: float = 1.0) -> AcceptanceDist:
        """Acceptance distribution of one cycle for a prompt with acceptance scale ``factor``.

        With ``SGLANG_SIMULATE_ACC_LEN`` set, every prompt gets the forced distribution instead.
        """
        if self.config.spec is None:
            return AcceptanceDist(probs=(1.0,), widths=(), num_proposed=0, _cum=(1.0,))
        s = self.config.spec
        if self.config.simulate_acc_len is not None:
            return forced_acceptance(self.profile.acceptance, s.num_steps, s.topk,
                                      s.num_draft_tokens, self.config.simulate_acc_len)
        return cached_acceptance(self.profile.acceptance, s.num_steps, s.topk, s.num_draft_tokens,
                                  round(factor, 4))

    def expected_accept_length(self) -> float | None:
        """Accept length averaged over the prompt distribution, or None without speculation."""
        if self.config.spec is None:
            return None
        if self.config.simulate_acc_len is not None:
            return self.acceptance().mean
        spread = self.profile.acceptance.prompt_spread
        return sum(w * self.acceptance(_factor(spread, z)).mean for z, w in zip(_GH_NODES, _GH_WEIGHTS, strict=True))

    def expected(self, *, batch: int = 1, input_len: int = 128, output_len: int = 256,
                 prompt_factors: tuple[float, ...] | None = None) -> Expectation:
        """Noise-free expectation of a closed-loop benchmark at concurrency ``batch``.

        Each request prefills ``input_len`` tokens (stalling the batch, as SGLang's scheduler does
        without chunked mixing), makes its first token there, then decodes ``output_len - 1`` more.
        ``prompt_factors`` are the acceptance factors of the prompts actually sent
        (:meth:`prompt_factor`); without them, the expectation is over the prompt distribution.
        """
        cycle = self.step(batch)
        cycles: float
        if self.config.spec is None:
            cycles = output_len - 1
            accept = None
            mean_tokens = 1.0
        elif self.config.simulate_acc_len is not None:
            # A forced length takes only two values, so the cut last cycle is counted exactly.
            dist = self.acceptance()
            accept = dist.mean
            cycles = expected_cycles(dist.probs, output_len - 1)
            mean_tokens = accept
        else:
            if prompt_factors:
                points = tuple((f, 1.0 / len(prompt_factors)) for f in prompt_factors)
            else:
                spread = self.profile.acceptance.prompt_spread
                points = tuple((_factor(spread, z), w) for z, w in zip(_GH_NODES, _GH_WEIGHTS, strict=True))
            s = self.config.spec
            accept, inv = accept_moments(self.profile.acceptance, s.num_steps, s.topk,
                                          s.num_draft_tokens, points)
            # The last cycle is cut at max_tokens: on average half a cycle's worth is wasted.
            cycles = (output_len - 1.5) * inv + 0.5
            mean_tokens = accept
        busy_ms = cycles * cycle.total_ms + batch * (self.prefill_ms(input_len) + self.profile.other_ms)
        output_tok_s = batch * output_len / busy_ms * 1e3
        decode_tok_s = batch * mean_tokens / cycle.total_ms * 1e3
        return Expectation(output_tok_s=output_tok_s, decode_tok_s=decode_tok_s,
                           accept_length=accept, cycle=cycle, batch=batch,
                           cycles=cycles, busy_ms=busy_ms)


def _factor(spread: float, z: float) -> float:
    return math.exp(spread * z - spread * spread / 2)


def _lookup(table: Mapping[str, tuple[float, float]], key: str,
            default: tuple[float, float]) -> tuple[float, float]:
    for k, v in table.items():
        if k.lower() == key:
            return v
    return default
