"""Every command of ``autotune/cli/`` is an (XArgs dataclass, main) pair, and every numeric flag of
every command is bounded while parsing (issue 36), by the one set of helpers in
``autotune.command_line``."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
from types import ModuleType

import pytest

from autotune import command_line as cli
from autotune.__main__ import COMMANDS
from benchmarks.search.command import build_parser as bench_parser

#: The commands of cli/, by module: the dispatcher's and the one it does not list (the emulator fit).
MODULES = sorted({module for module, _ in COMMANDS.values()} | {"autotune.cli.fit"})
#: The one command without a dataclass of its own: it hands its flags to the benchmark's parser.
FORWARDS = {"autotune.cli.bench_search"}
#: What argparse would take without a bound: a plain int or float.
UNBOUNDED = (int, float)


def _args_class(module: ModuleType) -> type:
    found = [obj for name, obj in vars(module).items()
             if inspect.isclass(obj) and name.endswith("Args") and obj.__module__ == module.__name__]
    assert len(found) == 1, f"{module.__name__}: expected one XArgs dataclass, found {found}"
    return found[0]


@pytest.mark.parametrize("name", MODULES)
def test_every_command_is_an_args_dataclass_and_a_main(name: str) -> None:
    module = importlib.import_module(name)
    params = inspect.signature(module.main).parameters
    assert list(params)[:1] == ["argv"] and params["prog"].kind is inspect.Parameter.KEYWORD_ONLY
    if name in FORWARDS:
        return
    args_class = _args_class(module)
    assert dataclasses.is_dataclass(args_class)
    params_of = args_class.__dataclass_params__  # type: ignore[attr-defined]
    assert params_of.frozen and all(f.kw_only for f in dataclasses.fields(args_class))
    dests = {a.dest for a in module.build_parser()._actions if a.dest not in ("help", "version", argparse.SUPPRESS)}
    assert dests == {f.name for f in dataclasses.fields(args_class)}, name


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(name, importlib.import_module(name).build_parser()) for name in MODULES if name not in FORWARDS]
    return [*out, ("benchmarks.search.command", bench_parser())]


@pytest.mark.parametrize(("name", "parser"), _parsers(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_flag_is_bounded(name: str, parser: argparse.ArgumentParser) -> None:
    loose = [a.option_strings[0] for a in parser._actions
             if a.type in UNBOUNDED
             or (a.type is None and isinstance(a.default, (int, float)) and not isinstance(a.default, bool)
                 and a.nargs != 0)]
    assert not loose, (f"{name}: numeric flags without a bound {loose}; give them a type from "
                       "autotune.command_line (positive_int, seed, port, float_in...)")


def test_the_bound_check_sees_an_unbounded_flag() -> None:
    parser = cli.command_parser("x", "X.")
    parser.add_argument("--n", type=int)
    assert [a.option_strings[0] for a in parser._actions if a.type in UNBOUNDED] == ["--n"]


@pytest.mark.parametrize(("name", "argv", "said"), [
    ("autotune.cli.search", ["--space", "demo", "--seed", "99999999999999999999999"],
     "--seed: must be an integer from 0 to 4294967295"),
    ("autotune.cli.search", ["--space", "demo", "--trials", "0"], "--trials: must be an integer from 1"),
    ("autotune.cli.trial", ["--space", "demo", "--repeats", "-1"], "--repeats: must be an integer from 1"),
    ("autotune.cli.trial", ["--space", "demo", "--repeats", "0"], "--repeats: must be an integer from 1"),
    ("autotune.cli.evaluate", ["--space", "demo", "--concurrency", "-5"], "--concurrency: must be an integer from 1"),
    ("autotune.cli.evaluate", ["--space", "demo", "--concurrency", "0"], "--concurrency: must be an integer from 1"),
    ("autotune.cli.export", ["--name", "x", "--port", "70000"], "--port: must be an integer from 1 to 65535"),
    ("autotune.cli.probe", ["--space", "demo", "--tp", "0"], "--tp: must be an integer from 1"),
    ("autotune.cli.probe", ["--space", "demo", "--tp", "2", "--timeout", "nan"],
     "--timeout: must be a number above 0"),
    ("autotune.cli.probe", ["--space", "demo", "--tp", "2", "--tokens", "1,-4"],
     "--tokens: must be an integer from 1"),
    ("autotune.cli.fit", ["--measurements", "x", "--input-len", "0"], "--input-len: must be an integer from 1"),
])
def test_an_absurd_value_is_refused_while_parsing(name: str, argv: list[str], said: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(name)
    with pytest.raises(SystemExit) as stop:
        module.parse_args(argv, prog="autotune x")
    assert stop.value.code == cli.BAD_INPUT
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
