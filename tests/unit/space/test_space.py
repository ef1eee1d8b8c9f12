"""Tests of autotune.space.search_space: loading, located errors, conditions and rules, suggest/enumerate."""

from __future__ import annotations

import dataclasses
import pickle
import textwrap
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.errors import ConfigError
from autotune.space._cross_checks import _RandomTrial
from autotune.space.rules import RULES
from autotune.space.search_space import SearchSpace, load_space
from autotune.space.trial_config import TrialConfig

ROOT = Path(__file__).resolve().parents[3]
SPACES = ROOT / "search_spaces"
STEPS, TOPK, DRAFT = ("speculative_num_steps", "speculative_eagle_topk",
                      "speculative_num_draft_tokens")

HEAD = """\
backend: sim
profile: kimi-k2.5-eagle3-tp8
model_path: sim/target
draft_model_path: sim/draft
fixed_args:
  speculative_algorithm: EAGLE3
"""
TREE = """\
parameters:
  speculative_num_steps: {type: int, low: 1, high: 4}
  speculative_eagle_topk: {type: categorical, choices: [1, 2, 4]}
  speculative_num_draft_tokens: {type: int, low: 2, high: 12}
"""

optuna.logging.set_verbosity(optuna.logging.WARNING)


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load_error(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    err = info.value
    assert err.file == str(path)
    return err


def line_of_text(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle``."""
    for number, line in enumerate(textwrap.dedent(text).splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in text")


def space_from(tmp_path: Path, text: str) -> SearchSpace:
    return load_space(write(tmp_path, text))


def check_tree_rules(config: dict[str, Any]) -> None:
    """The invariants of a speculative EAGLE config."""
    steps, topk, draft = config[STEPS], config[TOPK], config[DRAFT]
    if topk == 1:
        assert draft == steps + 1
    assert 2 <= draft <= steps * topk + 1


# ---------------------------------------------------------------------------- shipped spaces


@pytest.mark.parametrize("name,low,high", [
    ("demo.yaml", 20, 40),
    ("kimi-k2.5-eagle3-tp8-sim.yaml", 100, 1000),
    ("llama-3.1-8b-eagle3-sim.yaml", 100, 1000),
    ("llama-3.1-8b-eagle3.yaml", 1000, 5000),
])
def test_shipped_spaces_enumerate_only_valid_configs(name: str, low: int, high: int) -> None:
    space = load_space(SPACES / name)
    configs = list(space.enumerate())
    assert low <= len(configs) <= high
    assert len({tuple(sorted(c.items(), key=str)) for c in configs}) == len(configs)
    for config in configs:
        assert space.validate_config(config) is None, config
        check_tree_rules(config)


def test_shipped_spaces_backends_and_profiles() -> None:
    demo = load_space(SPACES / "demo.yaml")
    assert (demo.backend, demo.profile) == ("sim", "kimi-k2.5-eagle3-tp8")
    assert demo.budget.trials == 16
    assert demo.workload["output_len"] == 96 and demo.workload["concurrency"] == 1
    kimi = load_space(SPACES / "kimi-k2.5-eagle3-tp8.yaml")
    assert kimi.backend == "sglang" and kimi.profile is None
    assert kimi.tp_sizes() == (4, 8)
    assert set(kimi.forbidden.args) >= {"enable_symm_mem", "enable_nccl_nvls",
                                        "enable_torch_symm_mem"}
    assert kimi.forbidden.env["NCCL_NVLS_ENABLE"] == ("1",)
    assert load_space(SPACES / "llama-3.1-8b-eagle3-sim.yaml").profile == \
        "llama-3.1-8b-eagle3-h100"
    assert load_space(SPACES / "kimi-k2.5-eagle3-tp8-sim.yaml").profile == \
        "kimi-k2.5-eagle3-tp8"


def test_big_real_space_sampled_configs_are_valid() -> None:
    space = load_space(SPACES / "kimi-k2.5-eagle3-tp8.yaml")
    import random

    rng = random.Random(7)
    for _ in range(300):
        config = space.suggest(_RandomTrial(rng))
        assert space.validate_config(config) is None
        check_tree_rules(config)
        assert config["NCCL_ALGO"] in (None, "Ring", "Tree")


def test_real_backend_refuses_placeholder_model_paths() -> None:
    path = SPACES / "kimi-k2.5-eagle3-tp8.yaml"
    space = load_space(path)  # loading works; only running needs the weights
    with pytest.raises(ConfigError) as info:
        space.check_paths()
    err = info.value
    assert "model_path /models/CHANGE-ME/Kimi-K2.5 does not exist" in str(err)
    assert err.file == str(path) and err.field == "model_path"
    assert err.line == line_of_text(path.read_text(), "model_path: /models/CHANGE-ME")


def test_check_paths_passes_for_existing_weights_hub_ids_and_sim(tmp_path: Path) -> None:
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    text = (HEAD + TREE).replace("backend: sim\nprofile: kimi-k2.5-eagle3-tp8\n",
                                 "backend: sglang\n")
    space = space_from(tmp_path, text.replace("sim/target", str(target))
                       .replace("sim/draft", str(draft)))
    with pytest.raises(ConfigError, match="draft_model_path .* does not exist"):
        space.check_paths()
    draft.mkdir()
    space.check_paths()
    space_from(tmp_path, text.replace("sim/target", "meta-llama/Llama-3.1-8B")
               .replace("sim/draft", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")).check_paths()
    space_from(tmp_path, HEAD + TREE).check_paths()  # the emulator needs no weights


def test_snapshot_of_server_args_matches_installed_sglang() -> None:
    from autotune.sglang import _fields as _sglang_fields
    from autotune.space._schema_names import installed_sglang_fields

    installed = installed_sglang_fields()
    if not installed:
        pytest.skip("sglang is not importable here")
    missing = set(_sglang_fields.fields()) - installed
    assert not missing, f"snapshot names unknown to the installed SGLang: {sorted(missing)[:5]}"


# ---------------------------------------------------------------------------- errors


ERROR_CASES = [
    # (name, yaml, needle for the expected line, field, substrings of the message)
    ("unknown parameter key", HEAD + """\
parameters:
  speculative_num_steps: {type: int, low: 1, high: 5, stepz: 2}
""", "stepz", "parameters.speculative_num_steps.stepz",
     ["unknown key 'stepz'", "did you mean 'step'", "allowed: type, low, high, step, log, when"]),
    ("low above high", HEAD + """\
parameters:
  speculative_num_steps:
    type: int
    low: 12
    high: 4
""", "low: 12", "parameters.speculative_num_steps.low", ["low (12) > high (4)", "empty range"]),
    ("bad type", HEAD + """\
parameters:
  NCCL_ALGO: {type: choice, choices: [Ring]}
""", "NCCL_ALGO", "parameters.NCCL_ALGO.type",
     ["type must be one of int, float, categorical", "'choice'"]),
    ("missing type", HEAD + """\
parameters:
  NCCL_ALGO: {choices: [Ring]}
""", "NCCL_ALGO", "parameters.NCCL_ALGO.type", ["missing required key 'type'", "int, float"]),
    ("empty choices", HEAD + """\
parameters:
  NCCL_ALGO: {type: categorical, choices: []}
""", "NCCL_ALGO", "parameters.NCCL_ALGO.choices", ["non-empty list"]),
    ("duplicate choice", HEAD + """\
parameters:
  NCCL_ALGO:
    type: categorical
    choices:
      - Ring
      - Ring  # again
""", "# again", "parameters.NCCL_ALGO.choices[1]", ["duplicate choice 'Ring'"]),
    ("unknown server arg", HEAD + """\
parameters:
  speculative_num_stepz: {type: int, low: 1, high: 4}
""", "stepz", "parameters.speculative_num_stepz",
     ["unknown server argument", "did you mean 'speculative_num_steps'", "ServerArgs",
      "UPPER_CASE environment variables"]),
    ("mixed-case name", HEAD + """\
parameters:
  Nccl_Algo: {type: categorical, choices: [Ring]}
""", "Nccl_Algo", "parameters.Nccl_Algo", ["neither a server argument", "UPPER_CASE"]),
    ("bad choice of a known arg", HEAD + """\
parameters:
  attention_backend: {type: categorical, choices: [fa3, flashinferr]}
""", "attention_backend", "parameters.attention_backend.choices[1]",
     ["'flashinferr' is not a valid attention_backend", "did you mean 'flashinfer'",
      "'triton'"]),
    ("float range for an int arg", HEAD + """\
parameters:
  tp_size: {type: float, low: 1, high: 8}
""", "tp_size", "parameters.tp_size.type", ["tp_size takes integers", "type: int"]),
    ("bool arg as int", HEAD.replace("fixed_args:\n",
                                     "fixed_args:\n  disable_custom_all_reduce: 1\n"),
     "disable_custom_all_reduce",
     "fixed_args.disable_custom_all_reduce", ["takes true or false", "an integer"]),
    ("env value is a bool", HEAD + """\
fixed_env:
  NCCL_NVLS_ENABLE: false
""", "NCCL_NVLS_ENABLE", "fixed_env.NCCL_NVLS_ENABLE", ["strings or numbers", "'0'"]),
    ("lower-case env name", HEAD + """\
fixed_env:
  nccl_algo: Ring
""", "nccl_algo", "fixed_env.nccl_algo", ["UPPER_CASE", "fixed_args"]),
    ("env var in fixed_args", HEAD.replace("fixed_args:\n", "fixed_args:\n  NCCL_ALGO: Ring\n"),
     "NCCL_ALGO", "fixed_args.NCCL_ALGO", ["environment variable", "fixed_env"]),
    ("reserved arg", HEAD.replace("fixed_args:\n", "fixed_args:\n  port: 30000\n"),
     "port: 30000", "fixed_args.port", ["free port"]),
    ("parameter also fixed", HEAD.replace("fixed_args:\n", "fixed_args:\n  tp_size: 8\n") + """\
parameters:
  tp_size: {type: categorical, choices: [4, 8]}
""", "tp_size: {type", "parameters.tp_size", ["both a parameter and in fixed_args"]),
    ("unknown top-level key", HEAD + "paramters: {}\n", "paramters",
     "paramters", ["unknown key 'paramters'", "did you mean 'parameters'", "allowed: name"]),
    ("bad backend", HEAD.replace("backend: sim", "backend: vllm"), "backend: vllm",
     "backend", ["'vllm' is not allowed", "sglang, sim"]),
    ("unknown profile", HEAD.replace("kimi-k2.5-eagle3-tp8", "kimi-k2.5-eagle3-tp4"),
     "profile:", "profile", ["unknown built-in profile", "kimi-k2.5-eagle3-tp8",
                             "llama-3.1-8b-eagle3-h100"]),
    ("profile on sglang", HEAD.replace("backend: sim", "backend: sglang"), "profile:",
     "profile", ["only for backend: sim"]),
    ("log with step", HEAD + """\
parameters:
  NCCL_MAX_NCHANNELS: {type: int, low: 2, high: 32, step: 2, log: true}
""", "NCCL_MAX_NCHANNELS", "parameters.NCCL_MAX_NCHANNELS.step", ["log and step"]),
    ("step does not divide", HEAD + """\
parameters:
  NCCL_MAX_NCHANNELS: {type: int, low: 2, high: 31, step: 2}
""", "NCCL_MAX_NCHANNELS", "parameters.NCCL_MAX_NCHANNELS.high", ["multiple of step (2)"]),
    ("forbidden choice", HEAD + """\
parameters:
  enable_symm_mem:
    type: categorical
    choices: [false, true]
forbidden: {args: [enable_symm_mem]}
""", "choices: [false, true]", "parameters.enable_symm_mem.choices[1]",
     ["choice true is forbidden", "forbidden.args"]),
    ("forbidden env choice", HEAD + """\
parameters:
  NCCL_NVLS_ENABLE: {type: categorical, choices: ["0", "1"]}
forbidden: {env: {NCCL_NVLS_ENABLE: ["1"]}}
""", "NCCL_NVLS_ENABLE: {type", "parameters.NCCL_NVLS_ENABLE.choices[1]",
     ["NCCL_NVLS_ENABLE=1 is forbidden"]),
    ("flag that implies a forbidden env", HEAD.replace(
        "fixed_args:\n", "fixed_args:\n  enable_nccl_nvls: true\n") + """\
forbidden: {env: {NCCL_NVLS_ENABLE: ["1"]}}
""", "enable_nccl_nvls: true", "fixed_args.enable_nccl_nvls",
     ["enable_nccl_nvls makes SGLang set NCCL_NVLS_ENABLE=1", "forbidden"]),
    ("forbidden fixed env", HEAD + """\
fixed_env:
  NCCL_NVLS_ENABLE: 1
forbidden: {env: {NCCL_NVLS_ENABLE: ["1"]}}
""", "NCCL_NVLS_ENABLE: 1", "fixed_env.NCCL_NVLS_ENABLE", ["NCCL_NVLS_ENABLE=1 is forbidden"]),
    ("forbidden env range", HEAD + """\
parameters:
  NCCL_NVLS_ENABLE: {type: int, low: 0, high: 1}
forbidden: {env: {NCCL_NVLS_ENABLE: ["1"]}}
""", "NCCL_NVLS_ENABLE: {type", "parameters.NCCL_NVLS_ENABLE",
     ["includes 1, which is forbidden"]),
    ("bad condition syntax", HEAD + TREE + """\
  NCCL_ALGO:
    type: categorical
    choices: [null, Ring]
    when: "speculative_eagle_topk >> 1"
""", "when:", "parameters.NCCL_ALGO.when", ["bad condition", "conditions look like"]),
    ("condition on unknown parameter", HEAD + TREE + """\
  NCCL_ALGO:
    type: categorical
    choices: [null, Ring]
    when: "tp_size > 4"
""", "when:", "parameters.NCCL_ALGO.when", ["unknown parameter 'tp_size'",
                                           "speculative_num_steps"]),
    ("non-speculative depends on speculative", HEAD + TREE + """\
  NCCL_ALGO:
    type: categorical
    choices: [null, Ring]
    when: "speculative_eagle_topk > 1"
""", "when:", "parameters.NCCL_ALGO.when", ["baseline must keep the same settings"]),
    ("condition with a value that is not a choice", HEAD + TREE + """\
  NCCL_PROTO: {type: categorical, choices: [null, LL]}
  NCCL_ALGO:
    type: categorical
    choices: [null, Ring]
    when: "NCCL_PROTO == LL129"
""", "when:", "parameters.NCCL_ALGO.when", ["LL129", "not a value of NCCL_PROTO",
                                           "one of null, 'LL'"]),
    ("cycle", HEAD + """\
parameters:
  speculative_num_steps: {type: int, low: 1, high: 4, when: "speculative_eagle_topk > 1"}
  speculative_eagle_topk: {type: categorical, choices: [1, 2], when: "speculative_num_steps > 1"}
  speculative_num_draft_tokens: {type: int, low: 2, high: 8}
""", "speculative_num_steps: {", "parameters.speculative_num_steps", ["cycle"]),
    ("partial speculative triple", HEAD + """\
parameters:
  speculative_num_steps: {type: int, low: 1, high: 4}
""", "parameters:", "parameters", ["all set or all unset", "speculative_eagle_topk"]),
    ("draft range that no tree reaches", HEAD + """\
parameters:
  speculative_num_steps: {type: int, low: 1, high: 4}
  speculative_eagle_topk: {type: categorical, choices: [1, 2]}
  speculative_num_draft_tokens: {type: int, low: 5, high: 8}
""", "parameters:", "parameters",
     ["speculative_num_steps=1, speculative_eagle_topk=2", "steps*topk+1 = 3"]),
    ("categorical draft tokens", HEAD + """\
parameters:
  speculative_num_steps: {type: int, low: 1, high: 4}
  speculative_eagle_topk: {type: categorical, choices: [1, 2]}
  speculative_num_draft_tokens: {type: categorical, choices: [2, 4]}
""", "speculative_num_draft_tokens", "parameters.speculative_num_draft_tokens.type",
     ["must be type int", "draft_tokens_max"]),
    ("null steps", HEAD + """\
parameters:
  speculative_num_steps: {type: categorical, choices: [null, 2]}
  speculative_eagle_topk: {type: categorical, choices: [1]}
""", "speculative_num_steps", "parameters.speculative_num_steps.choices[0]",
     ["integer >= 1", "all set or all unset"]),
    ("speculation never on", HEAD.replace("fixed_args:\n  speculative_algorithm: EAGLE3\n", "")
     + "parameters:\n  NCCL_ALGO: {type: categorical, choices: [null, Ring]}\n",
     "parameters:", "fixed_args", ["speculation is never on", "EAGLE3"]),
    ("unknown algorithm", HEAD.replace("EAGLE3", "EAGEL3"), "EAGEL3",
     "fixed_args.speculative_algorithm", ["did you mean 'EAGLE3'", "NEXTN"]),
    ("draft model missing", HEAD.replace("draft_model_path: sim/draft\n", ""), None,
     "draft_model_path", ["needs a draft model"]),
    ("unknown rule", HEAD + TREE + "rules: {draft_tokens_maxx: false}\n", "rules:",
     "rules.draft_tokens_maxx", ["unknown key", "topk1_draft_tokens"]),
    ("break-even off", HEAD + TREE + "constraints: {break_even: false}\n", "constraints:",
     "constraints.break_even", ["cannot be turned off"]),
    ("min speedup below one", HEAD + TREE + "constraints: {min_speedup: 0.9}\n",
     "constraints:", "constraints.min_speedup", [">= 1.0"]),
    ("bad SLO text", HEAD + TREE + """\
constraints:
  slos:
    - "p99 ttft under 5"
""", "p99 ttft", "constraints.slos[0]", ["<metric> <op> <number>", "p99_ttft_ms <= 500"]),
    ("unknown SLO metric", HEAD + TREE + """\
constraints:
  slos: ["p99_ttft <= 500"]
""", "slos:", "constraints.slos[0]", ["unknown metric 'p99_ttft'", "p99_ttft_ms"]),
    ("objective direction", HEAD + TREE + """\
objective:
  metric: p99_itl_ms
  direction: maximize
""", "direction:", "objective.direction", ["minimized"]),
    ("budget trials", HEAD + TREE + "budget:\n  trials: 0\n", "trials: 0", "budget.trials",
     [">= 1"]),
    ("gpus per trial", HEAD + TREE + "resources:\n  gpus_per_trial: 2\n", "gpus_per_trial",
     "resources.gpus_per_trial", ["tp_size"]),
    ("sampler", HEAD + TREE + "search: {sampler: cmaes}\n", "search:", "search.sampler",
     ["tpe, random, grid, phase-model"]),
    ("phase model with a latency objective", HEAD + TREE + """\
objective: {metric: p99_ttft_ms}
search:
  sampler: phase-model
""", "sampler: phase-model", "search.sampler", ["models output tok/s", "p99_ttft_ms", "tpe"]),
    ("workload", HEAD + TREE + "workload:\n  num_prompts: 0\n", "num_prompts",
     "workload.num_prompts", [">= 1"]),
    ("workload unknown key", HEAD + TREE + "workload:\n  prompts: 5\n", "prompts",
     "workload.prompts", ["unknown key", "num_prompts"]),
    ("concurrency level twice", HEAD + TREE + "workload:\n  concurrency:\n    - 64\n    - 8\n"
     "    - 64  # again\n", "# again", "workload.concurrency[2]", ["level 64 is listed twice"]),
    ("primary not a level", HEAD + TREE + "workload:\n  concurrency: [1, 8]\n"
     "  primary_concurrency: 4\n", "primary_concurrency", "workload.primary_concurrency",
     ["one of the concurrency levels [1, 8]"]),
    ("missing model", HEAD.replace("model_path: sim/target\n", ""), None, "model_path",
     ["missing required key 'model_path'"]),
    # SGLang's running-request cap: an integer >= 1, or null (its own: 48 with speculation).
    ("max_running_requests of 0", HEAD + "  max_running_requests: 0\n" + TREE, "max_running_requests",
     "fixed_args.max_running_requests", ["must be >= 1, got 0"]),
    ("max_running_requests choice of 0", HEAD + TREE
     + "  max_running_requests: {type: categorical, choices: [null, 64, 0]}\n", "max_running_requests",
     "parameters.max_running_requests.choices[2]", ["each choice must be an integer >= 1 or null, got 0"]),
    ("flush_cache not a boolean", HEAD + TREE + "measure:\n  flush_cache: sometimes\n", "flush_cache",
     "measure.flush_cache", ["sometimes"]),
    ("window not steady or whole", HEAD + TREE + "measure:\n  window: tail\n", "window",
     "measure.window", ["steady", "whole", "tail"]),
    ("standby not a boolean", HEAD + TREE + "measure:\n  standby: later\n", "standby",
     "measure.standby", ["later"]),
    ("prefork not a boolean", HEAD + TREE + "measure:\n  prefork: yes please\n", "prefork",
     "measure.prefork", ["yes please"]),
    ("prefork without a standby", HEAD + TREE + "measure:\n  standby: false\n  prefork: true\n", "prefork",
     "measure.prefork", ["needs a standby", "measure.standby is false"]),
]


@pytest.mark.parametrize("name,text,needle,field,parts", ERROR_CASES,
                         ids=[c[0] for c in ERROR_CASES])
def test_errors_name_file_line_field_and_allowed(tmp_path: Path, name: str, text: str,
                                                 needle: str | None, field: str,
                                                 parts: list[str]) -> None:
    err = load_error(tmp_path, text)
    assert err.field == field, str(err)
    if needle is not None:
        assert err.line == line_of_text(text, needle), str(err)
    message = str(err)
    assert message.startswith(f"{err.file}:"), message
    for part in parts:
        assert part in message, message


@pytest.mark.parametrize("text,line,column", [
    ("backend: sim\nparameters:\n  a: {type: int, low: 1\n", 4, 1),
    ("backend: sim\n  bad: indent\n", 2, 6),
    ("a: 1\na: 2\n", 2, 1),
    ("key: [1, 2\nother: 3\n", 2, 6),
])
def test_malformed_yaml_reports_line_and_column(tmp_path: Path, text: str, line: int,
                                                column: int) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    assert info.value.file == str(path)
    assert info.value.line == line
    assert f"column {column}" in str(info.value)


def test_unreadable_and_odd_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_space(tmp_path / "missing.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00model_path")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_space(tmp_path / "bin.yaml")
    for text, match in (("", "empty"), ("- a\n- b\n", "must be a mapping"),
                        ("a: &x [*x]\n", "recursive"), ("a: !!python/object:os.system {}\n",
                                                        "malformed YAML"),
                        ("---\na: 1\n---\nb: 2\n", "malformed YAML"),
                        ("model_path: 2024-13-45\n", "malformed YAML value")):
        path = write(tmp_path, text, "odd.yaml")
        with pytest.raises(ConfigError, match=match):
            load_space(path)


def test_from_dict_errors_carry_field_without_line() -> None:
    with pytest.raises(ConfigError) as info:
        SearchSpace.from_dict({"backend": "sim", "profile": "kimi-k2.5-eagle3-tp8",
                               "model_path": "m", "draft_model_path": "d",
                               "fixed_args": {"speculative_algorithm": "EAGLE3"},
                               "parameters": {"NCCL_ALGO": {"type": "categorical",
                                                            "choices": "Ring"}}})
    assert info.value.field == "parameters.NCCL_ALGO.choices"
    assert info.value.line is None and info.value.file is None


# ---------------------------------------------------------------------------- rules


def test_topk1_derives_draft_tokens_and_pruning_bounds(tmp_path: Path) -> None:
    space = space_from(tmp_path, HEAD + TREE)
    configs = list(space.enumerate())
    for config in configs:
        check_tree_rules(config)
    by_tree: dict[tuple[int, int], set[int]] = {}
    for config in configs:
        by_tree.setdefault((config[STEPS], config[TOPK]), set()).add(config[DRAFT])
    # Every (steps, topk) pair appears, and a tree's draft range is exactly
    # [steps + 1, min(12, s*k+1)] (rules tree_draft_tokens_depth and draft_tokens_max).
    assert set(by_tree) == {(s, k) for s in range(1, 5) for k in (1, 2, 4)}
    for (steps, topk), drafts in by_tree.items():
        expected = {steps + 1} if topk == 1 else set(range(steps + 1, min(12, steps * topk + 1) + 1))
        assert drafts == expected, (steps, topk)


def test_rules_can_be_turned_off(tmp_path: Path) -> None:
    assert set(RULES) >= {"topk1_draft_tokens", "draft_tokens_max", "draft_tokens_min"}
    space = space_from(tmp_path, HEAD + TREE + "rules: {draft_tokens_max: false}\n")
    drafts = {c[DRAFT] for c in space.enumerate() if c[STEPS] == 1 and c[TOPK] == 2}
    assert drafts == set(range(2, 13))
    config = {STEPS: 1, TOPK: 2, DRAFT: 12}
    assert space.validate_config(config) is None
    strict = space_from(tmp_path, HEAD + TREE)
    assert "steps*topk+1 = 3" in strict.validate_config(config)


def test_a_tree_gets_at_least_steps_plus_one_draft_tokens(tmp_path: Path) -> None:
    # SGLang's EAGLE worker crashed at the first verify with 4-4-4 and 5-4-4 on the H200
    # (docs/measurements/README.md): the accepted path is steps + 1 slots wide.
    text = HEAD + """\
parameters:
  speculative_num_steps: {type: int, low: 2, high: 5}
  speculative_eagle_topk: {type: categorical, choices: [1, 4]}
  speculative_num_draft_tokens: {type: int, low: 4, high: 8, step: 4, when: "speculative_eagle_topk > 1"}
"""
    space = space_from(tmp_path, text)
    trees = {(c[STEPS], c[DRAFT]) for c in space.enumerate() if c[TOPK] == 4}
    assert trees == {(2, 4), (2, 8), (3, 4), (3, 8), (4, 8), (5, 8)}
    assert space.count() == 4 + 6
    why = space.validate_config({STEPS: 4, TOPK: 4, DRAFT: 4})
    assert why is not None and "steps + 1 = 5" in why and "tree_draft_tokens_depth" in why
    assert space.validate_config({STEPS: 3, TOPK: 4, DRAFT: 4}) is None
    for seed in range(20):
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
        config = space.suggest(trial)
        if config.get(TOPK) == 4:
            assert config[DRAFT] >= config[STEPS] + 1, config
    loose = space_from(tmp_path, text + "rules: {tree_draft_tokens_depth: false}\n")
    assert loose.count() == 4 + 8
    assert loose.validate_config({STEPS: 4, TOPK: 4, DRAFT: 4}) is None


def test_when_condition_gates_a_parameter(tmp_path: Path) -> None:
    text = HEAD + TREE.replace("high: 12}", "high: 12, when: \"speculative_eagle_topk > 1\"}") + """\
  NCCL_PROTO: {type: categorical, choices: [null, LL]}
  NCCL_MAX_NCHANNELS: {type: int, low: 4, high: 8, step: 4, when: "NCCL_PROTO == LL"}
"""
    space = space_from(tmp_path, text)
    configs = list(space.enumerate())
    assert configs
    for config in configs:
        check_tree_rules(config)  # topk 1 still derives draft tokens despite the when
        assert ("NCCL_MAX_NCHANNELS" in config) == (config["NCCL_PROTO"] == "LL")
    one = next(c for c in configs if c["NCCL_PROTO"] is None)
    assert "must not be set" in space.validate_config({**one, "NCCL_MAX_NCHANNELS": 4})


def test_trtllm_mha_forces_topk_one(tmp_path: Path) -> None:
    space = space_from(tmp_path, HEAD + TREE + """\
  attention_backend: {type: categorical, choices: [fa3, trtllm_mha]}
""")
    configs = list(space.enumerate())
    assert {c["attention_backend"] for c in configs} == {"fa3", "trtllm_mha"}
    for config in configs:
        if config["attention_backend"] == "trtllm_mha":
            assert config[TOPK] == 1
        check_tree_rules(config)
    reason = space.validate_config({STEPS: 2, TOPK: 2, DRAFT: 4,
                                    "attention_backend": "trtllm_mha"})
    assert reason is not None and "topk" in reason


def test_speculation_switch_as_a_parameter(tmp_path: Path) -> None:
    text = HEAD.replace("fixed_args:\n  speculative_algorithm: EAGLE3\n", "") + TREE + """\
  speculative_algorithm: {type: categorical, choices: [null, EAGLE3]}
  speculative_attention_mode: {type: categorical, choices: [prefill, decode]}
  NCCL_ALGO: {type: categorical, choices: [null, Ring]}
"""
    space = space_from(tmp_path, text)
    configs = list(space.enumerate())
    off = [c for c in configs if c["speculative_algorithm"] is None]
    assert off == [{"speculative_algorithm": None, "NCCL_ALGO": None},
                   {"speculative_algorithm": None, "NCCL_ALGO": "Ring"}]
    for config in off:
        trial = space.trial_config(config)
        assert trial.is_baseline and trial.draft_model_path is None
        assert not [k for k in trial.server_args if k.startswith("speculative_")]
    on = [c for c in configs if c["speculative_algorithm"] is not None]
    assert all("speculative_attention_mode" in c for c in on)
    assert "must not be set" in space.validate_config({"speculative_algorithm": None,
                                                       STEPS: 2, "NCCL_ALGO": None})


# ---------------------------------------------------------------------------- validate / trial


def test_validate_config_reasons(tmp_path: Path) -> None:
    space = space_from(tmp_path, HEAD + TREE + """\
  NCCL_ALGO: {type: categorical, choices: [null, Ring, Tree]}
""")
    good = {STEPS: 2, TOPK: 2, DRAFT: 5, "NCCL_ALGO": "Ring"}
    assert space.validate_config(good) is None
    cases = {
        "missing parameter speculative_num_steps": {TOPK: 2, DRAFT: 5},
        "unknown parameter 'NCCL_ALGOO'": {**good, "NCCL_ALGOO": "Ring"},
        "NCCL_ALGO='Rnig' is not allowed": {**good, "NCCL_ALGO": "Rnig"},
        "speculative_num_steps=9 is not allowed": {**good, STEPS: 9},
        "must be 3 here": {STEPS: 2, TOPK: 1, DRAFT: 4, "NCCL_ALGO": None},
        "6 > steps*topk+1 = 5": {STEPS: 2, TOPK: 2, DRAFT: 6, "NCCL_ALGO": None},
        "must be a mapping": ["not", "a", "dict"],
    }
    for expected, config in cases.items():
        reason = space.validate_config(config)  # type: ignore[arg-type]
        assert reason is not None and expected in reason, (expected, reason)
    # A float equal to an int choice resolves to the choice itself.
    assert space.trial_config({**good, TOPK: 2.0}).server_args[TOPK] == 2
    assert type(space.trial_config({**good, TOPK: 2.0}).server_args[TOPK]) is int
    # A null choice may be left out; a derived value may be left out and is filled in.
    assert space.validate_config({STEPS: 2, TOPK: 1}) is None
    assert space.trial_config({STEPS: 2, TOPK: 1}).params[DRAFT] == 3
    with pytest.raises(ConfigError, match="invalid configuration"):
        space.trial_config({**good, STEPS: 9})


def test_forbidden_settings_are_rechecked_per_config(tmp_path: Path) -> None:
    space = space_from(tmp_path, HEAD + TREE + """\
  NCCL_NVLS_ENABLE: {type: categorical, choices: [null, "0", "1"]}
  enable_nccl_nvls: {type: categorical, choices: [false, true]}
""")
    config = {STEPS: 2, TOPK: 2, DRAFT: 4, "NCCL_NVLS_ENABLE": "1", "enable_nccl_nvls": False}
    assert space.validate_config(config) is None
    # A space loaded before a site forbade NVLS must not launch it afterwards.
    space.forbidden = dataclasses.replace(space.forbidden, env={"NCCL_NVLS_ENABLE": ("1",)})
    assert "NCCL_NVLS_ENABLE=1 is forbidden" in space.validate_config(config)
    implied = {**config, "NCCL_NVLS_ENABLE": None, "enable_nccl_nvls": True}
    assert "enable_nccl_nvls makes SGLang set NCCL_NVLS_ENABLE=1" in \
        space.validate_config(implied)
    space.forbidden = dataclasses.replace(space.forbidden, args=("enable_nccl_nvls",), env={})
    assert "enable_nccl_nvls=true is forbidden" in space.validate_config(implied)
    with pytest.raises(ConfigError, match="forbidden"):
        space.trial_config(implied)


def test_trial_config_server_args_env_and_baseline(tmp_path: Path) -> None:
    text = HEAD.replace("fixed_args:\n", "fixed_args:\n  mem_fraction_static: 0.85\n"
                        "  speculative_attention_mode: decode\n") + TREE + """\
  tp_size: {type: categorical, choices: [4, 8]}
  NCCL_ALGO: {type: categorical, choices: [null, Ring]}
  NCCL_MIN_NCHANNELS: {type: int, low: 2, high: 4, step: 2}
fixed_env:
  NCCL_NVLS_ENABLE: 0
  NCCL_DEBUG: null
"""
    space = space_from(tmp_path, text)
    params = {STEPS: 3, TOPK: 2, DRAFT: 6, "tp_size": 4, "NCCL_ALGO": None,
              "NCCL_MIN_NCHANNELS": 2}
    trial = space.trial_config(params)
    assert trial.server_args == {
        "model_path": "sim/target", "speculative_algorithm": "EAGLE3",
        "mem_fraction_static": 0.85, "speculative_attention_mode": "decode",
        STEPS: 3, TOPK: 2, DRAFT: 6, "tp_size": 4,
        "speculative_draft_model_path": "sim/draft"}
    assert trial.env == {"NCCL_NVLS_ENABLE": "0", "NCCL_MIN_NCHANNELS": "2"}
    assert set(trial.unset_env) == {"NCCL_DEBUG", "NCCL_ALGO"}
    assert (trial.tp_size, trial.backend, trial.profile) == (4, "sim", "kimi-k2.5-eagle3-tp8")
    assert trial.is_speculative and not trial.is_baseline
    assert trial.draft_model_path == "sim/draft"

    base_params = space.baseline_params(params)
    assert base_params == {"tp_size": 4, "NCCL_ALGO": None, "NCCL_MIN_NCHANNELS": 2,
                           "speculative_algorithm": None}
    assert space.is_speculative(params) and not space.is_speculative(base_params)
    base = space.trial_config(base_params)
    assert base.is_baseline and base.draft_model_path is None
    assert base.server_args == {"model_path": "sim/target", "mem_fraction_static": 0.85,
                                "tp_size": 4}
    assert base.env == trial.env and base.unset_env == trial.unset_env
    assert base.group_key() == trial.group_key()
    hash(trial.group_key())

    other_tree = space.trial_config({**params, STEPS: 1, TOPK: 1, DRAFT: 2})
    assert other_tree.group_key() == trial.group_key()
    for change in ({"NCCL_ALGO": "Ring"}, {"tp_size": 8}, {"NCCL_MIN_NCHANNELS": 4}):
        assert space.trial_config({**params, **change}).group_key() != trial.group_key()

    assert TrialConfig.from_dict(trial.to_dict()) == trial
    assert "speculative_num_steps=3" in trial.describe()


def test_space_pickles_and_keeps_behaviour(tmp_path: Path) -> None:
    space = space_from(tmp_path, HEAD + TREE)
    copy = pickle.loads(pickle.dumps(space))
    assert list(copy.enumerate()) == list(space.enumerate())
    assert type(copy.raw["parameters"]) is dict


def test_coerce_params_reads_command_line_strings(tmp_path: Path) -> None:
    space = space_from(tmp_path, HEAD + TREE + """\
  NCCL_NVLS_ENABLE: {type: categorical, choices: [null, "0"]}
  NCCL_ALGO: {type: categorical, choices: [null, Ring]}
""")
    raw = {STEPS: "3", TOPK: "2", DRAFT: "5", "NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "null"}
    params = space.coerce_params(raw)
    assert params == {STEPS: 3, TOPK: 2, DRAFT: 5, "NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": None}
    assert space.validate_config(params) is None


def test_float_parameters_and_grids(tmp_path: Path) -> None:
    text = HEAD + TREE + """\
  mem_fraction_static: {type: float, low: 0.7, high: 0.9, step: 0.1}
"""
    space = space_from(tmp_path, text)
    assert {c["mem_fraction_static"] for c in space.enumerate()} == {0.7, 0.8, 0.9}
    free = space_from(tmp_path, text.replace(", step: 0.1", ""))
    with pytest.raises(ConfigError) as info:
        next(free.enumerate())
    assert info.value.field == "parameters.mem_fraction_static.step"
    assert info.value.line == line_of_text(text, "mem_fraction_static")
    assert free.validate_config({STEPS: 1, TOPK: 1, "mem_fraction_static": 0.777}) is None


def test_sections_and_defaults(tmp_path: Path) -> None:
    space = space_from(tmp_path, HEAD + TREE + """\
constraints:
  min_speedup: 1.05
  slos: ["p99_ttft_ms <= 500", "output_tok_s > 50"]
search: {sampler: random, seed: 3, max_concurrent: 2}
""")
    assert space.name == "space"
    assert (space.objective.metric, space.objective.direction) == ("output_tok_s", "maximize")
    assert space.constraints.min_speedup == 1.05
    ttft, tok = space.constraints.slos
    assert (ttft.metric, ttft.op, ttft.value) == ("p99_ttft_ms", "<=", 500.0)
    assert ttft.is_met(400) is True and ttft.is_met(600) is False and ttft.is_met(None) is None
    assert ttft.violation(400) == -100 and ttft.violation(None) is None
    assert tok.violation(50) > 0 and tok.violation(60) < 0
    assert (space.search.sampler, space.search.seed, space.search.max_concurrent) == \
        ("random", 3, 2)
    assert space.search.finalists == 3 and space.budget.trials == 40
    assert space.measure.repeats == 3 and space.resources.cpus_per_trial == 1
    assert space.exclusive_node is False and space.workload == {}


def test_relative_paths_resolve_against_the_space_file(tmp_path: Path) -> None:
    (tmp_path / "prompts.jsonl").write_text("".join(
        f'{{"prompt": "question number {i} about topic {i * 7}"}}\n' for i in range(10)))
    (tmp_path / "profiles").mkdir()
    space = space_from(tmp_path, HEAD + TREE + """\
workload: {source: jsonl, path: prompts.jsonl, num_prompts: 4, warmup_prompts: 1}
""")
    assert space.workload["path"] == str(tmp_path / "prompts.jsonl")
    text = HEAD.replace("kimi-k2.5-eagle3-tp8", "profiles/mine.yaml") + TREE
    err = load_error(tmp_path, text)
    assert err.field == "profile" and str(tmp_path / "profiles" / "mine.yaml") in str(err)
    assert err.line == 2
    builtin = ROOT / "autotune" / "sim" / "profiles" / "kimi-k2.5-eagle3-tp8.yaml"
    (tmp_path / "profiles" / "mine.yaml").write_text(builtin.read_text())
    assert space_from(tmp_path, text).profile == str(tmp_path / "profiles" / "mine.yaml")
    (tmp_path / "profiles" / "mine.yaml").write_text("architecture: moe\nnot_a_key: 1\n")
    err = load_error(tmp_path, text)
    assert err.field == "profile" and "invalid profile" in str(err) and err.line == 2


# ---------------------------------------------------------------------------- optuna


@pytest.mark.parametrize("name", ["demo.yaml", "llama-3.1-8b-eagle3.yaml",
                                  "kimi-k2.5-eagle3-tp8.yaml"])
def test_suggest_with_a_real_study_never_proposes_invalid_configs(name: str) -> None:
    space = load_space(SPACES / name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0),
                                direction="maximize")
    seen = []
    for _ in range(120):
        trial = study.ask()
        config = space.suggest(trial)
        assert space.validate_config(config) is None, config
        check_tree_rules(config)
        # Derived values are not asked of Optuna; everything else is.
        if config[TOPK] == 1:
            assert DRAFT not in trial.params
        assert set(trial.params) <= set(config)
        study.tell(trial, float(config[STEPS]))
        seen.append(config)
    assert len({(c[STEPS], c[TOPK], c[DRAFT]) for c in seen}) > 10


def test_suggest_with_tpe_and_dynamic_draft_range() -> None:
    space = load_space(SPACES / "llama-3.1-8b-eagle3-sim.yaml")
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=8),
                                direction="maximize")

    def objective(trial: optuna.Trial) -> float:
        config = space.suggest(trial)
        assert space.validate_config(config) is None
        return config[STEPS] * config[TOPK] - abs(config[DRAFT] - 10)

    study.optimize(objective, n_trials=40)
    assert len(study.trials) == 40
