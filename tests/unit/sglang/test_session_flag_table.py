"""The session's flag table (``tests/conftest.py``) stands for the installed SGLang's parser.

Every subprocess and Ray worker of the suite resolves its flags against that table instead of
importing SGLang, so the table must be the installed parser in everything autotune and the
emulator read from it: release, spellings, dests, arity, defaults, choices, value types, ``--config``
key rules, and argparse's own verdicts (prefix matching, ambiguity, bad values).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import LaunchArgsError
from autotune.sglang import _parser_twin as builtin
from autotune.sglang import flags as sglang_flags
from autotune.sglang.args import parse_server_args

# Value types a table rebuilds by name (builtin.ROW_TYPES); any other type parses as str in a
# table. The installed 0.5.23 has these others, on flags no emulator test passes (JSON-valued
# config flags, --lora-paths), listed so that a new one shows up here.
ROOT = Path(__file__).resolve().parents[3]

_TABLE_STR_TYPES = {"loads", "json_list_type", "nullable_str", "parse_cuda_graph_config_arg"}


@pytest.fixture(scope="module")
def table_path(installed_flag_table: Path) -> Path:
    return installed_flag_table


def test_subprocesses_get_the_table_and_this_process_keeps_the_real_parser(
        subprocesses_use_the_installed_flag_table, installed_flag_table):
    exported = subprocesses_use_the_installed_flag_table
    if exported is not None:  # None: a table was preset for the whole run, and is left alone
        assert exported == installed_flag_table
        assert os.environ[sglang_flags.FLAG_TABLE_ENV] == str(installed_flag_table)
        assert sglang_flags.active_flags() is sglang_flags.installed_flags()
        code = ("from autotune.sglang import flags as f; a = f.active_flags(); "
                "import sys; print(a.version, a.origin, 'sglang.srt.server_args' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, check=True)
        version = sglang_flags.installed_flags().version
        assert out.stdout.split() == [version, "flag", "table", installed_flag_table.name, "False"]


@pytest.mark.slow  # 10 s at load ~8 (make test-fast leaves it out)
def test_make_sglang_flags_writes_the_same_table(installed_flag_table, tmp_path):
    """The script and the session share one writer: same bytes but for ``generated_by``."""
    out = tmp_path / "script.json"
    env = {k: v for k, v in os.environ.items() if k != sglang_flags.FLAG_TABLE_ENV}
    proc = subprocess.run([sys.executable, "tests/data/make_sglang_flags.py", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    script, session = json.loads(out.read_text()), json.loads(installed_flag_table.read_text())
    assert script.pop("generated_by").startswith("tests/data/make_sglang_flags.py")
    assert session.pop("generated_by").startswith("tests/conftest.py")
    # Choice lists SGLang builds from a set come out in hash order, different in every process.
    for data in (script, session):
        for row in data["flags"]:
            if row.get("choices"):
                row["choices"] = sorted(map(str, row["choices"]))
    assert script == session
    assert out.read_text().count("\n") == len(script["flags"]) + 2  # a header line, then one flag a line


def test_table_is_the_installed_release_flag_for_flag(table_path):
    installed = sglang_flags.installed_flags()
    table = sglang_flags.flags_from_table(str(table_path))
    assert json.loads(table_path.read_text())["sglang_version"] == installed.version == table.version
    assert table.config_keys == installed.config_keys
    assert table.dests() == installed.dests()
    assert [a.option_strings for a in table.actions] == [a.option_strings for a in installed.actions]
    for real, rebuilt in zip(installed.actions, table.actions, strict=True):
        where = real.option_strings[0]
        assert (rebuilt.dest, rebuilt.nargs, rebuilt.required) == (real.dest, real.nargs, real.required), where
        assert isinstance(rebuilt, argparse.BooleanOptionalAction) == isinstance(real, argparse.BooleanOptionalAction)
        if real.choices is not None:
            assert sorted(map(str, rebuilt.choices)) == sorted(map(str, real.choices)), where
        if real.nargs != 0 and real.type is not None:
            name = real.type.__name__
            expected = builtin.ROW_TYPES.get(name) if name not in _TABLE_STR_TYPES else str
            assert name in builtin.ROW_TYPES or name in _TABLE_STR_TYPES, f"{where}: type {name}"
            assert rebuilt.type is expected, where
        assert table.action_of(real.dest) is not None
        assert table.action_of(real.dest).option_strings == installed.action_of(real.dest).option_strings


@pytest.mark.parametrize("argv", [
    ["--model-path", "m"],
    ["--model-path", "m", "--tp-size", "2", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.8",
     "--cuda-graph-max-bs-decode", "16", "--disable-prefill-cuda-graph", "--enable-metrics"],
    ["--model-path", "m", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "d",
     "--max-running-requests", "8", "--no-enable-tf32-matmul", "--disable-cuda-graph"],
], ids=["defaults", "eagle3-chain", "eagle-switches"])
def test_table_parses_like_the_installed_parser(table_path, argv):
    real = parse_server_args(argv, use_sglang=True)
    with sglang_flags.using_flags(sglang_flags.flags_from_table(str(table_path))):
        rebuilt = parse_server_args(argv)
    assert rebuilt == real


@pytest.mark.parametrize("argv", [
    ["--model-path", "m", "--tp-size", "two"],
    ["--model-path", "m", "--speculative-algorithm", "MEDUSA9"],
    ["--model-path", "m", "--cuda-graph-max-bs", "8"],
    ["--model-path", "m", "--no-such-flag"],
], ids=["bad-int", "bad-choice", "ambiguous-prefix", "unknown"])
def test_table_refuses_what_the_installed_parser_refuses(table_path, argv):
    with pytest.raises(LaunchArgsError) as real:
        parse_server_args(argv, use_sglang=True)
    with sglang_flags.using_flags(sglang_flags.flags_from_table(str(table_path))):
        with pytest.raises(LaunchArgsError) as rebuilt:
            parse_server_args(argv)
    assert str(rebuilt.value) == str(real.value)


def test_table_reads_a_config_file_like_the_installed_loader(table_path, tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("tp-size: 2\nspeculative-algorithm: EAGLE3\nspeculative-num-steps: 2\n"
                      "speculative-eagle-topk: 1\nspeculative-num-draft-tokens: 3\nenable-metrics: true\n"
                      "cuda-graph-max-bs-decode: 32\n")
    argv = ["--model-path", "m", "--config", str(config), "--speculative-num-steps", "3",
            "--speculative-num-draft-tokens", "4"]
    real = parse_server_args(argv, use_sglang=True)
    with sglang_flags.using_flags(sglang_flags.flags_from_table(str(table_path))):
        rebuilt = parse_server_args(argv)
    assert rebuilt == real
    assert real["speculative_num_steps"] == 3 and real["tp_size"] == 2 and real["enable_metrics"] is True
