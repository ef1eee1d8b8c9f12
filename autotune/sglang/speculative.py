"""SGLang 0.5.23's speculative-decoding rules: what a trial's speculative flags actually run.

SGLang's full resolution (``ServerArgs.resolve_once``) needs the model's Hugging Face config and a
GPU platform, so it cannot run here. The speculative-decoding rules that decide what a trial
actually runs are cheap and model-independent, except one table lookup by architecture, and are
applied by :func:`resolve_speculative` (which :func:`autotune.sglang.args.parse_server_args` calls
on every parsed command line). They follow ``sglang/srt/arg_groups/speculative_hook.py`` of
SGLang 0.5.23 (``handle_speculative_decoding``, ``_handle_eagle_family``, ``_handle_ngram``,
``_init_adaptive_speculative_params``, ``_auto_choose_speculative_params``). The algorithm sets
and backend lists here are the one copy of these facts: the space rules and the emulator import
them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.errors import LaunchArgsError

SIMULATE_ACC_LEN_ENV = "SGLANG_SIMULATE_ACC_LEN"
"""SGLang's forced mean accept length (tokens per verify cycle, the bonus token included): a
measuring device for dummy weights, never a serving setting."""

SIMULATE_ACC_LEN_UNSET = -1.0
"""What SGLang reads for ``SGLANG_SIMULATE_ACC_LEN`` where it is unset (``EnvFloat(-1)`` in 0.5.17's
``srt/environ.py``): simulation off, as for any value at or below 0."""



def simulated_mean(forced: float, steps: int) -> float:
    """The mean accept length SGLang simulates for a forced one with ``steps`` draft steps: its
    default method (``match-expected``, ``_sample_simulated_acc_len`` in 0.5.17's
    ``srt/speculative/spec_utils.py``) clamps it to ``[1, steps + 1]`` and then matches it exactly."""
    return max(1.0, min(float(steps + 1), forced))


EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})
"""Algorithms SGLang resolves with ``_handle_eagle_family`` (NEXTN as an alias of EAGLE, rewritten
before): steps, topk and draft tokens set together or not at all, topk 1 forcing the draft tokens.
The one copy of this fact; the space rules and the emulator import it."""

BUILTIN_ALGORITHMS = (
    "DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE",
)
"""``SpeculativeAlgorithm`` members of SGLang 0.5.23; plugins may register more at run time."""

MAX_RUNNING_REQUESTS_WITH_SPEC = 48

# _auto_choose_speculative_params: these targets get the wide tree, everything else the chain.
_WIDE_TREE_ARCHS = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})
WIDE_TREE_PARAMS = (5, 4, 8)
CHAIN_PARAMS = (3, 1, 4)

# DEFAULT_ADAPTIVE_CONFIG's candidate steps, united over batch-size slots.
_DEFAULT_ADAPTIVE_CANDIDATE_STEPS = (0, 1, 3, 5, 7)
PAGED_TREE_BACKENDS = ("flashinfer", "fa3", "triton")
"""Attention backends that serve a draft tree (topk > 1) with page_size > 1."""


def infer_model_arch(model_path: str | None) -> str | None:
    """Guess the target's HF architecture, which picks SGLang's default speculative values.

    A local checkpoint's ``config.json`` is read (``architectures[0]``). Otherwise the name decides
    (the folder's, else its parent's): Llama 4 is not ``LlamaForCausalLM``, any other "llama" is,
    and "grok" is Grok-1. Anything else returns None, which SGLang's table treats like every other
    architecture.

    Args:
        model_path: A local directory or a hub id.

    Returns:
        The architecture name, or None when unknown.
    """
    if not model_path:
        return None
    config = Path(model_path) / "config.json"
    if config.is_file():
        try:
            archs = json.loads(config.read_text()).get("architectures") or []
        except (OSError, ValueError, AttributeError):
            archs = []
        if archs:
            return str(archs[0])
    # A checkpoint folder is often named for its role (``llama-8b/target``), so the parent's name
    # decides when the folder's own says nothing.
    path = Path(model_path)
    for name in (path.name.lower() or str(model_path).lower(), path.parent.name.lower()):
        if re.search(r"llama[-_ .]?4", name):
            return "Llama4ForConditionalGeneration"
        if "llama" in name:
            return "LlamaForCausalLM"
        if "grok" in name:
            return "Grok1ForCausalLM"
    return None


def auto_speculative_params(algorithm: str, model_arch: str | None) -> tuple[int, int, int]:
    """SGLang's auto-picked ``(num_steps, eagle_topk, num_draft_tokens)`` when none is given.

    Args:
        algorithm: The resolved algorithm (``EAGLE``, ``EAGLE3``, ``STANDALONE``).
        model_arch: The target's HF architecture, or None.

    Returns:
        (5, 4, 8) for Llama and Grok targets, (3, 1, 4) for every other target and for STANDALONE.
    """
    if algorithm == "STANDALONE":
        return CHAIN_PARAMS
    return WIDE_TREE_PARAMS if model_arch in _WIDE_TREE_ARCHS else CHAIN_PARAMS


def _attn_dp_size(args: Mapping[str, Any]) -> int:
    # handle_deprecated_dp_attention turns --enable-dp-attention --dp-size N into attn_dp_size N.
    if args.get("enable_dp_attention"):
        return int(args.get("dp_size") or 1)
    return int(args.get("attn_dp_size") or 1)


def _adaptive_candidate_steps(config_path: str | None) -> list[int]:
    if config_path is None:
        return list(_DEFAULT_ADAPTIVE_CANDIDATE_STEPS)
    data = json.loads(Path(config_path).read_text())
    steps: set[int] = set()
    for key, entry in data.items():
        if not str(key).isdigit():
            continue
        candidate = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (not isinstance(candidate, list) or not candidate
                or not all(isinstance(s, int) and s >= 0 for s in candidate)):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {candidate!r}")
        steps.update(candidate)
    if not steps:
        raise ValueError("speculative_adaptive_config must contain at least one integer-string BS key, "
                         f'e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(data)}')
    return sorted(steps)


def _adaptive_unsupported_reason(args: Mapping[str, Any]) -> str | None:
    algorithm = args.get("speculative_algorithm")
    topk = args.get("speculative_eagle_topk")
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if _attn_dp_size(args) > 1:
        return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    for flag in ("enable_multi_layer_eagle", "enable_two_batch_overlap", "enable_pdmux"):
        if args.get(flag):
            return f"{flag}=True is not supported"
    return None


def resolve_speculative(args: Mapping[str, Any], *, model_arch: str | None = None,
                        argv: list[str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Apply SGLang 0.5.23's speculative-decoding rules to parsed arguments.

    Rules (SGLang's own, unless marked "stricter"):

    * the algorithm is upper-cased and NEXTN becomes EAGLE; an unknown name is an error;
    * a draft model path gets revision ``main``;
    * ``--speculative-adaptive`` on EAGLE/EAGLE3 with topk 1 fixes topk 1, steps from the
      adaptive config's candidates, draft tokens = steps + 1; otherwise it is turned off;
    * EAGLE family: max_running_requests defaults to 48; steps, topk and draft tokens are all
      given or none (none: auto-picked by :func:`auto_speculative_params`); ``trtllm_mha`` needs
      topk 1; rejection sampling needs topk 1 and default accept thresholds; topk 1 forces draft
      tokens = steps + 1; topk > 1 with page_size > 1 needs flashinfer, fa3 or triton (checked
      only when the backend is explicit: SGLang picks the default per GPU);
    * stricter: steps without topk, or topk > 1 without draft tokens, is rejected (SGLang crashes
      later with a TypeError instead);
    * NGRAM: max_running_requests 48, topk = ngram max BFS breadth, draft tokens default 12,
      steps = draft tokens // topk;
    * other algorithms (DFLASH, DSPARK, UNO, ...) are upper-cased but not resolved further.

    Args:
        args: Parsed fields (underscore names).
        model_arch: The target's architecture; None infers it from ``model_path``.
        argv: The command line, attached to errors.

    Returns:
        (resolved copy of args, notes): notes are SGLang's warnings for what it changed.

    Raises:
        LaunchArgsError: When SGLang would refuse to start with these arguments.
    """
    out = dict(args)
    notes: list[str] = []

    def fail(message: str) -> LaunchArgsError:
        return LaunchArgsError(message, argv=argv)

    if out.get("speculative_draft_model_path") is not None and out.get("speculative_draft_model_revision") is None:
        out["speculative_draft_model_revision"] = "main"
    raw = out.get("speculative_algorithm")
    if raw is None:
        return out, notes
    algorithm = "EAGLE" if str(raw).upper() == "NEXTN" else str(raw).upper()
    if algorithm not in BUILTIN_ALGORITHMS:
        raise fail(f"Unknown speculative algorithm name: {algorithm}")
    out["speculative_algorithm"] = algorithm
    _check_draft_window(out, fail)

    if out.get("speculative_adaptive"):
        reason = _adaptive_unsupported_reason(out)
        if reason is not None:
            notes.append(f"speculative_adaptive disabled: {reason}. Falling back to static speculative params.")
            out["speculative_adaptive"] = False
        else:
            _init_adaptive(out, fail)

    if algorithm in EAGLE_FAMILY:
        _resolve_eagle_family(out, notes, fail, model_arch=model_arch)
    elif algorithm == "NGRAM":
        _resolve_ngram(out, notes, fail)
    return out, notes


