"""SGLang command-line handling: the real parser, the built-in twin, and the EAGLE rules.

Real-parser tests need ``sglang`` (0.5.23, installed with --no-deps); they are skipped, with the
reason, where it is not importable. Everything else runs on the built-in parser.
"""

from __future__ import annotations

import argparse
import json

import pytest

from autotune.errors import ConfigError, LaunchArgsError
from autotune.sglang import _parser_twin as builtin
from autotune.sglang import args as sa
from autotune.sglang import parser_tables, speculative

needs_sglang = pytest.mark.skipif(
    not sa.sglang_available(),
    reason="sglang is not importable here (pip install --no-deps sglang==0.5.23 plus its small deps)",
)
PARSERS = [pytest.param(True, marks=needs_sglang, id="sglang"), pytest.param(False, id="builtin")]


def outcome(argv: list[str], *, use_sglang: bool, **kw) -> tuple[str, object]:
    """("ok", resolved dict) or ("error", message)."""
    try:
        return "ok", sa.parse_server_args(argv, use_sglang=use_sglang, **kw)
    except LaunchArgsError as exc:
        return "error", str(exc)


# ---------------------------------------------------------------------------------------------
# The built-in table is SGLang's parser, flag for flag.
# ---------------------------------------------------------------------------------------------


@needs_sglang
def test_flag_table_matches_installed_sglang():
    fresh = parser_tables.table_from_sglang()
    assert fresh == builtin.flag_table(), (
        "SGLang's flags changed; regenerate autotune/sglang/data/parser-*.json with\n"
        "  .venv/bin/python -m autotune.sglang.parser_tables --write"
    )


@needs_sglang
def test_builtin_parser_has_the_same_spellings_in_the_same_order():
    def spellings(parser: argparse.ArgumentParser) -> list[str]:
        return [o for a in parser._actions for o in a.option_strings]

    assert sorted(spellings(builtin.build_parser())) == sorted(spellings(sa.real_parser()))
    # Order matters for argparse's ambiguity message; --config is registered late in both.
    real = [o for o in spellings(sa.real_parser()) if o != "--config"]
    ours = [o for o in spellings(builtin.build_parser()) if o != "--config"]
    assert ours == real


@needs_sglang
@pytest.mark.parametrize("dest", sorted(builtin.covered()))
def test_covered_flag_matches_sglang(dest):
    real = [a for a in sa.real_parser()._actions if a.dest == dest]
    ours = [a for a in builtin.build_parser()._actions if a.dest == dest]
    assert real, f"{dest} is not a flag of the installed SGLang"
    assert len(ours) == len(real)
    for r, o in zip(real, ours, strict=True):
        assert o.option_strings == r.option_strings
        assert o.nargs == r.nargs
        assert o.default == r.default
        assert o.required == r.required
        assert getattr(o.type, "__name__", None) == getattr(r.type, "__name__", None)
        assert (list(o.choices) if o.choices else None) == (list(r.choices) if r.choices else None)


@needs_sglang
def test_real_result_has_every_field_argparse_produced():
    result = sa.parse_server_args(["--model-path", "m"], use_sglang=True)
    dests = {a.dest for a in sa.real_parser()._actions} - {"help", "config"}
    assert dests <= set(result)
    assert result["schedule_policy"] == "fcfs"  # a flag the built-in parser does not cover
    assert "config" not in result


def test_builtin_result_leaves_out_uncovered_flags_unless_given():
    quiet = sa.parse_server_args(["--model-path", "m"], use_sglang=False)
    assert "schedule_policy" not in quiet
    assert quiet["tp_size"] == 1 and quiet["host"] == "127.0.0.1" and quiet["port"] == 30000
    given = sa.parse_server_args(["--model-path", "m", "--schedule-policy", "lpm",
                                  "--chunked-prefill-size", "4096"], use_sglang=False)
    assert given["schedule_policy"] == "lpm"
    assert given["chunked_prefill_size"] == 4096


# ---------------------------------------------------------------------------------------------
# The two parsers accept and reject the same command lines.
# ---------------------------------------------------------------------------------------------

