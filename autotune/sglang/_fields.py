"""A snapshot of SGLang's ``ServerArgs`` fields, for checking names without importing SGLang.

Importing ``sglang.srt.server_args`` pulls in torch and takes seconds, and SGLang is not
installed on every machine that loads a search space. This table lets the space loader catch a
misspelt parameter name, a wrong type or a bad choice everywhere; names missing here are still
checked against the installed SGLang when it can be imported.

Regenerate after an SGLang upgrade (needs SGLang importable)::

    python -m autotune.sglang._fields --write
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

_BEGIN = "# --- generated: begin ---"
_END = "# --- generated: end ---"


def _render() -> str:
    """Render the generated section from the installed SGLang."""
    # Imported here: only regeneration needs SGLang, and importing it takes seconds.
    import sglang
    from sglang.srt.server_args import ServerArgs

    hints = typing.get_type_hints(ServerArgs, include_extras=True)
    names = {int: "int", float: "float", bool: "bool", str: "str"}
    rows: list[str] = []
    no_cli: list[str] = []
    for name in ServerArgs.__struct_fields__:
        if name.startswith("_"):
            continue
        hint = hints[name]
        meta: list[object] = []
        if typing.get_origin(hint) is typing.Annotated:
            hint, *meta = typing.get_args(hint)
        nullable = False
        if typing.get_origin(hint) is typing.Union:
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            nullable = len(members) < len(typing.get_args(hint))
            if len(members) == 1:
                hint = members[0]
        choices: tuple[object, ...] | None = None
        origin = typing.get_origin(hint)
        if origin is typing.Literal:
            choices = tuple(typing.get_args(hint))
            kinds = {type(c) for c in choices}
            kind = names.get(kinds.pop(), "other") if len(kinds) == 1 else "other"
        elif origin is list:
            kind = "list"
        else:
            kind = names.get(hint, "other")
        for item in meta:
            if type(item).__name__ == "Arg":
                if item.choices:
                    choices = tuple(item.choices)
                if item.no_cli:
                    no_cli.append(name)
        head = f"    {name!r}: ({kind + ('?' if nullable else '')!r}, "
        if choices is None:
            rows.append(head + "None),")
        else:
            rows.append(head + "(")
            line = "       "
            for choice in choices:
                piece = f" {choice!r},"
                if len(line) + len(piece) > 96:
                    rows.append(line)
                    line = "       "
                line += piece
            rows.append(line)
            rows.append("    )),")
    out = [_BEGIN, f'SGLANG_VERSION = "{sglang.__version__}"', "",
           "# name: (kind, choices). kind is int, float, bool, str, list or other;",
           "# a trailing '?' means None is allowed.",
           "FIELDS: dict[str, tuple[str, tuple[object, ...] | None]] = {", *rows, "}", "",
           "# Fields SGLang does not expose as command-line flags.",
           "NO_CLI: frozenset[str] = frozenset({", *[f"    {n!r}," for n in no_cli], "})",
           _END]
    return "\n".join(out) + "\n"


def _write() -> None:
    path = Path(__file__)
    text = path.read_text(encoding="utf-8")
    # Markers are matched as whole lines so the constants above do not match themselves.
    start = text.index(f"\n{_BEGIN}\n") + 1
    end = text.index(f"\n{_END}\n") + len(_END) + 2
    path.write_text(text[:start] + _render() + text[end:], encoding="utf-8")


# --- generated: begin ---
SGLANG_VERSION = "0.5.23"

# name: (kind, choices). kind is int, float, bool, str, list or other;
# a trailing '?' means None is allowed.
FIELDS: dict[str, tuple[str, tuple[object, ...] | None]] = {
    'model_path': ('str', None),
    'tokenizer_path': ('str?', None),
    'tokenizer_mode': ('str', (
        'auto', 'slow',
    )),
    'tokenizer_backend': ('str', (
        'huggingface', 'fastokens',
    )),
    'tokenizer_worker_num': ('int', None),
    'detokenizer_worker_num': ('int', None),
    'skip_tokenizer_init': ('bool', None),
    'load_format': ('str', (
        'auto', 'pt', 'safetensors', 'instanttensor', 'npcache', 'dummy', 'sharded_state',
        'presharded', 'gguf', 'expert_pack', 'bitsandbytes', 'mistral', 'layered', 'flash_rl',
        'remote', 'remote_instance', 'fastsafetensors', 'private', 'runai_streamer',
    )),
    'model_loader_extra_config': ('str', None),
    'trust_remote_code': ('bool', None),
    'context_length': ('int?', None),
    'is_embedding': ('bool', None),
    'enable_multimodal': ('bool?', None),
    'revision': ('str?', None),
    'model_impl': ('str', None),
    'model_config_parser': ('str', None),
    'json_model_override_args': ('str', None),
    'dtype': ('str', (
        'auto', 'half', 'float16', 'bfloat16', 'float', 'float32',
    )),
    'quantization': ('str?', (
        'awq', 'fp8', 'mxfp8', 'gptq', 'gptq_marlin', 'awq_marlin', 'bitsandbytes', 'gguf',
        'modelopt', 'modelopt_fp8', 'modelopt_fp4', 'nvfp4_online', 'modelopt_mixed',
        'petit_nvfp4', 'w8a8_int8', 'w8a8_fp8', 'moe_wna16', 'w4afp8', 'mxfp4', 'auto-round',
        'auto-round-int8', 'compressed-tensors', 'modelslim', 'mxfp_w4a8', 'quark',
        'quark_int4fp8_moe', 'quark_mxfp4', 'mlx_q4', 'mlx_q8', 'unquant', 'humming',
    )),
    'quantization_param_path': ('str?', None),
    'kv_cache_dtype': ('str', (
        'auto', 'fp8_e5m2', 'fp8_e4m3', 'mxfp8', 'bf16', 'bfloat16', 'nvfp4', 'fp4_mx_block16',
    )),
    'enable_fp32_lm_head': ('bool', None),
    'modelopt_quant': ('other?', None),
    'modelopt_checkpoint_restore_path': ('str?', None),
    'modelopt_checkpoint_save_path': ('str?', None),
    'modelopt_export_path': ('str?', None),
    'quantize_and_serve': ('bool', None),
    'rl_quant_profile': ('str?', None),
    'enable_tf32_matmul': ('bool?', None),
    'mem_fraction_static': ('float?', None),
    'max_running_requests': ('int?', None),
    'max_queued_requests': ('int?', None),
    'max_total_tokens': ('int?', None),
    'chunked_prefill_size': ('int?', None),
    'prefill_decode_interval': ('int?', None),
    'enable_dynamic_chunking': ('bool', None),
    'max_prefill_tokens': ('int', None),
    'prefill_max_requests': ('int?', None),
    'schedule_policy': ('str', (
        'lpm', 'random', 'fcfs', 'dfs-weight', 'lof', 'priority', 'routing-key', 'hrrn',
        'shortest-prefill-first',
    )),
    'enable_priority_scheduling': ('bool', None),
    'disable_priority_preemption': ('bool', None),
    'default_priority_value': ('int?', None),
    'abort_on_priority_when_disabled': ('bool', None),
    'schedule_low_priority_values_first': ('bool', None),
    'priority_scheduling_preemption_threshold': ('int', None),
    'retraction_policy': ('str', (
        'length', 'priority',
    )),
    'schedule_conservativeness': ('float', None),
    'page_size': ('int?', None),
    'c128_page_size': ('int', None),
    'swa_full_tokens_ratio': ('float?', None),
    'disable_hybrid_swa_memory': ('bool', None),
    'radix_eviction_policy': ('str', (
        'lru', 'lfu', 'slru', 'priority', 'tlru',
    )),
    'radix_eviction_policy_config': ('other?', None),
    'prefill_only_disable_kv_cache': ('bool', None),
    'disable_radix_cache': ('bool', None),
    'enable_page_major_kv_layout': ('bool', None),
    'enable_unified_memory': ('bool', None),
    'disable_chunked_prefix_cache': ('bool', None),
    'disable_overlap_schedule': ('bool', None),
    'num_continuous_decode_steps': ('int', None),
    'scheduler_recv_interval': ('int', None),
    'enable_mixed_chunk': ('bool', None),
    'nccl_port': ('int?', None),
    'dist_timeout': ('int?', None),
    'dist_init_addr': ('str?', None),
    'gated_launch_port': ('int?', None),
    'nnodes': ('int', None),
    'node_rank': ('int', None),
    'tp_size': ('int', None),
    'dcp_size': ('int', None),
    'pp_size': ('int', None),
    'pp_max_micro_batch_size': ('int?', None),
    'pp_async_batch_depth': ('int', None),
    'dp_size': ('int', None),
    'attn_dp_size': ('int', None),
    'load_balance_method': ('str', (
        'auto', 'round_robin', 'follow_bootstrap_room', 'total_requests', 'total_tokens',
    )),
    'attn_cp_size': ('int', None),
    'moe_dp_size': ('int', None),
    'dwdp_size': ('int', None),
    'dcp_comm_backend': ('str?', (
        'ag_rs', 'a2a', 'fi_a2a',
    )),
    'dcp_replicate_q_proj': ('bool?', None),
    'enable_prefill_cp': ('bool', None),
    'cp_strategy': ('str?', (
        'zigzag', 'interleave',
    )),
    'enable_dsa_cache_layer_split': ('bool', None),
    'enable_cp_decode_attn_tp': ('bool', None),
    'enable_kv_cache_sharding': ('bool', None),
    'enable_dp_attention': ('bool', None),
    'enable_dp_attention_local_control_broadcast': ('bool', None),
    'enable_dp_lm_head': ('bool', None),
    'enable_tp_lm_head_all_to_all': ('bool?', None),
    'enable_attn_tp_input_scattered': ('bool', None),
    'enable_shared_experts_attn_tp': ('bool', None),
    'shared_experts_tp_size': ('int?', None),
    'enable_dense_mlp_attn_tp': ('bool', None),
    'enable_layernorm_sp': ('bool', None),
    'disable_attn_tp_gather': ('bool', None),
    'enable_p2p_check': ('bool', None),
    'device': ('str?', None),
    'base_gpu_id': ('int', None),
    'gpu_id_step': ('int', None),
    'random_seed': ('int?', None),
    'mlx_enable_sampling': ('bool', None),
    'watchdog_timeout': ('float', None),
    'soft_watchdog_timeout': ('float?', None),
    'sleep_on_idle': ('bool', None),
    'use_ray': ('bool', None),
    'custom_sigquit_handler': ('other?', None),
    'numa_node': ('list?', None),
    'gc_threshold': ('list?', None),
    'host': ('str', None),
    'port': ('int', None),
    'fastapi_root_path': ('str', None),
    'smg_grpc_mode': ('bool', None),
    'grpc_mode': ('bool', None),
    'grpc_port': ('int?', None),
    'grpc_worker_threads': ('int?', None),
    'sidecar': ('str?', None),
    'sidecar_args': ('list?', None),
    'skip_server_warmup': ('bool', None),
    'warmups': ('str?', None),
    'enable_http2': ('bool', None),
    'http2_max_concurrent_streams': ('int', None),
    'http2_initial_connection_window_size': ('int', None),
    'ssl_keyfile': ('str?', None),
    'ssl_certfile': ('str?', None),
    'ssl_ca_certs': ('str?', None),
    'ssl_keyfile_password': ('str?', None),
    'enable_ssl_refresh': ('bool', None),
    'api_key': ('str?', None),
    'admin_api_key': ('str?', None),
    'served_model_name': ('str?', None),
    'weight_version': ('str', None),
    'chat_template': ('str?', None),
    'trust_request_chat_template': ('bool', None),
    'hf_chat_template_name': ('str?', None),
    'completion_template': ('str?', None),
    'file_storage_path': ('str?', None),
    'enable_cache_report': ('bool', None),
    'return_input_ids': ('bool', None),
    'return_output_ids': ('bool', None),
    'reasoning_parser': ('str?', None),
    'default_chat_template_kwargs': ('other?', None),
    'strip_thinking_cache': ('bool', None),
    'enable_strict_thinking': ('bool', None),
    'tool_call_parser': ('str?', None),
    'tool_server': ('str?', None),
    'sampling_defaults': ('str', (
        'openai', 'model',
    )),
    'asr_max_buffer_seconds': ('int', None),
    'asr_max_concurrent_sessions': ('int', None),
    'preferred_sampling_params': ('str?', None),
    'allow_auto_truncate': ('bool', None),
    'stream_interval': ('int', None),
    'batch_notify_size': ('int', None),
    'stream_response_default_include_usage': ('bool', None),
    'incremental_streaming_output': ('bool', None),
    'enable_streaming_session': ('bool', None),
    'enable_session_radix_cache': ('bool', None),
    'log_level': ('str', None),
    'log_level_http': ('str?', None),
    'log_requests': ('bool', None),
    'log_requests_level': ('int', (
        0, 1, 2, 3,
    )),
    'log_requests_format': ('str', (
        'text', 'json',
    )),
    'log_requests_target': ('list?', None),
    'uvicorn_access_log_exclude_prefixes': ('list', None),
    'crash_dump_folder': ('str?', None),
    'show_time_cost': ('bool', None),
    'enable_metrics': ('bool', None),
    'smg_http_sidecar_port': ('int?', None),
    'enable_mfu_metrics': ('bool', None),
    'enable_metrics_for_all_schedulers': ('bool', None),
    'load_snapshot_publish_interval': ('int', None),
    'tokenizer_metrics_custom_labels_header': ('str', None),
    'tokenizer_metrics_allowed_custom_labels': ('list?', None),
    'extra_metric_labels': ('other?', None),
    'bucket_time_to_first_token': ('list?', None),
    'bucket_inter_token_latency': ('list?', None),
    'bucket_e2e_request_latency': ('list?', None),
    'prompt_tokens_buckets': ('list?', None),
    'generation_tokens_buckets': ('list?', None),
    'gc_warning_threshold_secs': ('float', None),
    'decode_log_interval': ('int', None),
    'enable_request_time_stats_logging': ('bool', None),
    'kv_events_config': ('str?', None),
    'load_publish_endpoint': ('str?', None),
    'enable_forward_pass_metrics': ('bool', None),
    'forward_pass_metrics_worker_id': ('str', None),
    'forward_pass_metrics_ipc_name': ('str?', None),
    'enable_trace': ('bool', None),
    'trace_modules': ('str', None),
    'otlp_traces_endpoint': ('str', None),
    'export_metrics_to_file': ('bool', None),
    'export_metrics_to_file_dir': ('str?', None),
    'stat_loggers': ('other?', None),
    'constrained_json_whitespace_pattern': ('str?', None),
    'constrained_json_disable_any_whitespace': ('bool', None),
    'constrained_json_max_whitespace_cnt': ('int?', None),
    'attention_backend': ('str?', (
        'triton', 'torch_native', 'flex_attention', 'dsa', 'nsa', 'qsa', 'dsv4', 'compressed',
        'fa3', 'fa4', 'flashinfer', 'llada2_cfg_flashinfer', 'flashmla', 'trtllm_mla',
        'cutedsl_mla', 'tokenspeed_mla', 'trtllm_mha', 'hpc_ops', 'minicpm_flashattn',
        'minicpm_flashinfer', 'aiter', 'wave', 'intel_amx', 'ascend', 'intel_xpu',
    )),
    'decode_attention_backend': ('str?', (
        'triton', 'torch_native', 'flex_attention', 'dsa', 'nsa', 'qsa', 'dsv4', 'compressed',
        'fa3', 'fa4', 'flashinfer', 'llada2_cfg_flashinfer', 'flashmla', 'trtllm_mla',
        'cutedsl_mla', 'tokenspeed_mla', 'trtllm_mha', 'hpc_ops', 'minicpm_flashattn',
        'minicpm_flashinfer', 'aiter', 'wave', 'intel_amx', 'ascend', 'intel_xpu',
    )),
    'enable_lean_attention': ('bool?', None),
    'prefill_attention_backend': ('str?', (
        'triton', 'torch_native', 'flex_attention', 'dsa', 'nsa', 'qsa', 'dsv4', 'compressed',
        'fa3', 'fa4', 'flashinfer', 'llada2_cfg_flashinfer', 'flashmla', 'trtllm_mla',
        'cutedsl_mla', 'tokenspeed_mla', 'trtllm_mha', 'hpc_ops', 'minicpm_flashattn',
        'minicpm_flashinfer', 'aiter', 'wave', 'intel_amx', 'ascend', 'intel_xpu',
    )),
    'sampling_backend': ('str?', None),
    'grammar_backend': ('str?', (
        'xgrammar', 'outlines', 'llguidance', 'none',
    )),
    'radix_cache_backend': ('str?', None),
    'mm_attention_backend': ('str?', (
        'sdpa', 'fa3', 'fa4', 'triton_attn', 'ascend_attn', 'aiter_attn', 'flashinfer_cudnn',
        'amx_attn', 'xpu_attn',
    )),
    'fp8_gemm_runner_backend': ('str', (
        'auto', 'deep_gemm', 'flashinfer_trtllm', 'flashinfer_cutlass', 'flashinfer_deepgemm',
        'flashinfer_cutedsl', 'cutlass', 'triton', 'aiter',
    )),
    'fp4_gemm_runner_backend': ('str', (
        'auto', 'flashinfer_cudnn', 'flashinfer_cutedsl', 'flashinfer_cutlass',
        'flashinfer_trtllm', 'marlin',
    )),
    'bf16_gemm_backend': ('str', (
        'auto', 'cutedsl', 'gemv', 'torch',
    )),
    'dsa_prefill_backend': ('str?', (
        'flashmla_sparse', 'flashmla_sparse_q8', 'flashmla_kv', 'flashmla_auto',
        'flashinfer_sparse_mla', 'triton_sparse_mla', 'fa3', 'tilelang', 'triton', 'aiter',
        'trtllm', 'intel_xpu',
    )),
    'dsv4_prefill_backend': ('str', (
        'auto', 'flashmla_sparse', 'flashmla_sparse_q8',
    )),
    'dsa_decode_backend': ('str?', (
        'flashmla_sparse', 'flashmla_sparse_q8', 'flashmla_kv', 'flashmla_auto',
        'flashinfer_sparse_mla', 'fa3', 'tilelang', 'triton', 'aiter', 'trtllm', 'intel_xpu',
    )),
    'dsa_paged_mqa_logits_backend': ('str', (
        'auto', 'deepgemm', 'cutedsl', 'aiter',
    )),
    'dsa_topk_backend': ('str', (
        'sgl-kernel', 'torch', 'flashinfer',
    )),
    'disable_flashinfer_autotune': ('bool', None),
    'flashinfer_autotune_skip_ops': ('list?', None),
    'mamba_backend': ('str', (
        'triton', 'flashinfer',
    )),
    'cuda_graph_config': ('other?', None),
    'cuda_graph_backend_decode': ('str?', (
        'full', 'breakable', 'disabled',
    )),
    'cuda_graph_backend_prefill': ('str?', (
        'full', 'breakable', 'disabled',
    )),
    'cuda_graph_max_bs_decode': ('int?', None),
    'cuda_graph_max_bs_prefill': ('int?', None),
    'cuda_graph_bs_decode': ('list?', None),
    'cuda_graph_bs_prefill': ('list?', None),
    'cuda_graph_prefill_max_context': ('int?', None),
    'disable_prefill_cuda_graph': ('bool', None),
    'disable_decode_cuda_graph': ('bool', None),
    'disable_cuda_graph': ('bool', None),
    'disable_cuda_graph_padding': ('bool', None),
    'enable_profile_cuda_graph': ('bool', None),
    'enable_cudagraph_gc': ('bool', None),
    'debug_cuda_graph': ('bool', None),
    'enable_layerwise_nvtx_marker': ('bool', None),
    'enable_nccl_nvls': ('bool', None),
    'enable_symm_mem': ('bool', None),
    'triton_attention_reduce_in_fp32': ('bool', None),
    'triton_attention_num_kv_splits': ('int', None),
    'triton_attention_split_tile_size': ('int?', None),
    'flashinfer_mla_disable_ragged': ('bool', None),
    'enable_fused_qk_norm_rope': ('bool?', None),
    'enable_precise_embedding_interpolation': ('bool', None),
    'enable_fused_moe_sum_all_reduce': ('bool', None),
    'enable_deepseek_v4_fp4_indexer': ('bool', None),
    'disable_custom_all_reduce': ('bool', None),
    'enable_mscclpp': ('bool', None),
    'enable_torch_symm_mem': ('bool', None),
    'enable_scattered_sconv': ('bool', None),
    'pre_warm_nccl': ('bool', None),
    'boundary_reduction': ('str', (
        'auto', 'ar', 'rs', 'rsv', 'rs+rsv',
    )),
    'enable_quant_communications': ('bool?', None),
    'enable_flashinfer_allreduce_fusion': ('bool', None),
    'enforce_disable_flashinfer_allreduce_fusion': ('bool', None),
    'flashinfer_allreduce_fusion_backend': ('str?', (
        'auto', 'trtllm', 'mnnvl', 'cutedsl',
    )),
    'enable_aiter_allreduce_fusion': ('bool', None),
    'enable_torch_compile': ('bool', None),
    'enable_torch_compile_debug_mode': ('bool', None),
    'torch_compile_max_bs': ('int', None),
    'speculative_algorithm': ('str?', None),
    'uno_lora_path': ('str?', None),
    'speculative_draft_model_path': ('str?', None),
    'speculative_draft_model_revision': ('str?', None),
    'speculative_draft_load_format': ('str?', (
        'auto', 'pt', 'safetensors', 'instanttensor', 'npcache', 'dummy', 'sharded_state',
        'presharded', 'gguf', 'expert_pack', 'bitsandbytes', 'mistral', 'layered', 'flash_rl',
        'remote', 'remote_instance', 'fastsafetensors', 'private', 'runai_streamer',
    )),
    'speculative_num_steps': ('int?', None),
    'speculative_eagle_topk': ('int?', None),
    'speculative_num_draft_tokens': ('int?', None),
    'speculative_dflash_block_size': ('int?', None),
    'speculative_dspark_block_size': ('int?', None),
    'speculative_dspark_sps_table_path': ('str?', None),
    'speculative_dspark_confidence_sts_path': ('str?', None),
    'speculative_dspark_align_verify_tokens_to_graph_tier': ('bool', None),
    'speculative_accept_threshold_single': ('float', None),
    'speculative_accept_threshold_acc': ('float', None),
    'speculative_use_rejection_sampling': ('bool', None),
    'speculative_token_map': ('str?', None),
    'speculative_attention_mode': ('str', (
        'prefill', 'decode',
    )),
    'speculative_draft_attention_backend': ('str?', None),
    'speculative_dsa_topk_backend': ('str', (
        'sgl-kernel', 'torch', 'flashinfer',
    )),
    'speculative_draft_kv_cache_dtype': ('str?', (
        'auto', 'fp8_e5m2', 'fp8_e4m3', 'bf16', 'bfloat16',
    )),
    'speculative_draft_window_size': ('int?', None),
    'speculative_moe_runner_backend': ('str?', (
        'auto', 'deep_gemm', 'triton', 'triton_kernel', 'flashinfer_trtllm',
        'experimental_sgl_trtllm', 'flashinfer_trtllm_routed', 'flashinfer_cutlass',
        'flashinfer_mxfp4', 'flashinfer_cutedsl', 'flashinfer_megamoe', 'cutlass', 'aiter',
        'marlin', 'humming', 'experimental_sgl_marlin', 'lora_cutedsl', 'lora_triton',
        'lora_marlin', 'hpc_ops', 'megamoe', 'intel_xpu',
    )),
    'speculative_moe_a2a_backend': ('str?', (
        'none', 'deepep', 'mooncake', 'nixl', 'mori', 'ascend_fuseep', 'flashinfer', 'megamoe',
        'deepep_v2', 'pplx', 'ascend_tp',
    )),
    'speculative_enable_w4a4_mxfp4_megamoe': ('bool?', None),
    'speculative_draft_model_quantization': ('str?', (
        'awq', 'fp8', 'mxfp8', 'gptq', 'gptq_marlin', 'awq_marlin', 'bitsandbytes', 'gguf',
        'modelopt', 'modelopt_fp8', 'modelopt_fp4', 'nvfp4_online', 'modelopt_mixed',
        'petit_nvfp4', 'w8a8_int8', 'w8a8_fp8', 'moe_wna16', 'w4afp8', 'mxfp4', 'auto-round',
        'auto-round-int8', 'compressed-tensors', 'modelslim', 'mxfp_w4a8', 'quark',
        'quark_int4fp8_moe', 'quark_mxfp4', 'mlx_q4', 'mlx_q8', 'unquant', 'humming',
    )),
    'enable_multi_layer_eagle': ('bool', None),
    'speculative_adaptive': ('bool', None),
    'speculative_adaptive_config': ('str?', None),
    'decoupled_spec_bind_endpoint': ('str?', None),
    'decoupled_spec_connect_endpoints': ('list?', None),
    'decoupled_spec_rank': ('int?', None),
    'decoupled_spec_role': ('str', (
        'null', 'verifier', 'drafter',
    )),
    'spec_trace_dir': ('str?', None),
    'speculative_ngram_min_bfs_breadth': ('int', None),
    'speculative_ngram_max_bfs_breadth': ('int', None),
    'speculative_ngram_match_type': ('str', (
        'BFS', 'PROB',
    )),
    'speculative_ngram_max_trie_depth': ('int', None),
    'speculative_ngram_capacity': ('int', None),
    'speculative_ngram_external_corpus_path': ('str?', None),
    'speculative_ngram_external_sam_budget': ('int', None),
    'speculative_ngram_external_corpus_max_tokens': ('int', None),
    'ep_size': ('int', None),
    'moe_a2a_backend': ('str', (
        'none', 'deepep', 'mooncake', 'nixl', 'mori', 'ascend_fuseep', 'flashinfer', 'megamoe',
        'deepep_v2', 'pplx', 'ascend_tp', 'flashinfer_megamoe',
    )),
    'enable_w4a4_mxfp4_megamoe': ('bool', None),
    'deepep_v2_mode': ('str', (
        'direct', 'hybrid',
    )),
    'moe_runner_backend': ('str', (
        'auto', 'deep_gemm', 'triton', 'triton_kernel', 'flashinfer_trtllm',
        'experimental_sgl_trtllm', 'flashinfer_trtllm_routed', 'flashinfer_cutlass',
        'flashinfer_mxfp4', 'flashinfer_cutedsl', 'flashinfer_megamoe', 'cutlass', 'aiter',
        'marlin', 'humming', 'experimental_sgl_marlin', 'lora_cutedsl', 'lora_triton',
        'lora_marlin', 'hpc_ops', 'megamoe', 'intel_xpu',
    )),
    'flashinfer_mxfp4_moe_precision': ('str', (
        'default', 'bf16', 'fp8',
    )),
    'deepep_mode': ('str', (
        'auto', 'normal', 'low_latency',
    )),
    'fuseep_mode': ('int', (
        1, 2,
    )),
    'deepep_dispatcher_output_dtype': ('str', (
        'auto', 'bf16', 'fp8', 'int8', 'nvfp4',
    )),
    'ep_num_redundant_experts': ('int', None),
    'ep_dispatch_algorithm': ('str?', (
        'static', 'dynamic', 'fake', 'lp',
    )),
    'init_expert_location': ('str', None),
    'enable_eplb': ('bool', None),
    'eplb_algorithm': ('str', None),
    'eplb_rebalance_num_iterations': ('int', None),
    'eplb_rebalance_layers_per_chunk': ('int?', None),
    'eplb_min_rebalancing_utilization_threshold': ('float', None),
    'expert_distribution_recorder_mode': ('str?', (
        'stat', 'stat_approx', 'per_pass', 'per_token',
    )),
    'expert_distribution_recorder_buffer_size': ('int?', None),
    'expert_balancedness_report_mode': ('str', (
        'off', 'server_log', 'prometheus', 'both',
    )),
    'deepep_config': ('str?', None),
    'moe_dense_tp_size': ('int?', None),
    'elastic_ep_backend': ('other', (
        'none', 'mooncake', 'nixl',
    )),
    'enable_elastic_expert_backup': ('bool', None),
    'mooncake_ib_device': ('str?', None),
    'enable_waterfill': ('bool', None),
    'ep_join_mode': ('str?', (
        'scale', 'recover',
    )),
    'ep_join_rank_offset': ('int', None),
    'elastic_ep_initial_size': ('int?', None),
    'max_ep_size': ('int?', None),
    'elastic_ep_scale_timeout': ('float', None),
    'disable_flashinfer_cutlass_moe_fp4_allgather': ('bool', None),
    'disable_shared_experts_fusion': ('bool', None),
    'enforce_shared_experts_fusion': ('bool', None),
    'max_mamba_cache_size': ('int?', None),
    'mamba_ssm_dtype': ('str?', (
        'float32', 'bfloat16', 'float16',
    )),
    'mamba_max_states_per_path': ('int', None),
    'enable_mamba_cache_stochastic_rounding': ('bool', None),
    'mamba_cache_philox_rounds': ('int', None),
    'mamba_full_memory_ratio': ('float?', None),
    'mamba_radix_cache_strategy': ('str', (
        'auto', 'no_buffer', 'extra_buffer', 'extra_buffer_lazy',
    )),
    'uses_mamba_radix_cache': ('bool', None),
    'mamba_track_interval': ('int', None),
    'enable_int8_mamba_checkpoint': ('bool', None),
    'int8_mamba_ckpt_size': ('int?', None),
    'linear_attn_backend': ('str', (
        'triton', 'cutedsl', 'flashinfer', 'flashkda', 'nvidia_kda', 'ptx_kda', 'helion',
        'intel_xpu',
    )),
    'linear_attn_decode_backend': ('str?', (
        'triton', 'cutedsl', 'flashinfer', 'flashkda', 'nvidia_kda', 'ptx_kda', 'helion',
        'intel_xpu',
    )),
    'linear_attn_prefill_backend': ('str?', (
        'triton', 'cutedsl', 'flashinfer', 'flashkda', 'nvidia_kda', 'ptx_kda', 'helion',
        'intel_xpu',
    )),
    'linear_attn_verify_backend': ('str?', (
        'triton', 'cutedsl', 'flashinfer', 'flashkda', 'nvidia_kda', 'ptx_kda', 'helion',
        'intel_xpu', 'nv_cutedsl',
    )),
    'enable_linear_replayssm': ('bool', None),
    'linear_replayssm_cache_len': ('int', None),
    'enable_linear_replayssm_spec': ('bool', None),
    'enable_hierarchical_cache': ('bool', None),
    'hicache_host_memory_mode': ('str', (
        'cache', 'buffer_only',
    )),
    'hicache_ratio': ('float?', None),
    'hicache_size': ('int', None),
    'hicache_write_policy': ('str', (
        'write_back', 'write_through', 'write_through_selective',
    )),
    'hicache_io_backend': ('str', (
        'direct', 'kernel', 'kernel_ascend',
    )),
    'hicache_mem_layout': ('str', (
        'layer_first', 'page_first', 'page_first_direct', 'page_first_kv_split', 'page_head',
    )),
    'hicache_storage_backend': ('str?', (
        'file', 'sim', 'mooncake', 'npu_memcache', 'hf3fs', 'nixl', 'aibrix', 'dynamic', 'eic',
        'simm', 'mori', 'shm', 'tensorcast', 'seaweedfs',
    )),
    'hicache_storage_prefetch_policy': ('str', (
        'best_effort', 'wait_complete', 'timeout',
    )),
    'hicache_storage_backend_extra_config': ('str?', None),
    'hicache_storage_prefetch_retry_poll_interval': ('int', None),
    'hicache_storage_prefetch_retry_max_attempts': ('int', None),
    'enable_unified_cache_external_linker': ('bool', None),
    'unified_cache_external_linker_backend': ('str', (
        'mooncake', 'mori', 'dynamic',
    )),
    'enable_hisparse': ('bool', None),
    'hisparse_config': ('str?', None),
    'enable_broadcast_mm_inputs_process': ('bool', None),
    'enable_prefix_mm_cache': ('bool', None),
    'mm_enable_dp_encoder': ('bool?', None),
    'mm_process_config': ('other?', None),
    'mm_processor_worker_num': ('int', None),
    'mm_io_worker_num': ('int', None),
    'allowed_media_domains': ('list', None),
    'media_url_max_file_size_mb': ('int', None),
    'mm_preprocess_cache_size_mb': ('int?', None),
    'trust_mm_content_hashes': ('bool', None),
    'limit_mm_data_per_request': ('other?', None),
    'enable_mm_global_cache': ('bool', None),
    'image_processor_backend': ('str', (
        'auto', 'torchvision', 'pil',
    )),
    'mm_global_cache_backend': ('str', (
        'mooncake',
    )),
    'disable_fast_image_processor': ('bool', None),
    'mm_feature_transport': ('str?', (
        'cpu', 'cuda_ipc', 'cuda_vmm',
    )),
    'enable_lora': ('bool?', None),
    'enable_lora_overlap_loading': ('bool?', None),
    'max_lora_rank': ('int?', None),
    'lora_target_modules': ('other?', (
        'q_proj', 'k_proj', 'v_proj', 'o_proj', 'q_a_proj', 'kv_a_proj_with_mqa', 'q_b_proj',
        'kv_b_proj', 'wq_b', 'wk', 'weights_proj', 'gate_proj', 'up_proj', 'down_proj',
        'qkv_proj', 'gate_up_proj', 'embed_tokens', 'lm_head', 'qkvr', 'wo_ud', 'all',
    )),
    'lora_paths': ('other?', None),
    'max_loaded_loras': ('int?', None),
    'max_loras_per_batch': ('int', None),
    'lora_eviction_policy': ('str', (
        'lru', 'fifo',
    )),
    'lora_backend': ('str', (
        'triton', 'csgmv', 'ascend', 'torch_native', 'triton_v2',
    )),
    'max_lora_chunk_size': ('int?', (
        16, 32, 64, 128,
    )),
    'experts_shared_outer_loras': ('bool?', None),
    'lora_use_virtual_experts': ('bool', None),
    'lora_strict_loading': ('bool', None),
    'lora_drain_wait_threshold': ('float', None),
    'enable_two_batch_overlap': ('bool', None),
    'enable_single_batch_overlap': ('bool', None),
    'tbo_token_distribution_threshold': ('float', None),
    'cpu_offload_gb': ('int', None),
    'offload_group_size': ('int', None),
    'offload_num_in_group': ('int', None),
    'offload_prefetch_step': ('int', None),
    'offload_mode': ('str', None),
    'enable_lmcache': ('bool', None),
    'lmcache_config_file': ('str?', None),
    'enable_flexkv': ('bool', None),
    'flexkv_config_file': ('str?', None),
    'kt_weight_path': ('str?', None),
    'kt_method': ('str', None),
    'kt_cpuinfer': ('int?', None),
    'kt_threadpool_count': ('int', None),
    'kt_num_gpu_experts': ('int?', None),
    'kt_max_deferred_experts_per_token': ('int?', None),
    'dllm_algorithm': ('str?', None),
    'dllm_algorithm_config': ('str?', None),
    'dllm_fdfo': ('bool', None),
    'disaggregation_mode': ('str', (
        'null', 'prefill', 'decode',
    )),
    'disaggregation_transfer_backend': ('str', (
        'mooncake', 'nixl', 'ascend', 'fake', 'mori', 'mooncake_tcp',
    )),
    'disaggregation_bootstrap_port': ('int', None),
    'disaggregation_ib_device': ('str?', None),
    'disaggregation_decode_enable_radix_cache': ('bool', None),
    'disaggregation_decode_enable_offload_kvcache': ('bool', None),
    'disaggregation_decode_retraction_backup': ('str?', (
        'cpu_tensor', 'host_pool', 'none',
    )),
    'num_reserved_decode_tokens': ('int', None),
    'disaggregation_decode_extra_slots': ('int?', None),
    'disaggregation_decode_polling_interval': ('int', None),
    'optimistic_prefill_attempts': ('int', None),
    'encoder_only': ('bool', None),
    'language_only': ('bool', None),
    'language_model_only': ('bool', None),
    'encoder_transfer_backend': ('str', (
        'auto', 'zmq_to_scheduler', 'zmq_to_tokenizer', 'mooncake',
    )),
    'encoder_urls': ('list', None),
    'encoder_bootstrap_port': ('int', None),
    'encoder_register_urls': ('list', None),
    'enable_adaptive_dispatch_to_encoder': ('bool', None),
    'enable_pdmux': ('bool', None),
    'pdmux_config_path': ('str?', None),
    'sm_group_num': ('int', None),
    'startup_weight_load_mode': ('str', (
        'serial', 'overlap',
    )),
    'custom_weight_loader': ('list?', None),
    'weight_loader_disable_mmap': ('bool', None),
    'weight_loader_prefetch_checkpoints': ('bool', None),
    'weight_loader_prefetch_num_threads': ('int', None),
    'weight_loader_drop_cache_after_load': ('bool', None),
    'remote_instance_weight_loader_seed_instance_ip': ('str?', None),
    'remote_instance_weight_loader_seed_instance_service_port': ('int?', None),
    'remote_instance_weight_loader_send_weights_group_ports': ('list?', None),
    'remote_instance_weight_loader_backend': ('str', (
        'transfer_engine', 'nccl', 'modelexpress',
    )),
    'remote_instance_weight_loader_start_seed_via_transfer_engine': ('bool', None),
    'engine_info_bootstrap_port': ('int', None),
    'modelexpress_config': ('str?', None),
    'download_dir': ('str?', None),
    'model_checksum': ('str?', None),
    'delete_ckpt_after_loading': ('bool', None),
    'decrypted_config_file': ('str?', None),
    'decrypted_draft_config_file': ('str?', None),
    'checkpoint_engine_wait_weights_before_ready': ('bool', None),
    'enable_prefill_delayer': ('bool', None),
    'prefill_delayer_max_delay_passes': ('int', None),
    'prefill_delayer_token_usage_low_watermark': ('float?', None),
    'prefill_delayer_forward_passes_buckets': ('list?', None),
    'prefill_delayer_wait_seconds_buckets': ('list?', None),
    'prefill_delayer_queue_min_ratio': ('float?', None),
    'prefill_delayer_max_delay_ms': ('float?', None),
    'min_free_slots_delay': ('int?', None),
    'enable_deterministic_inference': ('bool', None),
    'rl_on_policy_target': ('str?', (
        'fsdp',
    )),
    'kv_canary': ('str', (
        'none', 'log', 'raise',
    )),
    'kv_canary_real_data': ('str', None),
    'kv_canary_sweep_interval': ('int', None),
    'enable_dynamic_batch_tokenizer': ('bool', None),
    'dynamic_batch_tokenizer_batch_size': ('int', None),
    'dynamic_batch_tokenizer_batch_timeout': ('float', None),
    'enable_tokenizer_batch_encode': ('bool', None),
    'disable_tokenizer_batch_decode': ('bool', None),
    'debug_tensor_dump_output_folder': ('str?', None),
    'debug_tensor_dump_layers': ('list?', None),
    'debug_tensor_dump_input_file': ('str?', None),
    'enable_memory_saver': ('bool', None),
    'enable_weights_cpu_backup': ('bool', None),
    'enable_draft_weights_cpu_backup': ('bool', None),
    'enable_custom_logit_processor': ('bool', None),
    'enable_return_hidden_states': ('bool', None),
    'return_hidden_states_mode': ('str?', (
        'last', 'full',
    )),
    'enable_return_routed_experts': ('bool', None),
    'enable_return_indexer_topk': ('bool', None),
    'sampling_mask_max_tokens': ('int', None),
    'disable_outlines_disk_cache': ('bool', None),
    'enable_mis': ('bool', None),
    'weight_cache_mode': ('str', (
        'off', 'daemon', 'client',
    )),
    'weight_cache_socket': ('str?', None),
    'weight_cache_timeout': ('int', None),
    'forward_hooks': ('list?', None),
    'msprobe_dump_config': ('str?', None),
    'ple_offload_embedding': ('bool?', None),
    'ple_offload_backend': ('str', (
        'pinned', 'file',
    )),
    'ple_offload_dir': ('str?', None),
    'disaggregation_enable_kv_checksum': ('bool', None),
    'enable_pd_role_switch': ('bool', None),
    'speculative_domino_candidate_pool_size': ('int', None),
    'flashinfer_a2a_dispatch_type': ('str?', (
        'auto', 'bf16', 'nvfp4', 'mxfp8',
    )),
    'cuda_graph_max_seq_len_prefill': ('int?', None),
    'prefill_kv_cache_dequant_dtype': ('str', (
        'auto', 'nvfp4', 'fp8_e4m3',
    )),
    'dsv4_attn_backend': ('str', (
        'auto', 'flashmla', 'flashmla_mega', 'trtllm',
    )),
    'otlp_service_name': ('str?', None),
    'hicache_host_memory_fraction': ('float?', None),
    'enable_linker_mla_dedup': ('bool', None),
    'swa_prefix_tails': ('int?', None),
    'enable_encoder_swa_bounded_replay': ('bool', None),
    'enable_decoder_swa_bounded_replay': ('bool?', None),
    'enable_response_store': ('bool', None),
    'disaggregation_decode_host_receive_threshold': ('float', None),
    'qsa_indexer_dtype': ('str', (
        'auto', 'bfloat16', 'fp8_e4m3',
    )),
    'disaggregation_decode_allocation_policy': ('str', (
        'early', 'prefill_complete',
    )),
    'speculative_boundary_reduction': ('str', (
        'ar', 'rs', 'rsv', 'rs+rsv',
    )),
    'speculative_use_block_verification': ('bool', None),
    'speculative_draft_sink_size': ('int?', None),
    'disable_aiter_allreduce_fusion_in_prefill': ('bool', None),
    'disable_aiter_allreduce_fusion_in_decode': ('bool', None),
    'enable_amd_monokernel': ('bool', None),
    'dsa_triton_union': ('int', (
        0, 2, 4,
    )),
    'enable_dsa_fused_indexer': ('bool?', None),
    'enable_cp_tp_group_sharing': ('bool', None),
    'enable_watermark': ('bool', None),
    'watermark_config': ('str?', None),
    'watermark_key': ('str?', None),
    'watermark_key_b': ('str?', None),
    'watermark_context_window': ('int', None),
    'watermark_mixing_probability': ('float', None),
    'watermark_max_probability': ('float', None),
    'watermark_default_enabled': ('bool', None),
    'watermark_enforce_all': ('bool', None),
    'grpc_response_timeout_secs': ('int', None),
    'enable_paged_experts': ('bool', None),
    'paged_experts_num_resident': ('int?', None),
    'enable_nvidia_megakernel': ('bool', None),
    'enable_megamoe_for_layernorm_sp': ('bool', None),
    'enable_http_worker_reuseport': ('bool', None),
    'prefill_decode_interval_min_bs': ('int', None),
    'unified_cache_external_linker_config': ('other?', None),
    'enable_return_aux_hidden_states': ('bool', None),
    'aux_hidden_state_capture': ('str?', None),
    'return_aux_hidden_state_layer_ids': ('list?', None),
}

# Fields SGLang does not expose as command-line flags.
NO_CLI: frozenset[str] = frozenset({
    'enable_dp_attention',
    'grpc_worker_threads',
    'sampling_backend',
    'disable_cuda_graph',
    'enable_flashinfer_allreduce_fusion',
    'uses_mamba_radix_cache',
    'speculative_boundary_reduction',
    'enable_cp_tp_group_sharing',
    'watermark_key',
    'watermark_key_b',
    'watermark_context_window',
    'watermark_mixing_probability',
    'watermark_max_probability',
    'watermark_default_enabled',
    'watermark_enforce_all',
    'aux_hidden_state_capture',
})
# --- generated: end ---


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        sys.stdout.write(_render())
