"""autotune against two SGLang releases: 0.5.17 (the GPU box) and 0.5.23 (installed here).

0.5.17 is not installed: its parser is rebuilt from ``tests/data/sglang-0.5.17-flags.json``, which
``tests/data/make_sglang_flags.py`` wrote from 0.5.17's own parser. 0.5.23 is both the installed
SGLang (when importable) and autotune's built-in twin. Metrics, meta_info and /server_info shapes
of each release come from its source (``srt/observability/metrics_collector.py``,
``srt/managers/tokenizer_manager.py``), with the label orders and extra labels they allow.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from autotune.bench.client import run_benchmark
from autotune.errors import ConfigError, LaunchArgsError
from autotune.export import launch_command as export
from autotune.launch.serving import serving_spec
from autotune.launch.spec import LaunchSpec
from autotune.profile.phases import PhaseProfile
from autotune.profile.prom import parse_exposition
from autotune.profile.snapshot import MetricsSnapshot
from autotune.sglang import args as sglang_args
from autotune.sglang import flags as sglang_flags
from autotune.sglang.args import parse_server_args
from autotune.sglang.metrics import FORWARD_SECONDS
from autotune.space.prompts import Prompt
from autotune.space.search_space import SearchSpace
from autotune.trial.measure import launch_spec

ROOT = Path(__file__).resolve().parents[3]
TABLE_517 = ROOT / "tests" / "data" / "sglang-0.5.17-flags.json"


def v0517() -> sglang_flags.FlagSet:
    return sglang_flags.flags_from_table(str(TABLE_517))


def versions() -> list[tuple[str, sglang_flags.FlagSet]]:
    out = [("0.5.17", v0517()), ("0.5.23-builtin", sglang_flags.builtin_flags())]
    if sglang_flags.sglang_importable():
        out.append((f"{sglang_flags.installed_flags().version}-installed", sglang_flags.installed_flags()))
    return out


VERSIONS = versions()
IDS = [name for name, _ in VERSIONS]


# ---------------------------------------------------------------------------------------------
# The 0.5.17 table
# ---------------------------------------------------------------------------------------------


def test_table_is_0517_and_knows_its_deprecated_aliases():
    data = json.loads(TABLE_517.read_text())
    assert data["sglang_version"] == "0.5.17"
    rows = {o: r for r in data["flags"] for o in r["options"]}
    alias = rows["--cuda-graph-max-bs"]
    assert alias["action"] == "DeprecatedAliasStoreAction"
    assert alias["new_flag"] == "--cuda-graph-max-bs-decode"
    assert alias["dest"] == rows["--cuda-graph-max-bs-decode"]["dest"] == "cuda_graph_max_bs_decode"
    assert rows["--disable-prefill-cuda-graph"]["kind"] == "store_true"
    assert "--speculative-num-steps" in rows and "--speculative-eagle-topk" in rows


# ---------------------------------------------------------------------------------------------
# Name resolution through the parser in use
# ---------------------------------------------------------------------------------------------


def test_cuda_graph_max_bs_is_an_alias_in_0517_and_is_canonicalized():
    flags = v0517()
    ref = flags.resolve("cuda_graph_max_bs")
    assert (ref.key, ref.flag, ref.alias) == ("cuda_graph_max_bs_decode", "--cuda-graph-max-bs-decode",
                                              "--cuda-graph-max-bs")
    # SGLang 0.5.17's own parser takes the old spelling into the same field.
    with sglang_flags.using_flags(flags):
        parsed = parse_server_args(["--model-path", "m", "--cuda-graph-max-bs", "8"])
        spec = LaunchSpec(model_path="m", server_args={"cuda_graph_max_bs": 8})
    assert parsed["cuda_graph_max_bs_decode"] == 8
    assert spec.server_args == {"cuda_graph_max_bs_decode": 8}
    argv = spec.server_argv()
    assert argv[argv.index("--cuda-graph-max-bs-decode") + 1] == "8"
    assert "--cuda-graph-max-bs" not in argv


@pytest.mark.parametrize("name,flags", [v for v in VERSIONS if v[0] != "0.5.17"], ids=IDS[1:])
def test_cuda_graph_max_bs_is_ambiguous_in_0523_and_the_error_says_so(name, flags):
    with pytest.raises(LaunchArgsError) as info:
        flags.resolve("cuda_graph_max_bs")
    msg = str(info.value)
    for word in ("cuda_graph_max_bs", "ambiguous", "--cuda-graph-max-bs-decode",
                 "--cuda-graph-max-bs-prefill", "cuda_graph_max_bs_decode", f"SGLang {flags.version}"):
        assert word in msg
    with sglang_flags.using_flags(flags):
        with pytest.raises(LaunchArgsError, match="ambiguous"):
            LaunchSpec(model_path="m", server_args={"cuda_graph_max_bs": 8})
        # argparse itself (SGLang's parser or its twin) refuses the spelling too.
        with pytest.raises(LaunchArgsError, match="ambiguous option"):
            parse_server_args(["--model-path", "m", "--cuda-graph-max-bs", "8"])


@pytest.mark.parametrize("name,flags", VERSIONS, ids=IDS)
def test_unknown_name_and_single_abbreviation_are_errors_with_candidates(name, flags):
    with pytest.raises(LaunchArgsError, match=r"speculative_num_stepz'.*did you mean speculative_num_steps"):
        flags.resolve("speculative_num_stepz")
    # argparse would take --speculative-num-step as an abbreviation; a name must be exact.
    assert flags.abbreviates("speculative_num_step") == ["--speculative-num-steps"]
    with pytest.raises(LaunchArgsError, match=r"abbreviates --speculative-num-steps.*'speculative_num_steps'"):
        flags.resolve("speculative_num_step")


@pytest.mark.parametrize("name,flags", VERSIONS, ids=IDS)
def test_field_whose_flag_differs_and_flag_spelling_resolve_to_the_field(name, flags):
    model = flags.resolve("model")  # --model is a second spelling of --model-path
    assert (model.key, model.flag) == ("model_path", "--model-path")
    fp8 = flags.lookup("fp8_gemm_runner_backend")
    assert fp8 is not None and fp8.key == "fp8_gemm_runner_backend" and fp8.flag.startswith("--fp8-gemm")


def test_two_names_of_one_flag_with_different_values_is_an_error():
    with sglang_flags.using_flags(v0517()):
        with pytest.raises(LaunchArgsError, match="same flag"):
            LaunchSpec(model_path="m", server_args={"cuda_graph_max_bs": 8, "cuda_graph_max_bs_decode": 4})
        same = LaunchSpec(model_path="m", server_args={"cuda_graph_max_bs": 8, "cuda_graph_max_bs_decode": 8})
    assert same.server_args == {"cuda_graph_max_bs_decode": 8}


def test_flag_table_env_var_reaches_a_subprocess():
    code = ("from autotune.sglang.args import parse_server_args as p; "
            "print(p(['--model-path', 'm', '--cuda-graph-max-bs', '8'])['cuda_graph_max_bs_decode'])")
    env = {**os.environ, sglang_flags.FLAG_TABLE_ENV: str(TABLE_517)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "8"


# ---------------------------------------------------------------------------------------------
# One space, both versions
# ---------------------------------------------------------------------------------------------

SPACE = {
    "name": "two-versions", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
    "model_path": "sim/Llama-3.1-8B-Instruct", "draft_model_path": "sim/EAGLE3-LLaMA3.1-Instruct-8B",
    "fixed_args": {"tp_size": 1, "attention_backend": "triton", "cuda_graph_max_bs_decode": 8,
                   "mem_fraction_static": 0.7},
    "parameters": {
        "speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]},
        "speculative_num_steps": {"type": "int", "low": 1, "high": 3},
        "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2]},
        "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 4},
    },
    "workload": {"source": "builtin", "num_prompts": 2, "warmup_prompts": 1, "output_len": 8},
    "measure": {"repeats": 1},
}


def test_the_same_space_renders_valid_argv_under_both_versions():
    space = SearchSpace.from_dict(SPACE)
    configs = list(space.enumerate())
    assert len(configs) > 4
    argvs: dict[str, list[list[str]]] = {}
    for name, flags in VERSIONS:
        with sglang_flags.using_flags(flags):
            rendered = []
            for params in configs:
                spec = launch_spec(space.trial_config(params))
                resolved = spec.validate()  # this version's parser, EAGLE rules applied
                assert resolved["cuda_graph_max_bs_decode"] == 8
                if params.get("speculative_algorithm"):
                    assert resolved["speculative_num_steps"] == params["speculative_num_steps"]
                    assert resolved["speculative_eagle_topk"] == params["speculative_eagle_topk"]
                rendered.append(spec.server_argv())
            argvs[name] = rendered
    # Canonical names are spelled the same in both releases, so the commands are identical.
    first, *rest = argvs.values()
    assert all(r == first for r in rest)


@pytest.mark.parametrize("name,flags", VERSIONS, ids=IDS)
def test_eagle3_flags_parse_the_same_under_each_version(name, flags, tmp_path):
    argv = ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
            "4", "--enable-metrics", "--tp-size", "1"]
    with sglang_flags.using_flags(flags):
        out = parse_server_args(argv, model_arch="LlamaForCausalLM")
    assert (out["speculative_algorithm"], out["speculative_num_steps"], out["speculative_eagle_topk"],
            out["speculative_num_draft_tokens"], out["enable_metrics"]) == ("EAGLE3", 3, 1, 4, True)
    assert out["speculative_draft_model_path"] == "d" and out["max_running_requests"] == 48


def test_space_file_accepts_the_alias_under_0517_and_names_file_and_line_under_0523(tmp_path):
    data = {**SPACE, "fixed_args": {**SPACE["fixed_args"], "cuda_graph_max_bs": 8}}
    del data["fixed_args"]["cuda_graph_max_bs_decode"]
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    from autotune.space.search_space import load_space

    with sglang_flags.using_flags(v0517()):
        space = load_space(path)
        spec = launch_spec(space.trial_config({"speculative_algorithm": None}))
    assert spec.server_args["cuda_graph_max_bs_decode"] == 8 and "cuda_graph_max_bs" not in spec.server_args
    with sglang_flags.using_flags(sglang_flags.builtin_flags()):
        with pytest.raises(ConfigError) as info:
            load_space(path)
    err = info.value
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "cuda_graph_max_bs:" in text)
    assert err.file == str(path) and err.line == line and err.field == "fixed_args.cuda_graph_max_bs"
    assert "--cuda-graph-max-bs-prefill" in err.message and "SGLang 0.5.23" in err.message


# ---------------------------------------------------------------------------------------------
# --config YAML and export use canonical names
# ---------------------------------------------------------------------------------------------


def test_config_yaml_follows_each_versions_loader(tmp_path):
    spec_args = {"cuda_graph_max_bs": 8, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 2,
                 "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}
    with sglang_flags.using_flags(v0517()):
        spec = LaunchSpec(model_path="m", draft_model_path="d", server_args=spec_args)
        # 0.5.17's loader refuses every key whose field a deprecated alias shares (read from its
        # ConfigArgumentMerger), so the field goes on the command line beside --config there.
        with pytest.raises(LaunchArgsError, match=r"--cuda-graph-max-bs-decode.*SGLang 0\.5\.17"):
            sglang_args.args_to_config(spec.server_args)
        assert spec.config_rest() == ["--cuda-graph-max-bs-decode", "8"]
        text_0517 = export.render(serving_spec(spec), "yaml")
        assert "cuda-graph-max-bs-decode" not in yaml.safe_load(text_0517)
        assert "--config <this file> --cuda-graph-max-bs-decode 8" in text_0517
        path = tmp_path / "c0517.yaml"
        path.write_text(text_0517)
        parsed_0517 = parse_server_args(["--config", str(path), *spec.config_rest()])
        assert parsed_0517["cuda_graph_max_bs_decode"] == 8 and parsed_0517["speculative_num_steps"] == 2
        sh = export.render(serving_spec(spec), "sh")
    assert "--cuda-graph-max-bs-decode 8" in sh and "--cuda-graph-max-bs " not in sh
    with sglang_flags.using_flags(sglang_flags.builtin_flags()):
        args_0523 = {k: v for k, v in spec_args.items() if k != "cuda_graph_max_bs"}
        spec = LaunchSpec(model_path="m", draft_model_path="d",
                          server_args={**args_0523, "cuda_graph_max_bs_decode": 8})
        text = export.render(serving_spec(spec), "yaml")
        path = tmp_path / "c.yaml"
        path.write_text(text)
        parsed = parse_server_args(["--config", str(path)])
    assert yaml.safe_load(text)["cuda-graph-max-bs-decode"] == 8
    assert parsed["cuda_graph_max_bs_decode"] == 8 and parsed["speculative_num_steps"] == 2


# ---------------------------------------------------------------------------------------------
# /metrics by label name
# ---------------------------------------------------------------------------------------------

# The scheduler labels of both releases: model_name, engine_type, tp_rank, pp_rank, moe_ep_rank, then
# priority="" with priority scheduling, dp_rank with DP, and --extra-metric-labels; the metric's own
# label (category, mode) comes last. prometheus_client keeps that order; others may not.
LABELS_0523 = [("model_name", "m"), ("engine_type", "unified"), ("tp_rank", "{rank}"), ("pp_rank", "0"),
               ("moe_ep_rank", "0")]


def _series(name: str, labels: list[tuple[str, str]], value: float) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{body}}} {value}"


def _page(shape: str, *, scale: float) -> str:
    """A /metrics page of a speculative server after ``scale`` units of work, in one label shape."""
    lines = ["# TYPE sglang:forward_execution_seconds counter",
             "# TYPE sglang:cuda_graph_passes counter",
             "# TYPE sglang:generation_tokens counter", "# TYPE sglang:num_requests counter",
             "# TYPE sglang:spec_verify_calls counter"]
    gpu = {"eagle_draft": 0.5, "target_verify": 2.0, "eagle_draft_extend": 0.4, "extend": 0.3}
    for rank, factor in (("0", 1.0), ("1", 1.7)):  # rank 1 differs: only rank 0 may be read
        base = [(k, v.format(rank=rank)) for k, v in LABELS_0523]
        if shape == "reordered":
            base = list(reversed(base))
        elif shape == "extra":
            base = base + [("priority", ""), ("dp_rank", "0"), ("team", "infra")]
        elif shape == "minimal":
            base = [("tp_rank", rank)]
        for cat, secs in gpu.items():
            labels = [("category", cat), *base] if shape == "reordered" else [*base, ("category", cat)]
            lines.append(_series(FORWARD_SECONDS, labels, secs * scale * factor))
        for mode, n in (("decode_cuda_graph", 999), ("decode_none", 1), ("prefill_cuda_graph", 10)):
            labels = [("mode", mode), *base] if shape == "reordered" else [*base, ("mode", mode)]
            lines.append(_series("sglang:cuda_graph_passes_total", labels, n * scale))
    for streaming in ("true", "false"):
        tok = [("model_name", "m"), ("is_streaming", streaming)]
        lines.append(_series("sglang:generation_tokens_total", tok if shape != "reordered" else tok[::-1],
                             1500 * scale))
        lines.append(_series("sglang:num_requests_total", tok, 5 * scale))
    lines.append(_series("sglang:spec_verify_calls_total", [("model_name", "m")], 1000 * scale))
    return "\n".join(lines) + "\n"


def _profile(shape: str) -> PhaseProfile:
    before = MetricsSnapshot(t=0.0, exposition=parse_exposition(_page(shape, scale=1.0)))
    after = MetricsSnapshot(t=1.0, exposition=parse_exposition(_page(shape, scale=2.0)),
                            server_info={"internal_states": [{"avg_spec_accept_length": 2.9}]})
    return PhaseProfile.from_snapshots(before, after, wall_s=5.0, max_batch=1, speculative=True)


@pytest.mark.parametrize("shape", ["reordered", "extra", "minimal"])
def test_phase_profile_reads_series_by_label_name_whatever_the_shape(shape):
    ref, got = _profile("0523"), _profile(shape)
    assert ref.cycles == 1000 and ref.cycles_source == "decode_passes"
    assert ref.verify_ms == pytest.approx(2.0) and ref.draft_ms == pytest.approx(0.5)
    for field in ("cycles", "cycle_ms", "draft_ms", "verify_ms", "extend_ms", "prefill_ms", "other_ms",
                  "accept_length_window", "accept_length_window_decode", "accept_length_server_info"):
        assert getattr(got, field) == pytest.approx(getattr(ref, field)), field


def test_missing_server_info_and_missing_device_timer_stay_unknown():
    page = "\n".join(line for line in _page("0523", scale=1.0).splitlines() if FORWARD_SECONDS not in line)
    snap = MetricsSnapshot(t=0.0, exposition=parse_exposition(page))
    later = MetricsSnapshot(t=1.0, exposition=parse_exposition(page.replace(" 1000", " 2000")),
                            server_info={"internal_states": [{"startup_time": {"load_weight": 1.0}}]})
    prof = PhaseProfile.from_snapshots(snap, later, wall_s=1.0, max_batch=1, speculative=True)
    assert prof.device_timer is False and prof.verify_ms is None and prof.other_ms is None
    assert prof.accept_length_server_info is None


# ---------------------------------------------------------------------------------------------
# meta_info of each release, by name
# ---------------------------------------------------------------------------------------------

_SPEC_0523 = {"spec_accept_rate": 0.5, "spec_accept_length": 3.0, "spec_num_correct_drafts": 8,
              "spec_num_proposed_drafts": 16, "spec_verify_ct": 4, "spec_correct_drafts_histogram": [0, 0, 4]}
# 0.5.17's tokenizer_manager adds "backward-compat aliases" beside the current names.
_SPEC_0517 = {**_SPEC_0523, "spec_accepted_drafts": 8, "spec_proposed_drafts": 16,
              "spec_accept_histogram": [0, 0, 4]}
# A release that only had the old names.
_SPEC_OLD = {k: v for k, v in _SPEC_0517.items()
             if k not in ("spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_correct_drafts_histogram")}


class _Stream(httpx.AsyncByteStream):
    """The response body in two reads, as a socket would deliver it."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self):
        half = len(self.body) // 2
        yield self.body[:half]
        yield self.body[half:]