M = ["--model-path", "org/some-model"]
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "org/draft"]

AGREEMENT = {
    # Accepted.
    "minimal": M,
    "alias_and_prefix": ["--model", "m", "--tp", "2"],
    "long_aliases": M + ["--tensor-parallel-size", "4", "--data-parallel-size", "2", "--ep", "2"],
    "eagle3_explicit": M + SPEC + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                                   "--speculative-num-draft-tokens", "8"],
    "nextn_auto_qwen": ["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "nextn"],
    "eagle3_auto_llama": ["--model-path", "meta-llama/Llama-3.1-8B-Instruct"] + SPEC,
    "topk1_forces_draft": M + SPEC + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                      "--speculative-num-draft-tokens", "7"],
    "topk1_without_draft": M + SPEC + ["--speculative-num-steps", "2", "--speculative-eagle-topk", "1"],
    "spec_modes": M + SPEC + ["--speculative-attention-mode", "decode",
                              "--speculative-accept-threshold-single", "0.5",
                              "--speculative-accept-threshold-acc", "0.7"],
    "cuda_graph": M + ["--cuda-graph-max-bs-decode", "32", "--cuda-graph-bs-decode", "1", "2", "4", "8"],
    "cuda_graph_off": M + ["--cuda-graph-backend-decode", "disabled", "--disable-prefill-cuda-graph"],
    "comm_switches": M + ["--disable-custom-all-reduce", "--enable-torch-symm-mem", "--pre-warm-nccl",
                          "--enable-mscclpp", "--enable-torch-compile", "--disable-overlap-schedule"],
    "attention_memory": M + ["--attention-backend", "fa3", "--mem-fraction-static", "0.85",
                             "--max-running-requests", "16"],
    "loading": M + ["--load-format", "dummy", "--enable-metrics", "--trust-remote-code", "--dtype",
                    "bfloat16", "--context-length", "32k"],
    "serving_equals_form": M + ["--port=31000", "--host", "0.0.0.0", "--log-level", "warning",
                                "--random-seed", "7"],
    "uncovered_flags": M + ["--chunked-prefill-size", "4096", "--schedule-policy", "lpm"],
    "deprecated_switch": M + ["--disable-cuda-graph"],
    "ngram": M + ["--speculative-algorithm", "ngram"],
    "adaptive": M + ["--speculative-algorithm", "EAGLE", "--speculative-adaptive"],
    "standalone_auto": ["--model-path", "meta-llama/Llama-3.1-70B", "--speculative-algorithm",
                        "STANDALONE", "--speculative-draft-model-path", "meta-llama/Llama-3.2-1B"],
    "spec_off_ignores_values": M + ["--speculative-num-steps", "3"],
    # Rejected by argparse.
    "ambiguous_prefix": M + ["--cuda-graph-max-bs", "8"],
    "unknown_flag": M + ["--bogus-flag", "1"],
    "missing_model": ["--tp-size", "2"],
    "bad_int": M + ["--tp-size", "two"],
    "bad_choice": M + ["--attention-backend", "fa9"],
    "bad_mode": M + ["--speculative-attention-mode", "both"],
    "retired_backend": M + ["--cuda-graph-backend-decode", "tc_piecewise"],
    "bad_human_int": M + ["--context-length", "1.5Ki"],
    "missing_value": M + ["--mem-fraction-static"],
    "switch_with_value": M + ["--enable-metrics", "yes"],
    # Rejected by the speculative rules.
    "steps_only": M + SPEC + ["--speculative-num-steps", "3"],
    "no_steps": M + SPEC + ["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
    "topk_gt1_no_draft": M + SPEC + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4"],
    "unknown_algorithm": M + ["--speculative-algorithm", "medusa"],
    "trtllm_mha_topk": M + SPEC + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
                                   "--speculative-num-draft-tokens", "6", "--attention-backend", "trtllm_mha"],
    "paged_tree_backend": M + SPEC + ["--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
                                      "--speculative-num-draft-tokens", "6", "--page-size", "16",
                                      "--attention-backend", "flashmla"],
    "rejection_topk": M + SPEC + ["--speculative-use-rejection-sampling", "--speculative-num-steps", "3",
                                  "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"],
}
EXPECT_OK = {
    "minimal", "alias_and_prefix", "long_aliases", "eagle3_explicit", "nextn_auto_qwen",
    "eagle3_auto_llama", "topk1_forces_draft", "topk1_without_draft", "spec_modes", "cuda_graph",
    "cuda_graph_off", "comm_switches", "attention_memory", "loading", "serving_equals_form",
    "uncovered_flags", "deprecated_switch", "ngram", "adaptive", "standalone_auto",
    "spec_off_ignores_values",
}


