"""SGLang 0.5.23's ``launch_server`` command line, rebuilt for machines without SGLang.

A laptop, CI or the emulator must accept and reject the same command lines as SGLang. Two things
make that work without importing SGLang:

* ``FLAG_TABLE`` lists every flag SGLang's parser registers, in registration order, with its arity.
  Registering all of them (not only the ones autotune reads) keeps argparse's prefix matching
  identical: ``--cuda-graph-max-bs`` is ambiguous only because both ``-decode`` and ``-prefill``
  exist, and ``--tp`` is accepted only because ``--tp-size`` is the one flag it abbreviates.
* ``COVERED`` gives the flags autotune's search spaces and the emulator read their exact SGLang
  type, choices and default. Every other flag is carried through as a string (or int/float),
  and appears in the parsed result only when it was given.

The table is generated from SGLang's own parser by :func:`describe_parser`;
``tests/test_sglang_args.py`` fails when it drifts from the installed SGLang and prints how to
regenerate it.
"""

from __future__ import annotations

import argparse
import functools
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

SGLANG_VERSION = "0.5.23"


@dataclass(frozen=True)
class FlagInfo:
    """One argparse action of SGLang's parser.

    Attributes:
        arity: ``"0"`` store_true, ``"D"`` deprecated store_true (same parsing, not allowed in a
            ``--config`` file), ``"B"`` ``--x/--no-x`` pair, ``"1"`` one value, or argparse's
            nargs ``"+"``, ``"*"``, ``"?"``.
        type_code: ``"s"`` str, ``"i"`` int, ``"f"`` float, ``"h"`` human-readable int, ``"-"`` none.
        config: ``"t"`` a store_true key in a ``--config`` YAML, ``"v"`` a valued key, otherwise the
            action class name SGLang's config loader rejects the key with.
        dest: The ``ServerArgs`` field (argparse dest).
        option_strings: The spellings, canonical first. A ``"B"`` flag lists only its positive
            spellings; argparse derives the ``--no-`` ones.
    """

    arity: str
    type_code: str
    config: str
    dest: str
    option_strings: tuple[str, ...]

    @property
    def flag(self) -> str:
        """The canonical spelling, ``--speculative-num-steps``."""
        return self.option_strings[0]


# --------------------------------------------------------------------------------------------
# Value types with SGLang's names: argparse puts the type's __name__ into its messages
# ("invalid human_readable_int value"), so the names must match for the messages to match.
# --------------------------------------------------------------------------------------------


def human_readable_int(value: str) -> int:
    """An int with an optional SI (``25.6k``) or IEC (``1Ki``) suffix, as SGLang accepts it.

    Args:
        value: The command-line text.

    Returns:
        The integer.

    Raises:
        argparse.ArgumentTypeError: With SGLang's wording, for text that is not such a number.
    """
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def parse_cuda_graph_backend_arg(raw: str) -> str:
    """SGLang's check for the retired ``tc_piecewise`` CUDA-graph backend."""
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


_TYPES: dict[str, Callable[[str], Any] | None] = {
    "s": str, "i": int, "f": float, "h": human_readable_int, "-": None,
}

# --------------------------------------------------------------------------------------------
# Flags autotune reads, with SGLang 0.5.23's exact type, choices and default.
# --------------------------------------------------------------------------------------------

ATTENTION_BACKEND_CHOICES = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3",
    "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla",
    "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter",
    "wave", "intel_amx", "ascend", "intel_xpu",
)
LOAD_FORMAT_CHOICES = (
    "auto", "pt", "safetensors", "instanttensor", "npcache", "dummy", "sharded_state",
    "presharded", "gguf", "expert_pack", "bitsandbytes", "mistral", "layered", "flash_rl",
    "remote", "remote_instance", "fastsafetensors", "private", "runai_streamer",
)
DTYPE_CHOICES = ("auto", "half", "float16", "bfloat16", "float", "float32")
KV_CACHE_DTYPE_CHOICES = (
    "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16",
)
CUDA_GRAPH_BACKEND_CHOICES = ("full", "breakable", "disabled")


@dataclass(frozen=True)
class Spec:
    """Type, choices and default of a covered flag (store_true flags need only the default)."""

    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    default: Any = None
    required: bool = False


_S, _I, _F = Spec(str), Spec(int), Spec(float)
_OFF = Spec(default=False)

COVERED: dict[str, Spec] = {
    # Model and serving.
    "model_path": Spec(str, required=True),
    "tokenizer_path": _S,
    "revision": _S,
    "served_model_name": _S,
    "host": Spec(str, default="127.0.0.1"),
    "port": Spec(int, default=30000),
    "load_format": Spec(str, LOAD_FORMAT_CHOICES, "auto"),
    "trust_remote_code": _OFF,
    "dtype": Spec(str, DTYPE_CHOICES, "auto"),
    "kv_cache_dtype": Spec(str, KV_CACHE_DTYPE_CHOICES, "auto"),
    "context_length": Spec(human_readable_int),
    "device": _S,
    "log_level": Spec(str, default="info"),
    "random_seed": _I,
    "enable_metrics": _OFF,
    "skip_server_warmup": _OFF,
    "enable_deterministic_inference": _OFF,
    # Parallelism.
    "tp_size": Spec(int, default=1),
    "dp_size": Spec(int, default=1),
    "ep_size": Spec(int, default=1),
    "pp_size": Spec(int, default=1),
    "attn_dp_size": Spec(int, default=1),
    # Memory and scheduling.
    "mem_fraction_static": _F,
    "max_running_requests": _I,
    "max_total_tokens": Spec(human_readable_int),
    "chunked_prefill_size": _I,
    "page_size": _I,
    "disable_radix_cache": _OFF,
    "disable_overlap_schedule": _OFF,
    "enable_two_batch_overlap": _OFF,
    "enable_pdmux": _OFF,
    # Communication.
    "disable_custom_all_reduce": _OFF,
    "enable_torch_symm_mem": _OFF,
    "enable_symm_mem": _OFF,
    "enable_nccl_nvls": _OFF,
    "enable_mscclpp": _OFF,
    "pre_warm_nccl": _OFF,
    # Compilation and CUDA graphs.
    "enable_torch_compile": _OFF,
    "torch_compile_max_bs": Spec(int, default=32),
    "cuda_graph_max_bs_decode": _I,
    "cuda_graph_bs_decode": _I,
    "cuda_graph_backend_decode": Spec(parse_cuda_graph_backend_arg, CUDA_GRAPH_BACKEND_CHOICES),
    "cuda_graph_backend_prefill": Spec(parse_cuda_graph_backend_arg, CUDA_GRAPH_BACKEND_CHOICES),
    "disable_prefill_cuda_graph": _OFF,
    "disable_decode_cuda_graph": _OFF,
    "disable_cuda_graph": _OFF,
    # Attention.
    "attention_backend": Spec(str, ATTENTION_BACKEND_CHOICES),
    "decode_attention_backend": Spec(str, ATTENTION_BACKEND_CHOICES),
    "prefill_attention_backend": Spec(str, ATTENTION_BACKEND_CHOICES),
    # Speculative decoding.
    "speculative_algorithm": _S,
    "speculative_draft_model_path": _S,
    "speculative_draft_model_revision": _S,
    "speculative_draft_load_format": Spec(str, LOAD_FORMAT_CHOICES),
    "speculative_num_steps": _I,
    "speculative_eagle_topk": _I,
    "speculative_num_draft_tokens": _I,
    "speculative_accept_threshold_single": Spec(float, default=1.0),
    "speculative_accept_threshold_acc": Spec(float, default=1.0),
    "speculative_use_rejection_sampling": _OFF,
    "speculative_token_map": _S,
    "speculative_attention_mode": Spec(str, ("prefill", "decode"), "prefill"),
    "speculative_draft_attention_backend": _S,
    "speculative_draft_window_size": _I,
    "speculative_draft_sink_size": _I,
    "enable_multi_layer_eagle": _OFF,
    "speculative_adaptive": _OFF,
    "speculative_adaptive_config": _S,
    "speculative_ngram_max_bfs_breadth": Spec(int, default=10),
}