def _check_draft_window(out: dict[str, Any], fail: Callable[[str], LaunchArgsError]) -> None:
    window = out.get("speculative_draft_window_size")
    sink = out.get("speculative_draft_sink_size")
    if window is not None and int(window) <= 0:
        raise fail(f"--speculative-draft-window-size must be positive, got {int(window)}.")
    if sink is not None:
        if int(sink) < 0:
            raise fail(f"--speculative-draft-sink-size must be non-negative, got {int(sink)}.")
        if window is None:
            raise fail("--speculative-draft-sink-size requires --speculative-draft-window-size.")


def _init_adaptive(out: dict[str, Any], fail: Callable[[str], LaunchArgsError]) -> None:
    try:
        candidates = _adaptive_candidate_steps(out.get("speculative_adaptive_config"))
    except (OSError, ValueError, AttributeError) as exc:
        raise fail(f"--speculative-adaptive-config: {exc}") from None
    if out.get("speculative_eagle_topk") is None:
        out["speculative_eagle_topk"] = 1
    if out.get("speculative_num_steps") is None:
        out["speculative_num_steps"] = candidates[len(candidates) // 2]
    steps = out["speculative_num_steps"]
    if steps not in candidates:
        raise fail(f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps "
                   f"{candidates}. Pass one of those values.")
    out["speculative_num_draft_tokens"] = steps + 1


def _resolve_eagle_family(out: dict[str, Any], notes: list[str], fail: Callable[[str], LaunchArgsError], *,
                          model_arch: str | None) -> None:
    algorithm = out["speculative_algorithm"]
    if algorithm == "STANDALONE" and _attn_dp_size(out) > 1:
        raise fail("Currently standalone speculative decoding does not support dp attention.")
    if out.get("max_running_requests") is None:
        out["max_running_requests"] = MAX_RUNNING_REQUESTS_WITH_SPEC
        notes.append("Max running requests is reset to 48 for speculative decoding. You can override "
                     "this by explicitly setting --max-running-requests.")

    steps = out.get("speculative_num_steps")
    topk = out.get("speculative_eagle_topk")
    draft = out.get("speculative_num_draft_tokens")
    if not out.get("speculative_adaptive") and steps is None:
        if topk is not None or draft is not None:
            raise fail(_partial_spec_message(steps, topk, draft))
        arch = model_arch if model_arch is not None else infer_model_arch(out.get("model_path"))
        steps, topk, draft = auto_speculative_params(algorithm, arch)
        notes.append(f"speculative (num_steps, eagle_topk, num_draft_tokens) auto-picked as "
                     f"({steps}, {topk}, {draft}) for architecture {arch or 'unknown'}")
    if steps is None or topk is None:
        raise fail(_partial_spec_message(steps, topk, draft))

    prefill_backend = out.get("prefill_attention_backend") or out.get("attention_backend")
    decode_backend = out.get("decode_attention_backend") or out.get("attention_backend")
    if "trtllm_mha" in (prefill_backend, decode_backend) and topk > 1:
        raise fail("trtllm_mha backend only supports topk = 1 for speculative decoding.")
    if out.get("speculative_use_rejection_sampling"):
        _check_rejection_sampling(out, topk, fail)
    if topk == 1 and draft != steps + 1:
        notes.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                     "speculative_eagle_topk == 1")
        draft = steps + 1
    if draft is None:
        raise fail(_partial_spec_message(steps, topk, draft))
    page_size = out.get("page_size") or 1
    backend = out.get("attention_backend")
    if topk > 1 and page_size > 1 and backend is not None and backend not in PAGED_TREE_BACKENDS:
        raise fail(f"speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                   f"{PAGED_TREE_BACKENDS}; got attention_backend={backend!r}. Use page_size == 1 "
                   "or one of those backends.")
    out["speculative_num_steps"] = steps
    out["speculative_eagle_topk"] = topk
    out["speculative_num_draft_tokens"] = draft