@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_builtin_parser_outcome(name):
    kind, value = outcome(AGREEMENT[name], use_sglang=False)
    assert kind == ("ok" if name in EXPECT_OK else "error"), value


@needs_sglang
@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_real_and_builtin_parsers_agree(name):
    real_kind, real = outcome(AGREEMENT[name], use_sglang=True)
    ours_kind, ours = outcome(AGREEMENT[name], use_sglang=False)
    assert real_kind == ours_kind, (real, ours)
    if real_kind == "error":
        assert ours == real
    else:
        assert set(ours) <= set(real)
        assert {k: real[k] for k in ours} == ours


def test_argparse_messages_are_argparses_own():
    cases = {
        "ambiguous_prefix": "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
                            "--cuda-graph-max-bs-prefill",
        "unknown_flag": "unrecognized arguments: --bogus-flag 1",
        "missing_model": "the following arguments are required: --model-path/--model",
        "bad_int": "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'",
        "retired_backend": "argument --cuda-graph-backend-decode: tc_piecewise was removed; select breakable, "
                           "full, or disabled",
        "missing_value": "argument --mem-fraction-static: expected one argument",
    }
    for name, message in cases.items():
        assert outcome(AGREEMENT[name], use_sglang=False) == ("error", message), name
    kind, message = outcome(AGREEMENT["bad_choice"], use_sglang=False)
    assert message.startswith("argument --attention-backend: invalid choice: 'fa9' (choose from 'triton'")


def test_launch_args_error_carries_argv_and_is_a_config_error():
    argv = M + ["--bogus"]
    with pytest.raises(LaunchArgsError) as info:
        sa.parse_server_args(argv, use_sglang=False)
    assert isinstance(info.value, ConfigError)
    assert info.value.argv == argv


def test_help_is_an_error_not_an_exit():
    with pytest.raises(LaunchArgsError, match="help"):
        sa.parse_server_args(M + ["--help"], use_sglang=False)


def test_use_sglang_true_without_sglang_says_so(monkeypatch):
    monkeypatch.setattr(sa, "sglang_available", lambda: False)
    with pytest.raises(Exception, match="not importable"):
        sa.parse_server_args(M, use_sglang=True)


# ---------------------------------------------------------------------------------------------
# EAGLE rules.
# ---------------------------------------------------------------------------------------------


def spec_values(result: dict) -> tuple:
    return (result["speculative_algorithm"], result["speculative_num_steps"],
            result["speculative_eagle_topk"], result["speculative_num_draft_tokens"])


@pytest.mark.parametrize("use_sglang", PARSERS)
def test_auto_pick_depends_on_architecture(use_sglang):
    llama = sa.parse_server_args(["--model-path", "meta-llama/Llama-3.1-8B"] + SPEC, use_sglang=use_sglang)
    assert spec_values(llama) == ("EAGLE3", 5, 4, 8)
    kimi = sa.parse_server_args(["--model-path", "moonshotai/Kimi-K2.5"] + SPEC, use_sglang=use_sglang)
    assert spec_values(kimi) == ("EAGLE3", 3, 1, 4)
    hinted = sa.parse_server_args(["--model-path", "/ckpt/x"] + SPEC, use_sglang=use_sglang,
                                  model_arch="Grok1ForCausalLM")
    assert spec_values(hinted) == ("EAGLE3", 5, 4, 8)


