"""autotune.sglang.trial_start: the lean-start settings against SGLang 0.5.17's own rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.sglang import flags as sglang_flags
from autotune.sglang.graph_sizes import (
    SMALLEST_DEFAULT_DECODE_MAX_BS,
    SMALLEST_DEFAULT_PREFILL_MAX_TOKENS,
    decode_graph_batch_sizes,
    default_decode_max_bs,
    default_prefill_max_tokens,
    gpu_memory_mib,
    model_uses_mla,
    prefill_graph_token_sizes,
)
from autotune.sglang.trial_start import (
    POST_CAPTURE_KV_ENV,
    QUICK_STOP_ENV,
    covering_decode_max_bs,
    covering_prefill_max_tokens,
    crash_diagnostics_on,
    lean_start_args,
)

SMALLEST_DEFAULT_MAX_BS = SMALLEST_DEFAULT_DECODE_MAX_BS
#: Every graph cut needs the KV pool fixed by the launch (trial_start's text).
FIXED = {"mem_fraction_static": 0.6}

ROOT = Path(__file__).resolve().parents[3]
FLAGS_517 = sglang_flags.flags_from_table(str(ROOT / "tests" / "data" / "sglang-0.5.17-flags.json"))


def _graph_for(batch: int, sizes: list[int]) -> int | None:
    """The captured size a batch pads to (SGLang: the smallest captured size >= the batch)."""
    return next((s for s in sorted(sizes) if s >= batch), None)


def test_lists_are_sglang_0517s():
    # ServerArgs._generate_decode_cuda_graph_batch_sizes at an H200's default max_bs (256).
    plain = decode_graph_batch_sizes(256, speculative=False)
    assert plain[:8] == [1, 2, 4, 8, 12, 16, 24, 32] and plain[-1] == 256 and len(plain) == 36
    spec = decode_graph_batch_sizes(256, speculative=True)
    assert spec[:10] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12] and spec[-1] == 256 and len(spec) == 51
    assert decode_graph_batch_sizes(6, speculative=False) == [1, 2, 4, 6]  # max_bs itself is appended
    assert decode_graph_batch_sizes(5, speculative=False, no_padding=True) == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="max_bs must be >= 1"):
        decode_graph_batch_sizes(0, speculative=True)


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("no_padding", [False, True])
def test_every_batch_the_workload_reaches_pads_to_the_default_capture_graph(speculative, no_padding):
    for default_max_bs in (SMALLEST_DEFAULT_MAX_BS, 24, 256, 512):
        default = decode_graph_batch_sizes(default_max_bs, speculative=speculative, no_padding=no_padding)
        for concurrency in range(1, 40):
            cap = covering_decode_max_bs(concurrency, speculative=speculative, no_padding=no_padding)
            if cap is None:
                assert concurrency > SMALLEST_DEFAULT_MAX_BS
                continue
            lean = decode_graph_batch_sizes(cap, speculative=speculative, no_padding=no_padding)
            assert len(lean) <= len(default)  # never more graphs than the exported server's
            for batch in range(1, concurrency + 1):
                assert _graph_for(batch, lean) == _graph_for(batch, default), (concurrency, batch)


def test_the_cap_is_the_smallest_that_covers():
    assert covering_decode_max_bs(1, speculative=True) == 1
    assert covering_decode_max_bs(3, speculative=True) == 3
    assert covering_decode_max_bs(3, speculative=False) == 4  # the plain list pads 3 to 4
    assert covering_decode_max_bs(5, speculative=False) == 8
    assert covering_decode_max_bs(9, speculative=True) is None
    with pytest.raises(ValueError, match="max_concurrency"):
        covering_decode_max_bs(0, speculative=True)


def test_lean_args_under_0517():
    args, added = lean_start_args({"speculative_algorithm": "EAGLE3", "tp_size": 1, **FIXED}, max_concurrency=2,
                                  own_warmup=True, flag_set=FLAGS_517)
    assert args["cuda_graph_max_bs_decode"] == 2 and args["skip_server_warmup"] is True
    assert added == {"cuda_graph_max_bs_decode", "skip_server_warmup"}
    args, added = lean_start_args({"tp_size": 1, **FIXED}, max_concurrency=3, own_warmup=False,
                                  max_prefill_tokens=900, flag_set=FLAGS_517)
    assert args == {"tp_size": 1, **FIXED, "cuda_graph_max_bs_decode": 4, "cuda_graph_max_bs_prefill": 960}
    assert added == {"cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill"}


def test_no_graph_cut_where_the_kv_pool_depends_on_the_graphs():
    # Without mem_fraction_static SGLang sizes the KV pool from a reserve that counts the captured
    # graphs; with post-capture sizing, from the memory they leave: a cut would change the pool.
    for server_args, env in (({"tp_size": 1}, None), ({"tp_size": 1, **FIXED}, {POST_CAPTURE_KV_ENV: "1"})):
        args, added = lean_start_args(server_args, max_concurrency=1, own_warmup=True, max_prefill_tokens=100,
                                      env=env, flag_set=FLAGS_517)
        assert added == {"skip_server_warmup"}
        assert "cuda_graph_max_bs_decode" not in args and "cuda_graph_max_bs_prefill" not in args
    args, added = lean_start_args({"tp_size": 1, **FIXED}, max_concurrency=1, own_warmup=False,
                                  max_prefill_tokens=100, env={POST_CAPTURE_KV_ENV: "false"}, flag_set=FLAGS_517)
    assert added == {"cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill"}


def test_prefill_list_is_sglang_0517s():
    # ServerArgs._generate_prefill_cuda_graph_batch_sizes at an H200's chunked_prefill_size (8192).
    sizes = prefill_graph_token_sizes(8192)
    assert len(sizes) == 58 and sizes[:9] == [4, 8, 12, 16, 20, 24, 28, 32, 48] and sizes[-2:] == [7680, 8192]
    assert prefill_graph_token_sizes(1000)[-1] == 960  # the maximum is not appended off the schedule
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        prefill_graph_token_sizes(0)


@pytest.mark.parametrize("chunk", [None, 300, 1000, 2048, 8192])
def test_every_prefill_the_workload_reaches_runs_on_the_default_capture_graph(chunk):
    # The export's default capture stops at chunked_prefill_size (2048 at the least by default).
    for default_max in ([SMALLEST_DEFAULT_PREFILL_MAX_TOKENS, 4096, 8192, 16384] if chunk is None else [chunk]):
        default = prefill_graph_token_sizes(default_max)
        for bound in [*range(1, 80), *range(80, 2200, 37)]:
            cap = covering_prefill_max_tokens(bound, chunked_prefill_size=chunk)
            if cap is None:
                assert bound > min(SMALLEST_DEFAULT_PREFILL_MAX_TOKENS, chunk or SMALLEST_DEFAULT_PREFILL_MAX_TOKENS) \
                    or bound > max(prefill_graph_token_sizes(chunk or SMALLEST_DEFAULT_PREFILL_MAX_TOKENS))
                continue
            lean = prefill_graph_token_sizes(cap)
            assert lean == default[:len(lean)]  # a prefix: never a graph the export lacks
            for tokens in range(1, min(bound, chunk or bound) + 1, 7):
                assert _graph_for(tokens, lean) == _graph_for(tokens, default), (bound, tokens)


def test_the_prefill_cap_is_the_smallest_that_covers():
    assert covering_prefill_max_tokens(1) == 4
    assert covering_prefill_max_tokens(33) == 48
    assert covering_prefill_max_tokens(1025) == 1280
    assert covering_prefill_max_tokens(2048) == 2048
    assert covering_prefill_max_tokens(2049) is None  # could exceed the smallest default capture
    assert covering_prefill_max_tokens(700, chunked_prefill_size=512) is None  # no forward holds 700
    assert covering_prefill_max_tokens(100, chunked_prefill_size=-1) is None
    with pytest.raises(ValueError, match="max_tokens"):
        covering_prefill_max_tokens(0)


@pytest.mark.parametrize("given", [{"cuda_graph_max_bs": 4}, {"cuda_graph_max_bs_decode": 16},
                                   {"cuda_graph_bs": [1, 2]}, {"disable_cuda_graph": True},
                                   {"skip_server_warmup": False}])
def test_what_the_space_sets_is_left_alone(given):
    args, added = lean_start_args({**given, **FIXED}, max_concurrency=1, own_warmup=True, flag_set=FLAGS_517)
    assert {k: args[k] for k in given} == given
    assert not set(added) & set(given)
    if "skip_server_warmup" not in given:
        assert "cuda_graph_max_bs_decode" not in added  # any decode-graph setting keeps its capture


@pytest.mark.parametrize("given", [{"cuda_graph_max_bs_prefill": 512}, {"piecewise_cuda_graph_max_tokens": 512},
                                   {"disable_prefill_cuda_graph": True}, {"cuda_graph_backend_prefill": "full"},
                                   {"max_total_tokens": 4096}, {"enable_mixed_chunk": True},
                                   {"enable_dp_attention": True}, {"disable_cuda_graph": True}])
def test_what_the_space_sets_for_prefill_is_left_alone(given):
    args, added = lean_start_args({**given, **FIXED}, max_concurrency=1, own_warmup=False, max_prefill_tokens=100,
                                  flag_set=FLAGS_517)
    assert "cuda_graph_max_bs_prefill" not in added
    assert {k: args[k] for k in given} == given


def test_no_prefill_cap_without_a_bound_or_above_the_smallest_default():
    for bound in (None, SMALLEST_DEFAULT_PREFILL_MAX_TOKENS + 1):
        args, added = lean_start_args({"tp_size": 1, **FIXED}, max_concurrency=None, own_warmup=False,
                                      max_prefill_tokens=bound, flag_set=FLAGS_517)
        assert args == {"tp_size": 1, **FIXED} and not added
    args, _ = lean_start_args({"tp_size": 1, "chunked_prefill_size": 1024, **FIXED}, max_concurrency=None,
                              own_warmup=False, max_prefill_tokens=1000, flag_set=FLAGS_517)
    assert args["cuda_graph_max_bs_prefill"] == 1024


def test_no_cap_without_a_concurrency_cap_or_above_the_smallest_default():
    for conc in (None, SMALLEST_DEFAULT_MAX_BS + 1):
        args, added = lean_start_args({"tp_size": 1, **FIXED}, max_concurrency=conc, own_warmup=False,
                                      flag_set=FLAGS_517)
        assert args == {"tp_size": 1, **FIXED} and not added


def test_crash_diagnostics_switches():
    assert crash_diagnostics_on({})  # SGLang's defaults: both on
    assert crash_diagnostics_on({"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0"})  # the core dump still pauses
    assert not crash_diagnostics_on(dict(QUICK_STOP_ENV))
    assert not crash_diagnostics_on({k: "false" for k in QUICK_STOP_ENV})


@pytest.mark.parametrize("mib,tp,default", [(None, 1, 8), (16_000, 1, 8), (24_000, 1, 24), (24_000, 4, 80),
                                            (40_960, 2, 32), (40_960, 8, 160), (81_559, 1, 256), (81_559, 4, 512),
                                            (143_771, 1, 256), (143_771, 8, 512), (183_000, 1, 512)])
def test_sglangs_default_decode_max_bs_by_gpu_memory(mib, tp, default):
    # ServerArgs._handle_gpu_memory_settings' tiers (20, 35, 60, 160 GiB); H100 80 GB and H200 141 GB.
    assert default_decode_max_bs(mib, tp_size=tp) == default


def test_on_a_known_gpu_the_decode_cap_covers_batch_workloads_up_to_its_default():
    h200 = 143_771.0
    for speculative in (False, True):
        default = decode_graph_batch_sizes(256, speculative=speculative)
        for concurrency in (9, 16, 48, 64, 200, 256):
            cap = covering_decode_max_bs(concurrency, speculative=speculative, ceiling=256)
            assert cap is not None
            lean = decode_graph_batch_sizes(cap, speculative=speculative)
            assert lean == default[:len(lean)]  # a prefix of the default capture: no graph it lacks
            assert all(_graph_for(b, lean) == _graph_for(b, default) for b in range(1, concurrency + 1))
        assert covering_decode_max_bs(257, speculative=speculative, ceiling=256) is None
    args, added = lean_start_args({"speculative_algorithm": "EAGLE3", "tp_size": 1, **FIXED}, max_concurrency=16,
                                  own_warmup=False, gpu_mem_mib=h200, flag_set=FLAGS_517)
    assert args["cuda_graph_max_bs_decode"] == 16 and added == {"cuda_graph_max_bs_decode"}
    args, added = lean_start_args({"speculative_algorithm": "EAGLE3", "tp_size": 1, **FIXED}, max_concurrency=16,
                                  own_warmup=False, gpu_mem_mib=None, flag_set=FLAGS_517)
    assert not added  # the GPU unknown: 16 is above the smallest default (8), nothing is cut


def test_gpu_memory_is_read_as_sglang_reads_it(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"  # a real program on PATH, printing what nvidia-smi prints
    fake.write_text("#!/bin/sh\nprintf '81559\\n143771\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    gpu_memory_mib.cache_clear()
    try:
        assert gpu_memory_mib() == 81559.0  # the smallest GPU, as SGLang takes it
        fake.write_text("#!/bin/sh\necho 'No devices were found'\n")
        gpu_memory_mib.cache_clear()
        assert gpu_memory_mib() is None
    finally:
        gpu_memory_mib.cache_clear()


@pytest.mark.parametrize("mib,mla,path,tokens", [
    (None, False, "m", 2048), (143_771, None, "m", 2048), (143_771, True, "m", 2048),  # unknown or MLA: 2048
    (24_000, False, "m", 2048), (40_960, False, "m", 4096), (81_559, False, "m", 8192),
    (143_771, False, "m", 8192), (183_000, False, "m", 16384), (143_771, False, "/x/Llama-2-7b", 4096)])
def test_sglangs_default_prefill_max_tokens(mib, mla, path, tokens):
    # _handle_gpu_memory_settings' chunked_prefill_size tiers, the MLA default and the Llama-2 limit.
    assert default_prefill_max_tokens(mib, mla=mla, model_path=path) == tokens


def test_mla_is_read_from_the_models_config(tmp_path):
    assert model_uses_mla(str(tmp_path)) is None and model_uses_mla(None) is None  # no config: unknown
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}')
    assert model_uses_mla(str(tmp_path)) is False
    (tmp_path / "config.json").write_text('{"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512}')
    assert model_uses_mla(str(tmp_path)) is True
    (tmp_path / "config.json").write_text('{"text_config": {"kv_lora_rank": 512}}')  # Kimi-K2.5's layout
    assert model_uses_mla(str(tmp_path)) is True
    (tmp_path / "config.json").write_text("{not json")
    assert model_uses_mla(str(tmp_path)) is None


def test_on_a_known_gpu_the_prefill_cap_covers_up_to_its_default():
    for default_max in (8192, 16384):
        default = prefill_graph_token_sizes(default_max)
        for bound in (2049, 3994, 4096, 4097, 8000, 8192):
            cap = covering_prefill_max_tokens(bound, ceiling=8192)
            assert cap is not None and cap >= bound
            lean = prefill_graph_token_sizes(cap)
            assert lean == default[:len(lean)]
            assert all(_graph_for(t, lean) == _graph_for(t, default) for t in range(1, bound + 1, 13))
    assert covering_prefill_max_tokens(8193, ceiling=8192) is None
    args, added = lean_start_args({"tp_size": 1, **FIXED}, max_concurrency=None, own_warmup=False,
                                  max_prefill_tokens=3994, prefill_ceiling=8192, flag_set=FLAGS_517)
    assert args["cuda_graph_max_bs_prefill"] == 4096 and added == {"cuda_graph_max_bs_prefill"}