def _partial_spec_message(steps: Any, topk: Any, draft: Any) -> str:
    return ("--speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens must be "
            "given together or not at all (none: SGLang auto-picks all three; with topk 1 the draft "
            f"tokens may be left out, SGLang sets steps+1); got num_steps={steps}, eagle_topk={topk}, "
            f"num_draft_tokens={draft}")


def _check_rejection_sampling(out: dict[str, Any], topk: int, fail: Callable[[str], LaunchArgsError]) -> None:
    if out["speculative_algorithm"] not in ("EAGLE", "EAGLE3"):
        raise fail("--speculative-use-rejection-sampling is only supported for EAGLE / EAGLE3 / NEXTN, "
                   f"not speculative_algorithm={out['speculative_algorithm']}.")
    if topk != 1:
        raise fail("--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.")
    if (out.get("speculative_accept_threshold_single", 1.0) != 1.0
            or out.get("speculative_accept_threshold_acc", 1.0) != 1.0):
        raise fail("--speculative-use-rejection-sampling is incompatible with "
                   "--speculative-accept-threshold-single / --speculative-accept-threshold-acc; "
                   "rejection sampling ignores the accept thresholds.")


def _resolve_ngram(out: dict[str, Any], notes: list[str], fail: Callable[[str], LaunchArgsError]) -> None:
    if out.get("max_running_requests") is None:
        out["max_running_requests"] = MAX_RUNNING_REQUESTS_WITH_SPEC
        notes.append("Max running requests is reset to 48 for speculative decoding.")
    topk = int(out.get("speculative_ngram_max_bfs_breadth") or 10)
    out["speculative_eagle_topk"] = topk
    if out.get("speculative_num_draft_tokens") is None:
        out["speculative_num_draft_tokens"] = 12
        notes.append("speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding.")
    if out.get("speculative_num_steps") is None:
        out["speculative_num_steps"] = out["speculative_num_draft_tokens"] // topk
    page_size = out.get("page_size") or 1
    backend = out.get("attention_backend")
    if topk > 1 and page_size > 1 and backend is not None and backend != "flashinfer":
        raise fail(f"speculative_eagle_topk({topk}) > 1 with page_size({page_size}) > 1 is unstable and "
                   "produces incorrect results for paged attention backends. This combination is only "
                   "supported for the 'flashinfer' backend.")
    if _attn_dp_size(out) > 1:
        raise fail("Currently ngram speculative decoding does not support dp attention.")