# --------------------------------------------------------------------------------------------
# Table generation (from a real parser) and loading.
# --------------------------------------------------------------------------------------------


def _describe_action(action: argparse.Action, config_kind: str) -> FlagInfo | None:
    if isinstance(action, argparse._HelpAction):
        return None
    options = tuple(action.option_strings)
    if isinstance(action, argparse.BooleanOptionalAction):
        arity = "B"
        negatives = {"--no-" + o[2:] for o in options if o.startswith("--") and not o.startswith("--no-")}
        options = tuple(o for o in options if o not in negatives)
    elif isinstance(action, argparse._StoreTrueAction):
        arity = "0"
    elif action.nargs == 0:
        arity = "D"
    else:
        arity = "1" if action.nargs is None else str(action.nargs)
    type_name = getattr(action.type, "__name__", None)
    type_code = {"int": "i", "float": "f", "human_readable_int": "h"}.get(type_name or "", "s")
    if arity in ("0", "D", "B"):
        type_code = "-"
    return FlagInfo(arity, type_code, config_kind, action.dest, options)


def describe_parser(parser: argparse.ArgumentParser, *, config_kinds: dict[str, str]) -> list[str]:
    """Render a real SGLang parser as ``FLAG_TABLE`` lines.

    Args:
        parser: A parser filled by ``ServerArgs.add_cli_args``.
        config_kinds: Option string -> ``"t"``, ``"v"`` or class name, from SGLang's config loader.

    Returns:
        One line per action: ``arity type config dest option...``.
    """
    lines = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "config":
            continue
        info = _describe_action(action, config_kinds.get(action.option_strings[0], "v"))
        if info is not None:
            lines.append(" ".join((info.arity, info.type_code, info.config, info.dest, *info.option_strings)))
    return lines


def table_from_sglang() -> str:
    """``FLAG_TABLE``'s text, regenerated from the installed SGLang.

    The config column comes from SGLang's own ``ConfigArgumentMerger``: which keys it treats as
    store_true switches and which it refuses.

    Regenerate with::

        .venv/bin/python -c "from autotune.sglang._parser_twin import table_from_sglang as t; print(t())"
    """
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return "\n".join(describe_parser(parser, config_kinds=config_kinds_of(parser)))


@functools.lru_cache(maxsize=1)
def flag_table() -> tuple[FlagInfo, ...]:
    """``FLAG_TABLE`` parsed, in SGLang's registration order."""
    flags = []
    for line in FLAG_TABLE.strip().splitlines():
        arity, type_code, config, dest, *options = line.split()
        flags.append(FlagInfo(arity, type_code, config, dest, tuple(options)))
    return tuple(flags)


@functools.lru_cache(maxsize=1)
def flags_by_option() -> dict[str, FlagInfo]:
    """Every spelling (``--tp-size``, ``--tensor-parallel-size``, ``--no-x``) -> its flag."""
    out: dict[str, FlagInfo] = {}
    for info in flag_table():
        for option in info.option_strings:
            out[option] = info
            if info.arity == "B":
                out["--no-" + option[2:]] = info
    return out


class RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing and exiting.

    Cached parsers are shared between threads, so redirecting ``sys.stderr`` around a parse
    would be racy; overriding ``error``/``exit`` keeps argparse's message without the exit.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ParserExit(2, message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise ParserExit(status, (message or "").strip())

    def _print_message(self, message: str, file: Any = None) -> None:
        # --help would print the whole help text; the caller turns the exit into an error.
        return None


class ParserExit(Exception):
    """argparse wanted to exit: status 2 is a usage error with its message."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


@functools.lru_cache(maxsize=1)
def build_parser() -> RaisingParser:
    """The built-in twin of ``ServerArgs.add_cli_args`` (cached; parsing does not mutate it)."""
    parser = RaisingParser(prog="sglang serve")
    for info in flag_table():
        _add_flag(parser, info)
    parser.add_argument(
        "--config", type=str,
        help="Read CLI options from a config file. Must be a YAML file with configuration options.",
    )
    return parser


def _add_flag(parser: argparse.ArgumentParser, info: FlagInfo) -> None:
    spec = COVERED.get(info.dest)
    kwargs: dict[str, Any] = {"dest": info.dest}
    if spec is None:
        # Unread flags appear in the result only when given, so nothing pretends to know their
        # SGLang default.
        kwargs["default"] = argparse.SUPPRESS
    else:
        kwargs["default"] = spec.default
    if info.arity in ("0", "D"):
        kwargs["action"] = "store_true"
    elif info.arity == "B":
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        if info.arity != "1":
            kwargs["nargs"] = info.arity
        if spec is not None:
            kwargs["type"] = spec.type
            if spec.choices is not None:
                kwargs["choices"] = list(spec.choices)
            if spec.required:
                kwargs["required"] = True
                del kwargs["default"]
        else:
            kwargs["type"] = _TYPES[info.type_code]
    action = parser.add_argument(*info.option_strings, **kwargs)
    action.new_flag = None  # type: ignore[attr-defined]
    action.config_kind = info.config  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------
# Flag tables of other SGLang versions, as JSON rows (tests/data/sglang-<version>-flags.json).
# --------------------------------------------------------------------------------------------

#: Value types a JSON flag table may name; any other type name parses as ``str``.
ROW_TYPES: dict[str, Callable[[str], Any]] = {
    "str": str, "int": int, "float": float, "human_readable_int": human_readable_int,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
}


def _json_value(value: Any) -> tuple[bool, Any]:
    """(True, value) when ``value`` survives a JSON round trip unchanged, else (False, None)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True, value
    if isinstance(value, (list, tuple)):
        items = [_json_value(v) for v in value]
        return (True, [v for _, v in items]) if all(ok for ok, _ in items) else (False, None)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        items = {k: _json_value(v) for k, v in value.items()}
        ok = all(o for o, _ in items.values())
        return (True, {k: v for k, (_, v) in items.items()}) if ok else (False, None)
    return False, None


