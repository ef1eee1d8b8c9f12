"""LaunchSpec: argv, shell rendering (run for real under bash), validation, YAML and JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from autotune.backend import BACKENDS
from autotune.errors import LaunchArgsError
from autotune.launch.spec import LaunchSpec
from autotune.sglang import args as sa

needs_sglang = pytest.mark.skipif(
    not sa.sglang_available(),
    reason="sglang is not importable here (pip install --no-deps sglang==0.5.23 plus its small deps)",
)
PARSERS = [pytest.param(True, marks=needs_sglang, id="sglang"), pytest.param(False, id="builtin")]

NASTY = "it's a \"quoted\" $HOME `date` *.txt \\ tab\there\nnewline ünï"


def eagle_spec(**over) -> LaunchSpec:
    fields = dict(
        model_path="meta-llama/Llama-3.1-8B-Instruct",
        draft_model_path="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        server_args={"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                     "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8, "tp_size": 2,
                     "enable_metrics": True, "disable_custom_all_reduce": False, "mem_fraction_static": 0.85,
                     "cuda_graph_bs_decode": [1, 2, 4]},
        env={"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4"},
    )
    fields.update(over)
    return LaunchSpec(**fields)


def test_argv_shape_and_backends_differ_only_in_module():
    real = eagle_spec(backend="sglang", port=31000).argv(python="py")
    sim = eagle_spec(backend="sim", port=31000).argv(python="py")
    assert real[:3] == ["py", "-m", "sglang.launch_server"]
    assert sim[:3] == ["py", "-m", "autotune.sim.server"]
    assert real[3:] == sim[3:]
    assert real[3:11] == ["--model-path", "meta-llama/Llama-3.1-8B-Instruct",
                          "--speculative-draft-model-path", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                          "--host", "127.0.0.1", "--port", "31000"]
    assert "--disable-custom-all-reduce" not in real  # False switches are left out
    assert real[real.index("--cuda-graph-bs-decode") + 1:][:3] == ["1", "2", "4"]
    assert set(BACKENDS) == {"sglang", "sim"}


def test_argv_order_is_deterministic():
    spec = eagle_spec()
    shuffled = eagle_spec(server_args=dict(reversed(list(spec.server_args.items()))))
    assert spec.argv() == shuffled.argv()
    assert spec.argv()[0] == sys.executable


def test_port_argument_overrides_and_none_leaves_it_out():
    spec = eagle_spec()
    assert "--port" not in spec.argv()
    argv = spec.argv(port=40001)
    assert argv[argv.index("--port") + 1] == "40001"
    assert spec.with_port(40002).port == 40002 and spec.port is None


def _fake_sglang(tmp_path) -> None:
    """A stand-in ``sglang.launch_server`` that prints its argv and environment as JSON."""
    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(textwrap.dedent("""
        import json, os, sys
        print(json.dumps([sys.argv[1:], dict(os.environ)]))
    """))


def test_shell_command_round_trips_exactly_under_bash(tmp_path):
    _fake_sglang(tmp_path)
    spec = LaunchSpec(
        model_path=f"/models/{NASTY}",
        draft_model_path="/models/draft with space",
        server_args={"served_model_name": NASTY, "speculative_algorithm": "EAGLE3",
                     "speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3,
                     "enable_metrics": True, "chat_template": "$(touch pwned)"},
        env={"NCCL_ALGO": "Ring,Tree", "WEIRD": NASTY, "EMPTY": ""},
        port=31234,
    )
    script = spec.shell_command(python=sys.executable)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent-home"}
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    argv, seen_env = json.loads(proc.stdout)
    assert argv == spec.server_argv()
    for name, value in spec.env.items():
        assert seen_env[name] == value
    assert not (tmp_path / "pwned").exists()


def test_shell_command_layout():
    text = eagle_spec(port=30001).shell_command()
    lines = text.splitlines()
    assert lines[:2] == ["export NCCL_ALGO=Ring", "export NCCL_MIN_NCHANNELS=4"]
    assert lines[2] == "python -m sglang.launch_server \\"
    assert lines[3] == "  --model-path meta-llama/Llama-3.1-8B-Instruct \\"
    assert lines[-1] == "  --tp-size 2"
    assert "  --cuda-graph-bs-decode 1 2 4 \\" in lines


@pytest.mark.parametrize("use_sglang", PARSERS)
def test_validate_resolves(use_sglang):
    resolved = eagle_spec().validate(use_sglang=use_sglang)
    assert resolved["speculative_num_draft_tokens"] == 8
    assert resolved["tp_size"] == 2
    assert resolved["max_running_requests"] == 48
    auto = eagle_spec(server_args={"speculative_algorithm": "EAGLE3"}).validate(use_sglang=use_sglang)
    assert (auto["speculative_num_steps"], auto["speculative_eagle_topk"],
            auto["speculative_num_draft_tokens"]) == (5, 4, 8)


@pytest.mark.parametrize("use_sglang", PARSERS)
@pytest.mark.parametrize("bad", [
    {"cuda_graph_max_bs": 8},                              # ambiguous prefix in 0.5.23
    {"attention_backend": "fa9"},                          # bad choice
    {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3},  # partial spec values
    {"no_such_flag": 1},
])
def test_validate_rejects(use_sglang, bad):
    with pytest.raises(LaunchArgsError):
        eagle_spec(server_args=bad).validate(use_sglang=use_sglang)


@pytest.mark.parametrize("use_sglang", PARSERS)
def test_config_yaml_round_trips_through_the_parser(tmp_path, use_sglang):
    spec = eagle_spec(port=30123, server_args={**eagle_spec().server_args, "served_model_name": "0.5",
                                               "enable_torch_compile": True, "log_level": "warning"},
                      model_path=f"/models/{NASTY}")
    path = tmp_path / "server.yaml"
    path.write_text(spec.to_config_yaml())
    from_file = sa.parse_server_args(["--config", str(path)], use_sglang=use_sglang)
    assert from_file == spec.validate(use_sglang=use_sglang)
    assert from_file["served_model_name"] == "0.5"  # a string that looks like a number stays a string
    assert from_file["model_path"] == f"/models/{NASTY}"


def test_config_yaml_format():
    text = eagle_spec().to_config_yaml()
    assert "#   export NCCL_ALGO=Ring" in text
    assert "speculative-num-steps: 3" in text and "speculative_num_steps" not in text
    assert "disable-custom-all-reduce" not in text  # a False switch is left out
    # A --x/--no-x pair is refused in a file: it stays on the command line, which the head names.
    pair = eagle_spec(server_args={"dllm_fdfo": False})
    assert pair.config_rest() == ["--no-dllm-fdfo"]
    assert "--config <this file> --no-dllm-fdfo" in pair.to_config_yaml()
    assert "dllm" not in pair.to_config_yaml().split("\n", 2)[2]


def test_json_round_trip():
    spec = eagle_spec(backend="sim", port=31000)
    data = json.loads(json.dumps(spec.to_json()))
    assert data["argv"] == spec.argv(python="python")
    assert data["env"] == {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4"}
    assert LaunchSpec.from_json(data) == spec


def test_from_params_splits_args_and_env():
    spec = LaunchSpec.from_params(
        model_path="m", draft_model_path="d",
        fixed_args={"enable_metrics": True, "mem_fraction_static": 0.8},
        params={"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 3, "NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": 4,
                "NCCL_PROTO": None, "disable_custom_all_reduce": True, "port": 31999},
        fixed_env={"SGLANG_ENABLE_METRICS_DEVICE_TIMER": True}, backend="sim",
    )
    assert spec.env == {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4", "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}
    assert spec.server_args == {"enable_metrics": True, "mem_fraction_static": 0.8, "speculative_algorithm": "EAGLE3",
                                "speculative_num_steps": 2, "speculative_eagle_topk": 1,
                                "speculative_num_draft_tokens": 3, "disable_custom_all_reduce": True}
    assert spec.draft_model_path == "d" and spec.port == 31999 and spec.backend == "sim"


def test_from_params_baseline_drops_speculation():
    spec = LaunchSpec.from_params(model_path="m", draft_model_path="d",
                                  fixed_args={"speculative_attention_mode": "decode", "tp_size": 2},
                                  params={"speculative_algorithm": None, "speculative_num_steps": 3})
    assert spec.draft_model_path is None
    assert spec.server_args == {"tp_size": 2}
    assert "--speculative" not in " ".join(spec.argv())


@pytest.mark.parametrize("kwargs, match", [
    ({"params": {"Tp_size": 2}}, "neither"),
    ({"fixed_env": {"nccl_algo": "Ring"}}, "upper case"),
    ({"fixed_args": {"tp_size": 2}, "params": {"tp_size": 4}}, "set twice"),
    ({"params": {"model_path": "other"}}, "model_path"),
])
def test_from_params_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LaunchSpec.from_params(model_path="m", **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    ({"backend": "vllm"}, "backend"),
    ({"server_args": {"port": 1}}, "LaunchSpec field"),
    ({"server_args": {"TP": 1}}, "field name"),
    ({"env": {"lower": "x"}}, "upper case"),
    ({"model_path": ""}, "empty"),
    ({"port": 70000}, "TCP port"),
])
def test_spec_rejects_bad_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LaunchSpec(**{"model_path": "m", **kwargs})


def test_spec_is_frozen_and_owns_its_mappings():
    args = {"tp_size": 2}
    env = {"NCCL_ALGO": "Ring"}
    spec = LaunchSpec(model_path="m", server_args=args, env=env)
    args["tp_size"] = 8
    env["NCCL_ALGO"] = "Tree"
    assert spec.server_args == {"tp_size": 2} and spec.env == {"NCCL_ALGO": "Ring"}
    with pytest.raises(AttributeError):
        spec.port = 1  # type: ignore[misc]
