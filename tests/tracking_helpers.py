"""Trial results built directly (no servers) for the tracking, export and MLflow UI tests."""

from __future__ import annotations

from typing import Any

from autotune.launch.spec import LaunchSpec
from autotune.trial.measure import DEVICE_TIMER_ENV
from autotune.trial.result import TrialResult

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT = "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"
SIM_ENV = {**DEVICE_TIMER_ENV, "AUTOTUNE_SIM_PROFILE": "llama-3.1-8b-eagle3-h100", "AUTOTUNE_SIM_SEED": "7"}


def eagle(steps: int, topk: int, draft: int | None = None, **more: Any) -> dict[str, Any]:
    """Searched params of an EAGLE3 trial, named as in a search space."""
    return {"speculative_algorithm": "EAGLE3", "speculative_num_steps": steps,
            "speculative_eagle_topk": topk,
            "speculative_num_draft_tokens": draft if draft is not None else (steps + 1 if topk == 1 else 8),
            **more}


def launch(params: dict[str, Any], *, backend: str = "sim") -> LaunchSpec:
    """The launch a trial of the sim backend runs (metrics on, device timer, sim profile)."""
    return LaunchSpec.from_params(model_path=MODEL, draft_model_path=DRAFT,
                                  fixed_args={"tp_size": 1, "enable_metrics": True,
                                              "mem_fraction_static": 0.85},
                                  params=params, fixed_env=SIM_ENV, backend=backend)


def result(params: dict[str, Any], tok_s: float | None, *, status: str = "feasible",
           baseline_tok_s: float | None = 1000.0, accept: float | None = 3.2,
           break_even: float | None = 1.7, reason: str | None = None, **fields: Any) -> TrialResult:
    """A judged trial result as trial.evaluate would return it; None stays None."""
    spec = launch(params)
    speculative = params.get("speculative_algorithm") is not None
    phases = ({"draft_ms": 2.1, "verify_ms": 5.2, "extend_ms": 0.9, "decode_ms": None, "other_ms": 0.6,
               "cycle_ms": 8.8, "draft_pct": 23.9, "verify_pct": 59.1, "extend_pct": 10.2, "other_pct": 6.8,
               "device_timer": True, "notes": []}
              if speculative else
              {"decode_ms": 6.1, "other_ms": 0.5, "cycle_ms": 6.6, "decode_pct": 92.4, "other_pct": 7.6,
               "device_timer": True, "notes": []})
    if reason is None and status == "infeasible":
        reason = "does not beat the baseline (speedup 0.900x, needs > 1x)"
    values: dict[str, Any] = {
        "status": status, "reason": reason, "params": dict(params), "is_baseline": not speculative,
        "launch_command": spec.shell_command(), "argv": spec.argv(python="python"), "env": dict(spec.env),
        "output_tok_s": tok_s, "output_tok_s_spread": 4.0 if tok_s else None,
        "output_tok_s_repeats": [tok_s - 4, tok_s, tok_s + 4] if tok_s else [],
        "decode_tok_s_p50": tok_s / 8 if tok_s else None, "ttft_ms_p50": 41.0, "ttft_ms_p90": 55.0,
        "ttft_ms_p99": 80.0, "itl_ms_p50": 6.0, "itl_ms_p90": 7.5, "itl_ms_p99": 9.0, "e2e_ms_p50": 900.0,
        "e2e_ms_p90": 1100.0, "e2e_ms_p99": 1300.0, "completed": 24, "failed_requests": 0,
        "accept_length": accept if speculative else None,
        "baseline_tok_s": baseline_tok_s if speculative else tok_s,
        "speedup": (tok_s / baseline_tok_s if tok_s and baseline_tok_s and speculative else (1.0 if tok_s else None)),
        "break_even_accept_length": break_even if speculative else None, "feasible": status == "feasible",
        "phases": phases, "log_tail": "[sim] server ready\n[sim] decode batch 8\n",
        "records": [{"prompt_tokens": 100 + i, "output_tokens": 128, "ttft_ms": 40.0 + i} for i in range(3)]}
    values.update(fields)
    return TrialResult(**values)


def failed(params: dict[str, Any], reason: str = "out of memory at start-up (CUDA out of memory)") -> TrialResult:
    """A trial whose server never came up: no measurement at all."""
    spec = launch(params)
    return TrialResult(status="failed", reason=reason, params=dict(params),
                       is_baseline=params.get("speculative_algorithm") is None,
                       launch_command=spec.shell_command(), argv=spec.argv(python="python"),
                       env=dict(spec.env), feasible=False,
                       log_tail="Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory\n")