@needs_sglang
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM",
                                  "DeepseekV3ForCausalLM", "Qwen2ForCausalLM", "Llama4ForConditionalGeneration",
                                  "MistralForCausalLM", "GptOssForCausalLM"])
@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3", "STANDALONE"])
def test_auto_pick_matches_sglangs_own_function(arch, algorithm):
    import sglang.srt.arg_groups.speculative_hook as hook
    from sglang.srt.server_args import ServerArgs

    namespace = sa.real_parser().parse_args(["--model-path", "m", "--speculative-algorithm", algorithm])
    server_args = ServerArgs.from_cli_args(namespace)
    assert (speculative.auto_speculative_params(algorithm, arch)
            == hook._auto_choose_speculative_params(server_args, arch))


@needs_sglang
@pytest.mark.parametrize("name", ["eagle", "EAGLE3", "nextn", "NextN", "standalone", "ngram", "dflash",
                                  "medusa", "lookahead"])
def test_algorithm_names_match_sglang(name):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    try:
        expected = SpeculativeAlgorithm.from_string(name).name
    except ValueError:
        expected = None
    args = {"model_path": "m", "speculative_algorithm": name, "speculative_num_steps": 3,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    try:
        resolved, _ = speculative.resolve_speculative(args)
        got = resolved["speculative_algorithm"]
    except LaunchArgsError:
        got = None
    assert got == expected


def test_topk1_forces_draft_tokens_with_a_note():
    args = {"model_path": "m", "speculative_algorithm": "EAGLE", "speculative_num_steps": 4,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 9}
    resolved, notes = speculative.resolve_speculative(args)
    assert resolved["speculative_num_draft_tokens"] == 5
    assert any("adjusted to speculative_num_steps + 1" in n for n in notes)
    assert args["speculative_num_draft_tokens"] == 9  # the input is not modified


def test_topk_gt1_keeps_draft_tokens_even_above_the_tree_size():
    # SGLang does not check draft tokens <= steps * topk + 1; neither do we.
    resolved, _ = speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "EAGLE3",
                                          "speculative_num_steps": 2, "speculative_eagle_topk": 2,
                                          "speculative_num_draft_tokens": 16})
    assert resolved["speculative_num_draft_tokens"] == 16


@pytest.mark.parametrize("use_sglang", PARSERS)
def test_max_running_requests_default_only_with_speculation(use_sglang):
    assert sa.parse_server_args(M, use_sglang=use_sglang)["max_running_requests"] is None
    assert sa.parse_server_args(M + SPEC, use_sglang=use_sglang)["max_running_requests"] == 48
    explicit = sa.parse_server_args(M + SPEC + ["--max-running-requests", "8"], use_sglang=use_sglang)
    assert explicit["max_running_requests"] == 8


@pytest.mark.parametrize("partial", [
    {"speculative_num_steps": 3},
    {"speculative_eagle_topk": 4},
    {"speculative_num_draft_tokens": 8},
    {"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8},
    {"speculative_num_steps": 3, "speculative_num_draft_tokens": 8},
    {"speculative_num_steps": 3, "speculative_eagle_topk": 4},
])
def test_partial_spec_values_are_rejected(partial):
    with pytest.raises(LaunchArgsError, match="together or not at all"):
        speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "EAGLE3", **partial})


def test_nextn_is_eagle_and_draft_gets_main_revision():
    resolved, _ = speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "nextn",
                                          "speculative_draft_model_path": "d"})
    assert resolved["speculative_algorithm"] == "EAGLE"
    assert resolved["speculative_draft_model_revision"] == "main"


def test_adaptive_rules():
    on, _ = speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "EAGLE",
                                    "speculative_adaptive": True})
    assert (on["speculative_num_steps"], on["speculative_eagle_topk"], on["speculative_num_draft_tokens"]) == (3, 1, 4)
    off, notes = speculative.resolve_speculative({"model_path": "meta-llama/Llama-3.1-8B",
                                                  "speculative_algorithm": "EAGLE",
                                         "speculative_adaptive": True, "speculative_num_steps": 3,
                                         "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8})
    assert off["speculative_adaptive"] is False and any("adaptive disabled" in n for n in notes)
    with pytest.raises(LaunchArgsError, match="candidate_steps"):
        speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "EAGLE",
                                "speculative_adaptive": True, "speculative_num_steps": 4})


