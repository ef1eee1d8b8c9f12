"""autotune.sglang.trial_start: the lean-start settings against SGLang 0.5.17's own rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.sglang import flags as sglang_flags
from autotune.sglang.trial_start import (
    QUICK_STOP_ENV,
    SMALLEST_DEFAULT_MAX_BS,
    covering_decode_max_bs,
    crash_diagnostics_on,
    decode_graph_batch_sizes,
    lean_start_args,
)

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
    args, added = lean_start_args({"speculative_algorithm": "EAGLE3", "tp_size": 1}, max_concurrency=2,
                                  own_warmup=True, flag_set=FLAGS_517)
    assert args["cuda_graph_max_bs_decode"] == 2 and args["skip_server_warmup"] is True
    assert added == {"cuda_graph_max_bs_decode", "skip_server_warmup"}
    args, added = lean_start_args({"tp_size": 1}, max_concurrency=3, own_warmup=False, flag_set=FLAGS_517)
    assert args == {"tp_size": 1, "cuda_graph_max_bs_decode": 4} and added == {"cuda_graph_max_bs_decode"}


@pytest.mark.parametrize("given", [{"cuda_graph_max_bs": 4}, {"cuda_graph_max_bs_decode": 16},
                                   {"cuda_graph_bs": [1, 2]}, {"disable_cuda_graph": True},
                                   {"skip_server_warmup": False}])
def test_what_the_space_sets_is_left_alone(given):
    args, added = lean_start_args(given, max_concurrency=1, own_warmup=True, flag_set=FLAGS_517)
    assert {k: args[k] for k in given} == given
    assert not set(added) & set(given)
    if "skip_server_warmup" not in given:
        assert "cuda_graph_max_bs_decode" not in added  # any decode-graph setting keeps its capture


def test_no_cap_without_a_concurrency_cap_or_above_the_smallest_default():
    for conc in (None, SMALLEST_DEFAULT_MAX_BS + 1):
        args, added = lean_start_args({"tp_size": 1}, max_concurrency=conc, own_warmup=False, flag_set=FLAGS_517)
        assert args == {"tp_size": 1} and not added


def test_crash_diagnostics_switches():
    assert crash_diagnostics_on({})  # SGLang's defaults: both on
    assert crash_diagnostics_on({"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0"})  # the core dump still pauses
    assert not crash_diagnostics_on(dict(QUICK_STOP_ENV))
    assert not crash_diagnostics_on({k: "false" for k in QUICK_STOP_ENV})