def describe_rows(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every option of a real SGLang parser as a JSON-ready row, in registration order.

    A row keeps what parsing and rendering need: ``options`` (canonical first; a ``--x/--no-x``
    pair lists its positive spellings), ``dest``, ``action`` (SGLang's action class name),
    ``kind`` (``store``, ``store_true``, ``store_const``, ``bool_optional``), ``nargs``, ``type``
    (the type callable's name), ``choices``, ``default`` and ``const`` (left out when not plain
    JSON), ``required`` and ``new_flag`` (where a deprecated action names its replacement).

    Args:
        parser: A parser filled by ``ServerArgs.add_cli_args``.
    """
    rows: list[dict[str, Any]] = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "config" or isinstance(action, argparse._HelpAction):
            continue
        options = list(action.option_strings)
        if isinstance(action, argparse.BooleanOptionalAction):
            kind = "bool_optional"
            negatives = {"--no-" + o[2:] for o in options if o.startswith("--") and not o.startswith("--no-")}
            options = [o for o in options if o not in negatives]
        elif action.nargs == 0:
            kind = "store_true" if action.const is True and action.default in (False, None) else "store_const"
        else:
            kind = "store"
        row: dict[str, Any] = {"options": options, "dest": action.dest, "action": type(action).__name__,
                               "kind": kind}
        if kind == "store":
            row["nargs"] = action.nargs
            row["type"] = getattr(action.type, "__name__", None) if action.type is not None else None
            ok, choices = _json_value(list(action.choices)) if action.choices is not None else (True, None)
            row["choices"] = choices if ok else None
        ok, default = _json_value(action.default)
        if ok:
            row["default"] = default
        if kind == "store_const":
            ok, const = _json_value(action.const)
            if ok:
                row["const"] = const
        if action.required:
            row["required"] = True
        new_flag = getattr(action, "new_flag", None)
        if isinstance(new_flag, str):
            row["new_flag"] = new_flag
        rows.append(row)
    return rows


def config_merger_class() -> Any:
    """The installed SGLang's ``ConfigArgumentMerger`` (0.5.23 moved it under ``srt.utils``)."""
    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger  # SGLang <= 0.5.17
    return ConfigArgumentMerger


def config_keys_of(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """How the installed SGLang's ``--config`` loader reads YAML keys, for a flag table.

    Releases differ (0.5.17 refuses every key whose dest a non-store action shares, 0.5.23 only
    keys no supported flag reads), so the loader's own verdicts are recorded, not re-derived.

    Returns:
        ``{"store_true": [key, ...], "unsupported": {key: action class name}}``.
    """
    merger = config_merger_class()(parser)
    return {"store_true": sorted(set(merger.store_true_actions)),
            "unsupported": {k: type(a).__name__ for k, a in sorted(merger.unsupported_actions.items())}}


def config_kinds_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Option -> ``"t"``/``"v"``/class name, from the installed SGLang's ``ConfigArgumentMerger``."""
    merger = config_merger_class()(parser)
    kinds: dict[str, str] = {}
    for action in parser._actions:
        if not action.option_strings:
            continue
        if action.dest in merger.unsupported_actions:
            kinds[action.option_strings[0]] = type(merger.unsupported_actions[action.dest]).__name__
        elif isinstance(action, argparse._StoreTrueAction) and action.dest in merger.store_true_actions:
            kinds[action.option_strings[0]] = "t"
        else:
            kinds[action.option_strings[0]] = "v"
    return kinds


def parser_from_rows(rows: list[dict[str, Any]]) -> RaisingParser:
    """A real argparse parser rebuilt from :func:`describe_rows` output.

    Every action keeps its spellings, dest, arity, type, choices and default, so prefix matching,
    ambiguity and value errors are SGLang's. Each action also carries ``new_flag`` (a deprecated
    alias's replacement, or None).
    """
    parser = RaisingParser(prog="sglang serve")
    for row in rows:
        kind = row["kind"]
        kwargs: dict[str, Any] = {"dest": row["dest"], "default": row.get("default", argparse.SUPPRESS)}
        if kind == "bool_optional":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind == "store_true":
            kwargs["action"] = "store_true"
        elif kind == "store_const":
            kwargs["action"] = "store_const"
            kwargs["const"] = row.get("const")
        else:
            if row.get("nargs") is not None:
                kwargs["nargs"] = row["nargs"]
            type_name = row.get("type")
            kwargs["type"] = ROW_TYPES.get(type_name or "str", str) if type_name is not None else None
            if row.get("choices") is not None:
                kwargs["choices"] = row["choices"]
        if row.get("required"):
            kwargs["required"] = True
            kwargs.pop("default", None)
        action = parser.add_argument(*row["options"], **kwargs)
        action.new_flag = row.get("new_flag")  # type: ignore[attr-defined]
    parser.add_argument("--config", type=str,
                        help="Read CLI options from a config file. Must be a YAML file with configuration options.")
    return parser


def default_of(dest: str) -> Any:
    """SGLang's default for a covered field.

    Raises:
        KeyError: For a field the built-in parser does not cover.
    """
    return COVERED[dest].default


# Generated by describe_parser() from SGLang 0.5.23; see tests/test_sglang_args.py.
FLAG_TABLE = """
1 s v model_path --model-path --model
1 s v tokenizer_path --tokenizer-path
1 s v tokenizer_mode --tokenizer-mode
1 s v tokenizer_backend --tokenizer-backend
1 i v tokenizer_worker_num --tokenizer-worker-num
1 i v detokenizer_worker_num --detokenizer-worker-num
0 - t skip_tokenizer_init --skip-tokenizer-init
1 s v load_format --load-format
1 s v model_loader_extra_config --model-loader-extra-config
0 - t trust_remote_code --trust-remote-code
1 h v context_length --context-length
0 - t is_embedding --is-embedding
0 - t enable_multimodal --enable-multimodal
1 s v revision --revision
1 s v model_impl --model-impl
1 s v model_config_parser --model-config-parser
1 s v json_model_override_args --json-model-override-args
1 s v dtype --dtype
1 s v quantization --quantization
1 s v quantization_param_path --quantization-param-path
1 s v kv_cache_dtype --kv-cache-dtype
0 - t enable_fp32_lm_head --enable-fp32-lm-head
1 s v modelopt_quant --modelopt-quant
1 s v modelopt_checkpoint_restore_path --modelopt-checkpoint-restore-path
1 s v modelopt_checkpoint_save_path --modelopt-checkpoint-save-path
1 s v modelopt_export_path --modelopt-export-path
0 - t quantize_and_serve --quantize-and-serve
1 s v rl_quant_profile --rl-quant-profile
B - BooleanOptionalAction enable_tf32_matmul --enable-tf32-matmul
1 f v mem_fraction_static --mem-fraction-static
1 i v max_running_requests --max-running-requests
1 i v max_queued_requests --max-queued-requests
1 h v max_total_tokens --max-total-tokens
1 i v chunked_prefill_size --chunked-prefill-size
1 i v prefill_decode_interval --prefill-decode-interval
0 - t enable_dynamic_chunking --enable-dynamic-chunking
1 h v max_prefill_tokens --max-prefill-tokens
1 i v prefill_max_requests --prefill-max-requests
1 s v schedule_policy --schedule-policy
0 - t enable_priority_scheduling --enable-priority-scheduling
0 - t disable_priority_preemption --disable-priority-preemption
1 i v default_priority_value --default-priority-value
0 - t abort_on_priority_when_disabled --abort-on-priority-when-disabled
0 - t schedule_low_priority_values_first --schedule-low-priority-values-first
1 i v priority_scheduling_preemption_threshold --priority-scheduling-preemption-threshold
1 s v retraction_policy --retraction-policy
1 f v schedule_conservativeness --schedule-conservativeness
1 i v page_size --page-size
1 i v c128_page_size --c128-page-size
1 f v swa_full_tokens_ratio --swa-full-tokens-ratio
0 - t disable_hybrid_swa_memory --disable-hybrid-swa-memory
1 s v radix_eviction_policy --radix-eviction-policy
1 s v radix_eviction_policy_config --radix-eviction-policy-config
0 - t prefill_only_disable_kv_cache --prefill-only-disable-kv-cache
0 - t disable_radix_cache --disable-radix-cache
0 - t enable_page_major_kv_layout --enable-page-major-kv-layout
0 - t enable_unified_memory --enable-unified-memory
0 - t disable_chunked_prefix_cache --disable-chunked-prefix-cache
0 - t disable_overlap_schedule --disable-overlap-schedule
1 i v num_continuous_decode_steps --num-continuous-decode-steps
1 i v scheduler_recv_interval --scheduler-recv-interval
0 - t enable_mixed_chunk --enable-mixed-chunk
1 i v nccl_port --nccl-port
1 i v dist_timeout --dist-timeout
1 s v dist_init_addr --dist-init-addr --nccl-init-addr
1 i v gated_launch_port --gated-launch-port
1 i v nnodes --nnodes
1 i v node_rank --node-rank
1 i v tp_size --tp-size --tensor-parallel-size
1 i v dcp_size --dcp-size --decode-context-parallel-size
1 i v pp_size --pp-size --pipeline-parallel-size
1 i v pp_max_micro_batch_size --pp-max-micro-batch-size
1 i v pp_async_batch_depth --pp-async-batch-depth
1 i v dp_size --dp-size --data-parallel-size
1 i v attn_dp_size --attn-dp-size --attention-data-parallel-size
1 s v load_balance_method --load-balance-method
1 i v attn_cp_size --attn-cp-size --attention-context-parallel-size
1 i v moe_dp_size --moe-dp-size --moe-data-parallel-size
1 i v dwdp_size --dwdp-size
1 s v dcp_comm_backend --dcp-comm-backend
B - BooleanOptionalAction dcp_replicate_q_proj --dcp-replicate-q-proj
0 - t enable_prefill_cp --enable-prefill-cp
1 s v cp_strategy --cp-strategy
0 - t enable_dsa_cache_layer_split --enable-dsa-cache-layer-split
0 - t enable_cp_decode_attn_tp --enable-cp-decode-attn-tp
0 - t enable_kv_cache_sharding --enable-kv-cache-sharding
0 - t enable_dp_attention_local_control_broadcast --enable-dp-attention-local-control-broadcast
0 - t enable_dp_lm_head --enable-dp-lm-head
B - BooleanOptionalAction enable_tp_lm_head_all_to_all --enable-tp-lm-head-all-to-all
0 - t enable_attn_tp_input_scattered --enable-attn-tp-input-scattered
0 - t enable_shared_experts_attn_tp --enable-shared-experts-attn-tp
1 i v shared_experts_tp_size --shared-experts-tp-size
0 - t enable_dense_mlp_attn_tp --enable-dense-mlp-attn-tp
0 - t enable_layernorm_sp --enable-layernorm-sp
0 - t disable_attn_tp_gather --disable-attn-tp-gather
0 - t enable_p2p_check --enable-p2p-check
1 s v device --device
1 i v base_gpu_id --base-gpu-id
1 i v gpu_id_step --gpu-id-step
1 i v random_seed --random-seed
0 - t mlx_enable_sampling --mlx-enable-sampling
1 f v watchdog_timeout --watchdog-timeout
1 f v soft_watchdog_timeout --soft-watchdog-timeout
0 - t sleep_on_idle --sleep-on-idle
0 - t use_ray --use-ray
+ i v numa_node --numa-node
+ i v gc_threshold --gc-threshold
1 s v host --host
1 i v port --port
1 s v fastapi_root_path --fastapi-root-path
0 - t smg_grpc_mode --smg-grpc-mode
0 - t grpc_mode --grpc-mode
1 i v grpc_port --grpc-port
1 s v sidecar --sidecar
1 s v sidecar_args --sidecar-args
0 - t skip_server_warmup --skip-server-warmup
1 s v warmups --warmups
0 - t enable_http2 --enable-http2
1 i v http2_max_concurrent_streams --http2-max-concurrent-streams
1 i v http2_initial_connection_window_size --http2-initial-connection-window-size
1 s v ssl_keyfile --ssl-keyfile
1 s v ssl_certfile --ssl-certfile
1 s v ssl_ca_certs --ssl-ca-certs
1 s v ssl_keyfile_password --ssl-keyfile-password
0 - t enable_ssl_refresh --enable-ssl-refresh
1 s v api_key --api-key
1 s v admin_api_key --admin-api-key
1 s v served_model_name --served-model-name
1 s v weight_version --weight-version
1 s v chat_template --chat-template
0 - t trust_request_chat_template --trust-request-chat-template
1 s v hf_chat_template_name --hf-chat-template-name
1 s v completion_template --completion-template
1 s v file_storage_path --file-storage-path
0 - t enable_cache_report --enable-cache-report
0 - t return_input_ids --return-input-ids
0 - t return_output_ids --return-output-ids
1 s v default_chat_template_kwargs --default-chat-template-kwargs
0 - t strip_thinking_cache --strip-thinking-cache
0 - t enable_strict_thinking --enable-strict-thinking
1 s v tool_server --tool-server
1 s v sampling_defaults --sampling-defaults
1 i v asr_max_buffer_seconds --asr-max-buffer-seconds
1 i v asr_max_concurrent_sessions --asr-max-concurrent-sessions
1 s v preferred_sampling_params --preferred-sampling-params
0 - t allow_auto_truncate --allow-auto-truncate
1 i v stream_interval --stream-interval
1 i v batch_notify_size --batch-notify-size
0 - t stream_response_default_include_usage --stream-response-default-include-usage
0 - t incremental_streaming_output --incremental-streaming-output
0 - t enable_streaming_session --enable-streaming-session
0 - t enable_session_radix_cache --enable-session-radix-cache
1 s v log_level --log-level
1 s v log_level_http --log-level-http
0 - t log_requests --log-requests
1 i v log_requests_level --log-requests-level
1 s v log_requests_format --log-requests-format
+ s v log_requests_target --log-requests-target
* s v uvicorn_access_log_exclude_prefixes --uvicorn-access-log-exclude-prefixes
1 s v crash_dump_folder --crash-dump-folder
0 - t show_time_cost --show-time-cost
0 - t enable_metrics --enable-metrics
1 i v smg_http_sidecar_port --smg-http-sidecar-port --grpc-http-sidecar-port
0 - t enable_mfu_metrics --enable-mfu-metrics
0 - t enable_metrics_for_all_schedulers --enable-metrics-for-all-schedulers
1 i v load_snapshot_publish_interval --load-snapshot-publish-interval
1 s v tokenizer_metrics_custom_labels_header --tokenizer-metrics-custom-labels-header
+ s v tokenizer_metrics_allowed_custom_labels --tokenizer-metrics-allowed-custom-labels
1 s v extra_metric_labels --extra-metric-labels
+ f v bucket_time_to_first_token --bucket-time-to-first-token
+ f v bucket_inter_token_latency --bucket-inter-token-latency
+ f v bucket_e2e_request_latency --bucket-e2e-request-latency
+ s v prompt_tokens_buckets --prompt-tokens-buckets
+ s v generation_tokens_buckets --generation-tokens-buckets
1 f v gc_warning_threshold_secs --gc-warning-threshold-secs
1 i v decode_log_interval --decode-log-interval
0 - t enable_request_time_stats_logging --enable-request-time-stats-logging
1 s v kv_events_config --kv-events-config
1 s v load_publish_endpoint --load-publish-endpoint
0 - t enable_forward_pass_metrics --enable-forward-pass-metrics
1 s v forward_pass_metrics_worker_id --forward-pass-metrics-worker-id
1 s v forward_pass_metrics_ipc_name --forward-pass-metrics-ipc-name
0 - t enable_trace --enable-trace
1 s v trace_modules --trace-modules
1 s v otlp_traces_endpoint --otlp-traces-endpoint
0 - t export_metrics_to_file --export-metrics-to-file
1 s v export_metrics_to_file_dir --export-metrics-to-file-dir
1 s v constrained_json_whitespace_pattern --constrained-json-whitespace-pattern
0 - t constrained_json_disable_any_whitespace --constrained-json-disable-any-whitespace
1 i v constrained_json_max_whitespace_cnt --constrained-json-max-whitespace-cnt
1 s v attention_backend --attention-backend
1 s v decode_attention_backend --decode-attention-backend
0 - t enable_lean_attention --enable-lean-attention
1 s v prefill_attention_backend --prefill-attention-backend
1 s v grammar_backend --grammar-backend
1 s v radix_cache_backend --radix-cache-backend
1 s v mm_attention_backend --mm-attention-backend
1 s v fp8_gemm_runner_backend --fp8-gemm-backend
1 s v fp4_gemm_runner_backend --fp4-gemm-backend
1 s v bf16_gemm_backend --bf16-gemm-backend
1 s v dsa_prefill_backend --dsa-prefill-backend
1 s v dsv4_prefill_backend --dsv4-prefill-backend
1 s v dsa_decode_backend --dsa-decode-backend
1 s v dsa_paged_mqa_logits_backend --dsa-paged-mqa-logits-backend
1 s v dsa_topk_backend --dsa-topk-backend
0 - t disable_flashinfer_autotune --disable-flashinfer-autotune
+ s v flashinfer_autotune_skip_ops --flashinfer-autotune-skip-ops
1 s v mamba_backend --mamba-backend
1 s v cuda_graph_config --cuda-graph-config
1 s v cuda_graph_backend_decode --cuda-graph-backend-decode
1 s v cuda_graph_backend_prefill --cuda-graph-backend-prefill
1 i v cuda_graph_max_bs_decode --cuda-graph-max-bs-decode
1 i v cuda_graph_max_bs_prefill --cuda-graph-max-bs-prefill
+ i v cuda_graph_bs_decode --cuda-graph-bs-decode
+ i v cuda_graph_bs_prefill --cuda-graph-bs-prefill
1 h v cuda_graph_prefill_max_context --cuda-graph-prefill-max-context --context-bucket
0 - t disable_prefill_cuda_graph --disable-prefill-cuda-graph
0 - t disable_decode_cuda_graph --disable-decode-cuda-graph
0 - t disable_cuda_graph_padding --disable-cuda-graph-padding
0 - t enable_profile_cuda_graph --enable-profile-cuda-graph
0 - t enable_cudagraph_gc --enable-cudagraph-gc
0 - t debug_cuda_graph --debug-cuda-graph
0 - t enable_layerwise_nvtx_marker --enable-layerwise-nvtx-marker
0 - t enable_nccl_nvls --enable-nccl-nvls
0 - t enable_symm_mem --enable-symm-mem
0 - t triton_attention_reduce_in_fp32 --triton-attention-reduce-in-fp32
1 i v triton_attention_num_kv_splits --triton-attention-num-kv-splits
1 i v triton_attention_split_tile_size --triton-attention-split-tile-size
0 - t flashinfer_mla_disable_ragged --flashinfer-mla-disable-ragged
B - BooleanOptionalAction enable_fused_qk_norm_rope --enable-fused-qk-norm-rope
0 - t enable_precise_embedding_interpolation --enable-precise-embedding-interpolation
0 - t enable_fused_moe_sum_all_reduce --enable-fused-moe-sum-all-reduce
0 - t enable_deepseek_v4_fp4_indexer --enable-deepseek-v4-fp4-indexer
0 - t disable_custom_all_reduce --disable-custom-all-reduce
0 - t enable_mscclpp --enable-mscclpp
0 - t enable_torch_symm_mem --enable-torch-symm-mem
0 - t enable_scattered_sconv --enable-scattered-sconv
0 - t pre_warm_nccl --pre-warm-nccl
1 s v boundary_reduction --boundary-reduction
0 - t enable_quant_communications --enable-quant-communications
0 - t enforce_disable_flashinfer_allreduce_fusion --enforce-disable-flashinfer-allreduce-fusion
1 s v flashinfer_allreduce_fusion_backend --flashinfer-allreduce-fusion-backend
0 - t enable_aiter_allreduce_fusion --enable-aiter-allreduce-fusion
0 - t enable_torch_compile --enable-torch-compile
0 - t enable_torch_compile_debug_mode --enable-torch-compile-debug-mode
1 i v torch_compile_max_bs --torch-compile-max-bs
1 s v speculative_algorithm --speculative-algorithm
1 s v uno_lora_path --uno-lora-path
1 s v speculative_draft_model_path --speculative-draft-model-path --speculative-draft-model
1 s v speculative_draft_model_revision --speculative-draft-model-revision
1 s v speculative_draft_load_format --speculative-draft-load-format
1 i v speculative_num_steps --speculative-num-steps
1 i v speculative_eagle_topk --speculative-eagle-topk
1 i v speculative_num_draft_tokens --speculative-num-draft-tokens
1 i v speculative_dflash_block_size --speculative-dflash-block-size
1 i v speculative_dspark_block_size --speculative-dspark-block-size
1 s v speculative_dspark_sps_table_path --speculative-dspark-sps-table-path
1 s v speculative_dspark_confidence_sts_path --speculative-dspark-confidence-sts-path
0 - t speculative_dspark_align_verify_tokens_to_graph_tier --speculative-dspark-align-verify-tokens-to-graph-tier
1 f v speculative_accept_threshold_single --speculative-accept-threshold-single
1 f v speculative_accept_threshold_acc --speculative-accept-threshold-acc
0 - t speculative_use_rejection_sampling --speculative-use-rejection-sampling
1 s v speculative_token_map --speculative-token-map
1 s v speculative_attention_mode --speculative-attention-mode
1 s v speculative_draft_attention_backend --speculative-draft-attention-backend
1 s v speculative_dsa_topk_backend --speculative-dsa-topk-backend
1 s v speculative_draft_kv_cache_dtype --speculative-draft-kv-cache-dtype
1 i v speculative_draft_window_size --speculative-draft-window-size
1 s v speculative_moe_runner_backend --speculative-moe-runner-backend
1 s v speculative_moe_a2a_backend --speculative-moe-a2a-backend
B - BooleanOptionalAction speculative_enable_w4a4_mxfp4_megamoe --speculative-enable-w4a4-mxfp4-megamoe
1 s v speculative_draft_model_quantization --speculative-draft-model-quantization
0 - t enable_multi_layer_eagle --enable-multi-layer-eagle
0 - t speculative_adaptive --speculative-adaptive
1 s v speculative_adaptive_config --speculative-adaptive-config
1 s v decoupled_spec_bind_endpoint --decoupled-spec-bind-endpoint
1 s v decoupled_spec_connect_endpoints --decoupled-spec-connect-endpoints
1 i v decoupled_spec_rank --decoupled-spec-rank
1 s v decoupled_spec_role --decoupled-spec-role
1 s v spec_trace_dir --spec-trace-dir
1 i v speculative_ngram_min_bfs_breadth --speculative-ngram-min-bfs-breadth
1 i v speculative_ngram_max_bfs_breadth --speculative-ngram-max-bfs-breadth
1 s v speculative_ngram_match_type --speculative-ngram-match-type
1 i v speculative_ngram_max_trie_depth --speculative-ngram-max-trie-depth
1 i v speculative_ngram_capacity --speculative-ngram-capacity
1 s v speculative_ngram_external_corpus_path --speculative-ngram-external-corpus-path
1 i v speculative_ngram_external_sam_budget --speculative-ngram-external-sam-budget
1 i v speculative_ngram_external_corpus_max_tokens --speculative-ngram-external-corpus-max-tokens
1 i v ep_size --ep-size --expert-parallel-size --ep
1 s v moe_a2a_backend --moe-a2a-backend
0 - t enable_w4a4_mxfp4_megamoe --enable-w4a4-mxfp4-megamoe
1 s v deepep_v2_mode --deepep-v2-mode
1 s v moe_runner_backend --moe-runner-backend
1 s v flashinfer_mxfp4_moe_precision --flashinfer-mxfp4-moe-precision
1 s v deepep_mode --deepep-mode
1 i v fuseep_mode --fuseep-mode
1 s v deepep_dispatcher_output_dtype --deepep-dispatcher-output-dtype
1 i v ep_num_redundant_experts --ep-num-redundant-experts
1 s v ep_dispatch_algorithm --ep-dispatch-algorithm
1 s v init_expert_location --init-expert-location
0 - t enable_eplb --enable-eplb
1 s v eplb_algorithm --eplb-algorithm
1 i v eplb_rebalance_num_iterations --eplb-rebalance-num-iterations
1 i v eplb_rebalance_layers_per_chunk --eplb-rebalance-layers-per-chunk
1 f v eplb_min_rebalancing_utilization_threshold --eplb-min-rebalancing-utilization-threshold
1 s v expert_distribution_recorder_mode --expert-distribution-recorder-mode
1 i v expert_distribution_recorder_buffer_size --expert-distribution-recorder-buffer-size
1 s v expert_balancedness_report_mode --expert-balancedness-report-mode
1 s v deepep_config --deepep-config
1 i v moe_dense_tp_size --moe-dense-tp-size
1 s v elastic_ep_backend --elastic-ep-backend
0 - t enable_elastic_expert_backup --enable-elastic-expert-backup
1 s v mooncake_ib_device --mooncake-ib-device
0 - t enable_waterfill --enable-waterfill
1 s v ep_join_mode --elastic-ep-join-mode
1 i v ep_join_rank_offset --elastic-ep-join-rank-offset
1 i v elastic_ep_initial_size --elastic-ep-initial-size
1 i v max_ep_size --max-ep-size
1 f v elastic_ep_scale_timeout --elastic-ep-scale-timeout
0 - t disable_flashinfer_cutlass_moe_fp4_allgather --disable-flashinfer-cutlass-moe-fp4-allgather
0 - t disable_shared_experts_fusion --disable-shared-experts-fusion
0 - t enforce_shared_experts_fusion --enforce-shared-experts-fusion
1 i v max_mamba_cache_size --max-mamba-cache-size
1 s v mamba_ssm_dtype --mamba-ssm-dtype
1 i v mamba_max_states_per_path --mamba-max-states-per-path
0 - t enable_mamba_cache_stochastic_rounding --enable-mamba-cache-stochastic-rounding
1 i v mamba_cache_philox_rounds --mamba-cache-philox-rounds
1 f v mamba_full_memory_ratio --mamba-full-memory-ratio
1 s v mamba_radix_cache_strategy --mamba-radix-cache-strategy
1 i v mamba_track_interval --mamba-track-interval
0 - t enable_int8_mamba_checkpoint --enable-int8-mamba-checkpoint
1 i v int8_mamba_ckpt_size --int8-mamba-ckpt-size
1 s v linear_attn_backend --linear-attn-backend
1 s v linear_attn_decode_backend --linear-attn-decode-backend
1 s v linear_attn_prefill_backend --linear-attn-prefill-backend
1 s v linear_attn_verify_backend --linear-attn-verify-backend
0 - t enable_linear_replayssm --enable-linear-replayssm
1 i v linear_replayssm_cache_len --linear-replayssm-cache-len
0 - t enable_linear_replayssm_spec --enable-linear-replayssm-spec
0 - t enable_hierarchical_cache --enable-hierarchical-cache --enable-hicache
1 s v hicache_host_memory_mode --hicache-host-memory-mode
1 f v hicache_ratio --hicache-ratio
1 i v hicache_size --hicache-size
1 s v hicache_write_policy --hicache-write-policy
1 s v hicache_io_backend --hicache-io-backend
1 s v hicache_mem_layout --hicache-mem-layout
1 s v hicache_storage_backend --hicache-storage-backend
1 s v hicache_storage_prefetch_policy --hicache-storage-prefetch-policy
1 s v hicache_storage_backend_extra_config --hicache-storage-backend-extra-config
1 i v hicache_storage_prefetch_retry_poll_interval --hicache-storage-prefetch-retry-poll-interval
1 i v hicache_storage_prefetch_retry_max_attempts --hicache-storage-prefetch-retry-max-attempts
0 - t enable_unified_cache_external_linker --enable-unified-cache-external-linker
1 s v unified_cache_external_linker_backend --unified-cache-external-linker-backend
0 - t enable_hisparse --enable-hisparse
1 s v hisparse_config --hisparse-config --hierarchical-sparse-attention-extra-config
0 - t enable_broadcast_mm_inputs_process --enable-broadcast-mm-inputs-process
0 - t enable_prefix_mm_cache --enable-prefix-mm-cache
B - BooleanOptionalAction mm_enable_dp_encoder --mm-enable-dp-encoder
1 s v mm_process_config --mm-process-config
1 i v mm_processor_worker_num --mm-processor-worker-num
1 i v mm_io_worker_num --mm-io-worker-num
+ s v allowed_media_domains --allowed-media-domains
1 i v media_url_max_file_size_mb --media-url-max-file-size-mb
1 i v mm_preprocess_cache_size_mb --mm-preprocess-cache-size-mb
0 - t trust_mm_content_hashes --trust-mm-content-hashes
1 s v limit_mm_data_per_request --limit-mm-data-per-request
0 - t enable_mm_global_cache --enable-mm-global-cache
1 s v image_processor_backend --image-processor-backend
1 s v mm_global_cache_backend --mm-global-cache-backend
0 - t disable_fast_image_processor --disable-fast-image-processor
1 s v mm_feature_transport --mm-feature-transport
0 - t enable_lora --enable-lora
0 - t enable_lora_overlap_loading --enable-lora-overlap-loading
1 i v max_lora_rank --max-lora-rank
* s v lora_target_modules --lora-target-modules
* s LoRAPathAction lora_paths --lora-paths
1 i v max_loaded_loras --max-loaded-loras
1 i v max_loras_per_batch --max-loras-per-batch
1 s v lora_eviction_policy --lora-eviction-policy
1 s v lora_backend --lora-backend
1 i v max_lora_chunk_size --max-lora-chunk-size
B - BooleanOptionalAction experts_shared_outer_loras --experts-shared-outer-loras
0 - t lora_use_virtual_experts --lora-use-virtual-experts
B - BooleanOptionalAction lora_strict_loading --lora-strict-loading
1 f v lora_drain_wait_threshold --lora-drain-wait-threshold
0 - t enable_two_batch_overlap --enable-two-batch-overlap
0 - t enable_single_batch_overlap --enable-single-batch-overlap
1 f v tbo_token_distribution_threshold --tbo-token-distribution-threshold
1 i v cpu_offload_gb --cpu-offload-gb
1 i v offload_group_size --offload-group-size
1 i v offload_num_in_group --offload-num-in-group
1 i v offload_prefetch_step --offload-prefetch-step
1 s v offload_mode --offload-mode
0 - t enable_lmcache --enable-lmcache
1 s v lmcache_config_file --lmcache-config-file
0 - t enable_flexkv --enable-flexkv
1 s v flexkv_config_file --flexkv-config-file
1 s v kt_weight_path --kt-weight-path
1 s v kt_method --kt-method
1 i v kt_cpuinfer --kt-cpuinfer
1 i v kt_threadpool_count --kt-threadpool-count
1 i v kt_num_gpu_experts --kt-num-gpu-experts
1 i v kt_max_deferred_experts_per_token --kt-max-deferred-experts-per-token
1 s v dllm_algorithm --dllm-algorithm
1 s v dllm_algorithm_config --dllm-algorithm-config
B - BooleanOptionalAction dllm_fdfo --dllm-fdfo
1 s v disaggregation_mode --disaggregation-mode
1 s v disaggregation_transfer_backend --disaggregation-transfer-backend
1 i v disaggregation_bootstrap_port --disaggregation-bootstrap-port
1 s v disaggregation_ib_device --disaggregation-ib-device
0 - t disaggregation_decode_enable_radix_cache --disaggregation-decode-enable-radix-cache
0 - t disaggregation_decode_enable_offload_kvcache --disaggregation-decode-enable-offload-kvcache
1 s v disaggregation_decode_retraction_backup --disaggregation-decode-retraction-backup
1 i v num_reserved_decode_tokens --num-reserved-decode-tokens
1 i v disaggregation_decode_extra_slots --disaggregation-decode-extra-slots
1 i v disaggregation_decode_polling_interval --disaggregation-decode-polling-interval
1 i v optimistic_prefill_attempts --optimistic-prefill-attempts
0 - t encoder_only --encoder-only
0 - t language_only --language-only
0 - t language_model_only --language-model-only
1 s v encoder_transfer_backend --encoder-transfer-backend
+ s v encoder_urls --encoder-urls
1 i v encoder_bootstrap_port --encoder-bootstrap-port
+ s v encoder_register_urls --encoder-register-urls
0 - t enable_adaptive_dispatch_to_encoder --enable-adaptive-dispatch-to-encoder
0 - t enable_pdmux --enable-pdmux
1 s v pdmux_config_path --pdmux-config-path
1 i v sm_group_num --sm-group-num
1 s v startup_weight_load_mode --startup-weight-load-mode
* s v custom_weight_loader --custom-weight-loader
0 - t weight_loader_disable_mmap --weight-loader-disable-mmap
0 - t weight_loader_prefetch_checkpoints --weight-loader-prefetch-checkpoints
1 i v weight_loader_prefetch_num_threads --weight-loader-prefetch-num-threads
0 - t weight_loader_drop_cache_after_load --weight-loader-drop-cache-after-load
1 s v remote_instance_weight_loader_seed_instance_ip --remote-instance-weight-loader-seed-instance-ip
1 i v remote_instance_weight_loader_seed_instance_service_port --remote-instance-weight-loader-seed-instance-service-port
1 s v remote_instance_weight_loader_send_weights_group_ports --remote-instance-weight-loader-send-weights-group-ports
1 s v remote_instance_weight_loader_backend --remote-instance-weight-loader-backend
0 - t remote_instance_weight_loader_start_seed_via_transfer_engine --remote-instance-weight-loader-start-seed-via-transfer-engine
1 i v engine_info_bootstrap_port --engine-info-bootstrap-port
1 s v modelexpress_config --modelexpress-config
1 s v download_dir --download-dir
? s v model_checksum --model-checksum
0 - t delete_ckpt_after_loading --delete-ckpt-after-loading
1 s v decrypted_config_file --decrypted-config-file
1 s v decrypted_draft_config_file --decrypted-draft-config-file
0 - t checkpoint_engine_wait_weights_before_ready --checkpoint-engine-wait-weights-before-ready
0 - t enable_prefill_delayer --enable-prefill-delayer
1 i v prefill_delayer_max_delay_passes --prefill-delayer-max-delay-passes
1 f v prefill_delayer_token_usage_low_watermark --prefill-delayer-token-usage-low-watermark
+ f v prefill_delayer_forward_passes_buckets --prefill-delayer-forward-passes-buckets
+ f v prefill_delayer_wait_seconds_buckets --prefill-delayer-wait-seconds-buckets
1 f v prefill_delayer_queue_min_ratio --prefill-delayer-queue-min-ratio
1 f v prefill_delayer_max_delay_ms --prefill-delayer-max-delay-ms
1 i v min_free_slots_delay --min-free-slots-delay
0 - t enable_deterministic_inference --enable-deterministic-inference
1 s v rl_on_policy_target --rl-on-policy-target
1 s v kv_canary --kv-canary
1 i v kv_canary_sweep_interval --kv-canary-sweep-interval
0 - t enable_dynamic_batch_tokenizer --enable-dynamic-batch-tokenizer
1 i v dynamic_batch_tokenizer_batch_size --dynamic-batch-tokenizer-batch-size
1 f v dynamic_batch_tokenizer_batch_timeout --dynamic-batch-tokenizer-batch-timeout
0 - t enable_tokenizer_batch_encode --enable-tokenizer-batch-encode
0 - t disable_tokenizer_batch_decode --disable-tokenizer-batch-decode
1 s v debug_tensor_dump_output_folder --debug-tensor-dump-output-folder
+ i v debug_tensor_dump_layers --debug-tensor-dump-layers
1 s v debug_tensor_dump_input_file --debug-tensor-dump-input-file
0 - t enable_memory_saver --enable-memory-saver
0 - t enable_weights_cpu_backup --enable-weights-cpu-backup
0 - t enable_draft_weights_cpu_backup --enable-draft-weights-cpu-backup
0 - t enable_custom_logit_processor --enable-custom-logit-processor
0 - t enable_return_hidden_states --enable-return-hidden-states
1 s v return_hidden_states_mode --return-hidden-states-mode
0 - t enable_return_routed_experts --enable-return-routed-experts
0 - t enable_return_indexer_topk --enable-return-indexer-topk
1 i v sampling_mask_max_tokens --sampling-mask-max-tokens
0 - t disable_outlines_disk_cache --disable-outlines-disk-cache
0 - t enable_mis --enable-mis
1 s v weight_cache_mode --weight-cache-mode
1 s v weight_cache_socket --weight-cache-socket
1 i v weight_cache_timeout --weight-cache-timeout
1 s v forward_hooks --forward-hooks
1 s v msprobe_dump_config --msprobe-dump-config
B - BooleanOptionalAction ple_offload_embedding --ple-offload-embedding
1 s v ple_offload_backend --ple-offload-backend
1 s v ple_offload_dir --ple-offload-dir
0 - t disaggregation_enable_kv_checksum --disaggregation-enable-kv-checksum
0 - t enable_pd_role_switch --enable-pd-role-switch
1 i v speculative_domino_candidate_pool_size --speculative-domino-candidate-pool-size
1 s v flashinfer_a2a_dispatch_type --flashinfer-a2a-dispatch-type
1 i v cuda_graph_max_seq_len_prefill --cuda-graph-max-seq-len-prefill
1 s v prefill_kv_cache_dequant_dtype --prefill-kv-cache-dequant-dtype
1 s v dsv4_attn_backend --dsv4-attn-backend
1 s v otlp_service_name --otlp-service-name
1 f v hicache_host_memory_fraction --hicache-host-memory-fraction
0 - t enable_linker_mla_dedup --enable-linker-mla-dedup
1 i v swa_prefix_tails --swa-prefix-tails
0 - t enable_encoder_swa_bounded_replay --enable-encoder-swa-bounded-replay
B - BooleanOptionalAction enable_decoder_swa_bounded_replay --enable-decoder-swa-bounded-replay
0 - t enable_response_store --enable-response-store
1 f v disaggregation_decode_host_receive_threshold --disaggregation-decode-host-receive-threshold
1 s v qsa_indexer_dtype --qsa-indexer-dtype
1 s v disaggregation_decode_allocation_policy --disaggregation-decode-allocation-policy
0 - t speculative_use_block_verification --speculative-use-block-verification
1 i v speculative_draft_sink_size --speculative-draft-sink-size
0 - t disable_aiter_allreduce_fusion_in_prefill --disable-aiter-allreduce-fusion-in-prefill
0 - t disable_aiter_allreduce_fusion_in_decode --disable-aiter-allreduce-fusion-in-decode
0 - t enable_amd_monokernel --enable-amd-monokernel
1 i v dsa_triton_union --dsa-triton-union
B - BooleanOptionalAction enable_dsa_fused_indexer --enable-dsa-fused-indexer
0 - t enable_watermark --enable-watermark
1 s v watermark_config --watermark-config
1 i v grpc_response_timeout_secs --grpc-response-timeout-secs
0 - t enable_paged_experts --enable-paged-experts
1 i v paged_experts_num_resident --paged-experts-num-resident
0 - t enable_nvidia_megakernel --enable-nvidia-megakernel
0 - t enable_megamoe_for_layernorm_sp --enable-megamoe-for-layernorm-sp
0 - t enable_http_worker_reuseport --enable-http-worker-reuseport
1 i v prefill_decode_interval_min_bs --prefill-decode-interval-min-bs
1 s v unified_cache_external_linker_config --unified-cache-external-linker-config
0 - t enable_return_aux_hidden_states --enable-return-aux-hidden-states
+ i v return_aux_hidden_state_layer_ids --return-aux-hidden-state-layer-ids
1 s v sampling_backend --sampling-backend
1 s v reasoning_parser --reasoning-parser
1 s v tool_call_parser --tool-call-parser
1 s v kv_canary_real_data --kv-canary-real-data
D - DeprecatedStoreTrueAction disable_cuda_graph --disable-cuda-graph
D - DeprecatedStoreTrueAction enable_dp_attention --enable-dp-attention
1 s v enable_amd_monokernel --monokernel-backend
0 - t enable_flashinfer_allreduce_fusion --enable-flashinfer-allreduce-fusion
"""