def test_adaptive_config_file(tmp_path):
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [2, 6]}, "16": {"candidate_steps": [1]}}))
    resolved, _ = speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "EAGLE3",
                                          "speculative_adaptive": True, "speculative_adaptive_config": str(path)})
    assert resolved["speculative_num_steps"] == 2  # sorted [1, 2, 6], middle one
    assert resolved["speculative_num_draft_tokens"] == 3


def test_ngram_rules():
    resolved, _ = speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "NGRAM",
                                          "speculative_ngram_max_bfs_breadth": 4})
    assert (resolved["speculative_eagle_topk"], resolved["speculative_num_draft_tokens"],
            resolved["speculative_num_steps"], resolved["max_running_requests"]) == (4, 12, 3, 48)


def test_draft_window_rules():
    with pytest.raises(LaunchArgsError, match="requires --speculative-draft-window-size"):
        speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "EAGLE",
                                "speculative_draft_sink_size": 4})
    with pytest.raises(LaunchArgsError, match="must be positive"):
        speculative.resolve_speculative({"model_path": "m", "speculative_algorithm": "EAGLE",
                                "speculative_draft_window_size": 0})


def test_infer_model_arch(tmp_path):
    ckpt = tmp_path / "my-checkpoint"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["Grok1ForCausalLM"]}))
    assert speculative.infer_model_arch(str(ckpt)) == "Grok1ForCausalLM"
    assert speculative.infer_model_arch("meta-llama/Llama-3.1-8B-Instruct") == "LlamaForCausalLM"
    assert speculative.infer_model_arch("meta-llama/Llama-4-Scout-17B-16E") == "Llama4ForConditionalGeneration"
    assert speculative.infer_model_arch("xai-org/grok-1") == "Grok1ForCausalLM"
    assert speculative.infer_model_arch("Qwen/Qwen3-8B") is None
    # A folder named for its role (scripts/gpu/make_models.py writes llama-8b/target): the parent
    # names the model when no config.json is there to read.
    assert speculative.infer_model_arch("../../.gpu/models/llama-8b/target") == "LlamaForCausalLM"
    assert speculative.infer_model_arch(".gpu/models/qwen3-30b-a3b/target") is None
    assert speculative.infer_model_arch(str(ckpt / "target")) is None  # the checkpoint's parent names no model
    scout = speculative.infer_model_arch("meta-llama/Llama-4-Scout")
    assert speculative.auto_speculative_params("EAGLE", scout) == (3, 1, 4)


# ---------------------------------------------------------------------------------------------
# --config YAML files.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_sglang", PARSERS)
def test_config_file_merges_and_command_line_wins(tmp_path, use_sglang):
    path = tmp_path / "server.yaml"
    path.write_text("model-path: org/m\ntp-size: 2\nenable-metrics: true\ntrust-remote-code: false\n"
                    "cuda-graph-bs-decode: [1, 2, 4]\nspeculative-algorithm: EAGLE3\n")
    result = sa.parse_server_args(["--config", str(path), "--tp-size", "4"], use_sglang=use_sglang)
    assert result["model_path"] == "org/m"
    assert result["tp_size"] == 4
    assert result["enable_metrics"] is True and result["trust_remote_code"] is False
    assert result["cuda_graph_bs_decode"] == [1, 2, 4]
    assert result["speculative_num_steps"] == 3