def _generate_stream(spec: dict) -> bytes:
    chunks = []
    for n in (1, 4, 8, 12):
        meta = {"id": "r", "finish_reason": None, "prompt_tokens": 5, "completion_tokens": n, "cached_tokens": 0}
        if n == 12:
            meta.update({"finish_reason": {"type": "length", "length": 12}, "e2e_latency": 0.1, **spec})
        chunks.append(b"data: " + json.dumps({"text": "x", "meta_info": meta}).encode() + b"\n\n")
    return b"".join(chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("spec", [_SPEC_0523, _SPEC_0517, _SPEC_OLD, {}], ids=["0523", "0517", "old", "none"])
def test_bench_client_reads_meta_info_of_each_release(spec):
    transport = httpx.MockTransport(lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_Stream(_generate_stream(spec))))
    prompts = [Prompt(id=f"p{i}", max_tokens=12, ignore_eos=True, text="hi") for i in range(2)]
    res = asyncio.run(run_benchmark("http://test", prompts, api="generate", concurrency=1, transport=transport))
    assert res.completed == 2 and res.total_completion_tokens == 24
    rec = res.records[0]
    if not spec:
        assert rec.spec == {} and res.accept_length is None and res.spec_verify_ct is None
        return
    assert res.accept_length == pytest.approx(3.0) and res.spec_verify_ct == 8
    assert rec.spec["spec_num_correct_drafts"] == 8 and rec.spec["spec_correct_drafts_histogram"] == [0, 0, 4]
    assert "spec_accepted_drafts" not in rec.spec


def test_a_flag_0523_dropped_is_accepted_where_the_release_in_use_has_it(space_factory):
    # --torchao-config: in 0.5.17, gone from 0.5.23 (neither its parser nor its ServerArgs has it).
    path = space_factory.write(SPACE, fixed_args={"torchao_config": "int8wo"})
    from autotune.space.search_space import load_space

    with sglang_flags.using_flags(v0517()):
        spec = launch_spec(load_space(path).trial_config({"speculative_algorithm": None}))
        assert spec.validate()["torchao_config"] == "int8wo"
    with sglang_flags.using_flags(sglang_flags.builtin_flags()):
        with pytest.raises(ConfigError, match="unknown server argument 'torchao_config'"):
            load_space(path)


def test_sampling_backend_is_a_flag_of_both_releases(tmp_path):
    # 0.5.23 registers --sampling-backend by hand (its field is no_cli only for the dataclass
    # helper), so the space takes it whatever the field snapshot says.
    for _, flags in VERSIONS:
        with sglang_flags.using_flags(flags):
            spec = LaunchSpec(model_path="m", server_args={"sampling_backend": "pytorch"})
            assert spec.validate()["sampling_backend"] == "pytorch"
