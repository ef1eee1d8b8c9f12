"""SGLang's ``launch_server`` command line: parse, resolve, and render.

Every launch command autotune builds or exports goes through :func:`parse_server_args`. Where
SGLang is importable it is checked by SGLang's own argparse parser (``ServerArgs.add_cli_args``);
elsewhere by a built-in twin (:mod:`autotune.sglang._parser_twin`) that accepts and rejects the same
command lines for the flags autotune uses.

SGLang's full resolution (``ServerArgs.resolve_once``) needs the model's Hugging Face config and a
GPU platform, so it cannot run here. The speculative-decoding rules that decide what a trial
actually runs are cheap and model-independent, except one table lookup by architecture, and are
applied by :func:`resolve_speculative`. They follow ``sglang/srt/arg_groups/speculative_hook.py``
of SGLang 0.5.23 (``handle_speculative_decoding``, ``_handle_eagle_family``, ``_handle_ngram``,
``_init_adaptive_speculative_params``, ``_auto_choose_speculative_params``).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from autotune.sglang import _parser_twin as builtin
from autotune.sglang import parser_tables
from autotune.sglang import flags
from autotune.errors import AutotuneError, LaunchArgsError

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


# ------------------------------------------------------------------------------------------
# SGLang availability and its real parser.
# ------------------------------------------------------------------------------------------


def sglang_available() -> bool:
    """Whether ``sglang.srt.server_args`` imports here (about 2 s the first time, then cached)."""
    return flags.sglang_importable()


def sglang_version() -> str | None:
    """The installed SGLang version, or None without SGLang."""
    if not sglang_available():
        return None
    import sglang

    return getattr(sglang, "__version__", None)


def real_parser() -> argparse.ArgumentParser:
    """SGLang's own parser, built once (it raises instead of exiting).

    Raises:
        AutotuneError: When SGLang is not importable.
    """
    if not sglang_available():
        raise AutotuneError("SGLang is not importable here; install sglang to use its parser")
    return flags.installed_parser()


def _flag_set(use_sglang: bool | None) -> flags.FlagSet:
    if use_sglang is None:
        return flags.active_flags()
    if use_sglang:
        real_parser()  # the clear error without SGLang
        return flags.installed_flags()
    return flags.builtin_flags()


# ------------------------------------------------------------------------------------------
# Parsing.
# ------------------------------------------------------------------------------------------


def parse_server_args(argv: list[str], *, use_sglang: bool | None = None,
                      model_arch: str | None = None) -> dict[str, Any]:
    """Parse and resolve a ``python -m sglang.launch_server`` command line.

    Args:
        argv: The arguments after the module name.
        use_sglang: True forces the installed SGLang's parser, False the built-in 0.5.23 twin;
            None uses :func:`autotune.sglang.flags.active_flags` (SGLang's when importable).
        model_arch: The target's HF architecture (``LlamaForCausalLM``), which decides the
            auto-picked speculative values; None infers it from the model path.

    Returns:
        Field name -> value: every field argparse produced (the built-in parser leaves out flags
        it does not cover unless given), after the speculative rules of
        :func:`resolve_speculative`.

    Raises:
        LaunchArgsError: With argparse's own message for a bad flag or value, or a rule's message.
        AutotuneError: ``use_sglang=True`` without SGLang.
    """
    argv = [str(a) for a in argv]
    flag_set = _flag_set(use_sglang)
    parser = flag_set.parser
    merged = _merge_config(argv, flag_set)
    try:
        namespace = parser.parse_args(merged)
    except builtin.ParserExit as exc:
        message = exc.message if exc.status else "--help asks for the help text; it is not a launch option"
        raise LaunchArgsError(message, argv=argv) from None
    except SystemExit as exc:  # an action that exits by itself; never seen, but never fatal
        raise LaunchArgsError(f"SGLang's parser exited with status {exc.code}", argv=argv) from None
    except Exception as exc:  # a type or action callable that raises past argparse's own handling
        raise LaunchArgsError(f"{type(exc).__name__}: {exc}", argv=argv) from None
    args = vars(namespace)
    args.pop("config", None)
    resolved, _notes = resolve_speculative(args, model_arch=model_arch, argv=argv)
    return resolved


def _merge_config(argv: list[str], flag_set: flags.FlagSet) -> list[str]:
    """Splice a ``--config FILE`` YAML into argv the way ``prepare_server_args`` does.

    SGLang merges only for the exact token ``--config`` (``--config=f`` is parsed and ignored), puts
    the file's flags first so the command line wins, and raises ValueError for a bad file.
    """
    if "--config" not in argv:
        return argv
    try:
        if _is_installed(flag_set):
            return parser_tables.config_merger_class()(flag_set.parser).merge_config_with_args(argv)
        return _builtin_merge_config(argv, flag_set)
    except Exception as exc:  # ValueError, OSError, yaml.YAMLError: all mean a bad --config
        raise LaunchArgsError(str(exc), argv=argv) from None


def _is_installed(flag_set: flags.FlagSet) -> bool:
    # The installed flag set exists only once installed_flags() has built it (it is cached), so a
    # process on a flag table or the built-in twin finds out without importing SGLang (seconds).
    return flags.installed_flags.cache_info().currsize > 0 and flag_set is flags.installed_flags()


def _builtin_merge_config(argv: list[str], flag_set: flags.FlagSet) -> list[str]:
    indices = [i for i, a in enumerate(argv) if a == "--config"]
    if len(indices) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    index = indices[0]
    if index == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = Path(argv[index + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
    if not path.exists():
        raise ValueError(f"Config file not found: {argv[index + 1]}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    store_true, unsupported = flag_set.config_keys
    config_args: list[str] = []
    for key, value in data.items():
        key = str(key)
        norm = key.replace("-", "_")
        if norm in unsupported:
            raise ValueError(f"Unsupported config option '{norm}' with action '{unsupported[norm]}'")
        if isinstance(value, bool):
            if norm in store_true:
                config_args += [f"--{key}"] if value else []
            else:
                config_args += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            config_args += [f"--{key}", *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            config_args += [f"--{key}", json.dumps(value)]
        else:
            config_args += [f"--{key}", str(value)]
    return config_args + argv[:index] + argv[index + 2:]


# ------------------------------------------------------------------------------------------
# Speculative-decoding rules.
# ------------------------------------------------------------------------------------------


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


def _check_draft_window(out: dict[str, Any], fail: Any) -> None:
    window = out.get("speculative_draft_window_size")
    sink = out.get("speculative_draft_sink_size")
    if window is not None and int(window) <= 0:
        raise fail(f"--speculative-draft-window-size must be positive, got {int(window)}.")
    if sink is not None:
        if int(sink) < 0:
            raise fail(f"--speculative-draft-sink-size must be non-negative, got {int(sink)}.")
        if window is None:
            raise fail("--speculative-draft-sink-size requires --speculative-draft-window-size.")


def _init_adaptive(out: dict[str, Any], fail: Any) -> None:
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


def _resolve_eagle_family(out: dict[str, Any], notes: list[str], fail: Any, *,
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


def _check_rejection_sampling(out: dict[str, Any], topk: int, fail: Any) -> None:
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


def _resolve_ngram(out: dict[str, Any], notes: list[str], fail: Any) -> None:
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


# ------------------------------------------------------------------------------------------
# Rendering: field names -> flags, argv and --config YAML.
# ------------------------------------------------------------------------------------------


def to_cli_flag(name: str, *, flag_set: flags.FlagSet | None = None) -> str:
    """The canonical flag of a ServerArgs field: ``speculative_num_steps`` -> ``--speculative-num-steps``.

    Names are resolved by :meth:`autotune.sglang.flags.FlagSet.lookup` under the SGLang in use
    (``fp8_gemm_runner_backend`` -> ``--fp8-gemm-backend``; a deprecated alias -> its replacement);
    unknown names get dashes for underscores.
    """
    ref = (flag_set or flags.active_flags()).lookup(name)
    return ref.flag if ref is not None else "--" + name.replace("_", "-")


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def args_to_argv(mapping: Mapping[str, Any] | Iterable[tuple[str, Any]], *,
                 flag_set: flags.FlagSet | None = None) -> list[str]:
    """Render field values as SGLang flags, in the mapping's order.

    None is left out. A switch (store_true) is the bare flag when True and left out when False
    (``--no-x`` for SGLang's ``--x/--no-x`` pairs). A list gives the flag then its items; a dict is
    passed as JSON. Flags are the ones of the SGLang in use (:func:`to_cli_flag`).

    Args:
        mapping: Field name (underscore form) -> value.
        flag_set: The SGLang flags to render for; the active ones if None.

    Returns:
        The argv fragment.
    """
    flag_set = flag_set or flags.active_flags()
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    argv: list[str] = []
    for name, value in items:
        if value is None:
            continue
        ref = flag_set.lookup(name)
        flag = ref.flag if ref is not None else "--" + name.replace("_", "-")
        if ref is not None and ref.boolean_pair:
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, bool) and (ref is None or ref.switch):
            if value:
                argv.append(flag)
        elif isinstance(value, (list, tuple)):
            if value:
                argv += [flag, *(_format_value(v) for v in value)]
        else:
            argv += [flag, _format_value(value)]
    return argv


def args_to_config(mapping: Mapping[str, Any], *, flag_set: flags.FlagSet | None = None) -> dict[str, Any]:
    """Field values as the mapping of an SGLang ``--config`` YAML file.

    SGLang's loader turns each key ``k`` into ``--k`` verbatim, so keys are the flags without their
    dashes (``speculative-num-steps``), not field names. Store-true switches appear only when True.

    Args:
        mapping: Field name -> value.
        flag_set: The SGLang flags to write for; the active ones if None.

    Returns:
        YAML-ready mapping, in the input's order.

    Raises:
        LaunchArgsError: For a field the loader of the SGLang in use refuses (``--x/--no-x``
            pairs, deprecated switches, LoRA paths; in 0.5.17 also any field a deprecated alias
            shares), which must go on the command line instead.
    """
    flag_set = flag_set or flags.active_flags()
    store_true, unsupported = flag_set.config_keys
    out: dict[str, Any] = {}
    for name, value in mapping.items():
        if value is None:
            continue
        flag = to_cli_flag(name, flag_set=flag_set)
        key = flag[2:].replace("-", "_")
        refused = unsupported.get(key) or unsupported.get(name)
        if refused is not None:
            raise LaunchArgsError(f"{flag} cannot be written to an SGLang --config file for "
                                  f"{flag_set.describe()} (its loader rejects {refused} flags); pass it on "
                                  "the command line")
        if (key in store_true or name in store_true) and not value:
            continue
        value = list(value) if isinstance(value, tuple) else value
        out[flag[2:]] = value
    return out


def canonical_args(server_args: Mapping[str, Any], *,
                   flag_set: flags.FlagSet | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Server args keyed by the names the SGLang in use knows them by.

    Args:
        server_args: Name -> value; names may be fields, flag spellings or deprecated aliases.
        flag_set: The SGLang flags; the active ones if None.

    Returns:
        (canonical name -> value in the input's order, given name -> canonical name).

    Raises:
        LaunchArgsError: An ambiguous or unknown name (with the candidates and SGLang version),
            or two names of one flag given different values.
    """
    flag_set = flag_set or flags.active_flags()
    out: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for name, value in server_args.items():
        key = flag_set.resolve(name).key
        if key in out and out[key] != value:
            given = next(n for n, k in keys.items() if k == key)
            raise LaunchArgsError(f"server args {given!r} and {name!r} are the same flag "
                                  f"({to_cli_flag(key, flag_set=flag_set)} in {flag_set.describe()}) "
                                  f"with different values {out[key]!r} and {value!r}")
        out[key] = value
        keys[name] = key
    return out, keys


def default_value(name: str) -> Any:
    """SGLang's default for a field (before resolution).

    Raises:
        KeyError: For a field neither the built-in table covers nor an installed SGLang knows.
    """
    if name in builtin.covered():
        return builtin.default_of(name)
    if sglang_available():
        for action in real_parser()._actions:
            if action.dest == name:
                return action.default
    raise KeyError(name)


def is_server_flag(name: str) -> bool:
    """Whether the SGLang in use has a flag for ``name`` (exactly, or as a field)."""
    return flags.active_flags().lookup(name) is not None