BAD_CONFIGS = {
    "json_suffix": ("server.json", "{}"),
    "not_a_mapping": ("server.yaml", "- a\n- b\n"),
    "underscore_key": ("server.yaml", "model-path: m\nspeculative_num_steps: 3\n"),
    "boolean_pair": ("server.yaml", "model-path: m\ndllm-fdfo: true\n"),
    "deprecated_switch": ("server.yaml", "model-path: m\ndisable-cuda-graph: true\n"),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_bad_config_files_are_rejected(tmp_path, name):
    filename, text = BAD_CONFIGS[name]
    (tmp_path / filename).write_text(text)
    with pytest.raises(LaunchArgsError):
        sa.parse_server_args(["--config", str(tmp_path / filename)], use_sglang=False)


@needs_sglang
@pytest.mark.parametrize("name", sorted(BAD_CONFIGS) + ["missing_file", "two_configs"])
def test_bad_config_messages_match_sglang(tmp_path, name):
    if name == "missing_file":
        argv = ["--config", str(tmp_path / "nope.yaml")]
    elif name == "two_configs":
        (tmp_path / "a.yaml").write_text("model-path: m\n")
        argv = ["--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "a.yaml")]
    else:
        filename, text = BAD_CONFIGS[name]
        (tmp_path / filename).write_text(text)
        argv = ["--config", str(tmp_path / filename)]
    real = outcome(argv, use_sglang=True)
    assert real[0] == "error"
    assert outcome(argv, use_sglang=False) == real


# ---------------------------------------------------------------------------------------------
# Rendering helpers.
# ---------------------------------------------------------------------------------------------


def test_to_cli_flag():
    assert sa.to_cli_flag("speculative_num_steps") == "--speculative-num-steps"
    assert sa.to_cli_flag("tp_size") == "--tp-size"
    assert sa.to_cli_flag("fp8_gemm_runner_backend") == "--fp8-gemm-backend"  # flag differs from field
    assert sa.to_cli_flag("not_a_flag") == "--not-a-flag"


def test_args_to_argv_rules():
    argv = sa.args_to_argv({
        "enable_metrics": True, "disable_custom_all_reduce": False, "random_seed": None,
        "cuda_graph_bs_decode": [1, 2], "mem_fraction_static": 0.8, "dllm_fdfo": False,
        "tp_size": 2, "cuda_graph_config": {"decode": {"max_bs": 8}},
    })
    assert argv == ["--enable-metrics", "--cuda-graph-bs-decode", "1", "2", "--mem-fraction-static", "0.8",
                    "--no-dllm-fdfo", "--tp-size", "2", "--cuda-graph-config", '{"decode": {"max_bs": 8}}']


@pytest.mark.parametrize("use_sglang", PARSERS)
def test_args_to_argv_round_trips_through_the_parser(use_sglang):
    values = {"tp_size": 4, "enable_torch_compile": True, "disable_overlap_schedule": False,
              "mem_fraction_static": 0.7, "attention_backend": "flashinfer", "cuda_graph_bs_decode": [1, 4, 16],
              "speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 4,
              "speculative_num_draft_tokens": 7, "served_model_name": "my model 'q' $HOME"}
    result = sa.parse_server_args(["--model-path", "m"] + sa.args_to_argv(values), use_sglang=use_sglang)
    assert {k: result[k] for k in values} == values


def test_args_to_config_rules():
    mapping = sa.args_to_config({"tp_size": 2, "enable_metrics": True, "trust_remote_code": False,
                                 "random_seed": None, "cuda_graph_bs_decode": (1, 2)})
    assert mapping == {"tp-size": 2, "enable-metrics": True, "cuda-graph-bs-decode": [1, 2]}
    with pytest.raises(LaunchArgsError, match="command line"):
        sa.args_to_config({"dllm_fdfo": True})


def test_default_value():
    assert sa.default_value("tp_size") == 1
    assert sa.default_value("speculative_attention_mode") == "prefill"
    assert sa.default_value("max_running_requests") is None


@needs_sglang
def test_default_value_of_uncovered_field_comes_from_sglang():
    assert sa.default_value("schedule_policy") == "fcfs"
    with pytest.raises(KeyError):
        sa.default_value("no_such_field")


def test_is_server_flag():
    assert sa.is_server_flag("speculative_eagle_topk")
    assert not sa.is_server_flag("NCCL_ALGO")
