"""What every command shares (``autotune.command_line``): bounds of numeric flags, the files a
command writes checked before it runs, one-line usage errors, and ``emit`` keeping a result whose
file vanished while the command ran."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from autotune import command_line as cli


@pytest.mark.parametrize(("parse", "text", "value"), [
    (cli.positive_int, "1", 1), (cli.positive_int, str(2**31 - 1), 2**31 - 1),
    (cli.non_negative_int, "0", 0), (cli.seed, "0", 0), (cli.seed, str(2**32 - 1), 2**32 - 1),
    (cli.port, "65535", 65535), (cli.positive_float, "0.5", 0.5), (cli.float_in(0.0), "0", 0.0),
])
def test_a_value_in_range_is_taken(parse, text, value) -> None:
    assert parse(text) == value


@pytest.mark.parametrize(("parse", "text", "said"), [
    (cli.positive_int, "0", "must be an integer from 1 to 2147483647; got '0'"),
    (cli.positive_int, "-1", "must be an integer from 1 to 2147483647; got '-1'"),
    (cli.positive_int, "2.5", "must be an integer from 1 to 2147483647; got '2.5'"),
    (cli.seed, "99999999999999999999999", "must be an integer from 0 to 4294967295; got '99999999999999999999999'"),
    (cli.seed, "-1", "must be an integer from 0 to 4294967295"),
    (cli.port, "0", "must be an integer from 1 to 65535"),
    (cli.positive_float, "0", "must be a number above 0; got '0'"),
    (cli.positive_float, "nan", "must be a number above 0; got 'nan'"),
    (cli.positive_float, "inf", "must be a number above 0; got 'inf'"),
    (cli.float_in(0.0, 1.0, low_included=False), "1.5", "must be a number above 0 and at most 1; got '1.5'"),
    (cli.int_list(cli.positive_int), "1,0,4", "must be an integer from 1 to 2147483647; got '0'"),
    (cli.int_list(cli.positive_int), " , ", "expected comma-separated integers"),
])
def test_a_value_out_of_range_says_the_allowed_range(parse, text, said) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse(text)
    assert said in str(err.value)


def test_a_pasted_megabyte_is_shown_cut() -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        cli.positive_int("9" * 1_000_000)
    assert len(str(err.value)) < 120 and "..." in str(err.value)


def test_an_empty_range_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="low 5 is above high 1"):
        cli.int_in(5, 1)


def _parser(tmp_path: Path) -> cli.CommandParser:
    parser = cli.command_parser("autotune thing", "Do a thing.", examples=["{prog} --n 2"])
    parser.add_argument("--n", type=cli.positive_int)
    cli.add_output(parser, record="the thing", json_also="--summary-json")
    return parser


def test_unwritable_names_what_is_wrong(tmp_path: Path) -> None:
    assert cli.unwritable(str(tmp_path / "ok.json")) is None
    assert "the folder" in (cli.unwritable(str(tmp_path / "no" / "x.json")) or "")
    assert "is a folder" in (cli.unwritable(str(tmp_path)) or "")
    if os.geteuid() != 0:  # root writes anywhere: the check cannot refuse it there
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert "is not writable" in (cli.unwritable(str(locked / "x.json")) or "")


@pytest.mark.parametrize("flag", ["-o", "--output", "--summary-json"])
def test_parse_command_refuses_a_file_in_a_missing_folder_in_one_line(tmp_path: Path, flag: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing" / "out.json"
    with pytest.raises(SystemExit) as stop:
        _parser(tmp_path).parse_command([flag, str(missing)])
    assert stop.value.code == cli.BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert err.startswith(f"autotune thing: error: argument {flag if flag != '--output' else '-o'}")
    assert f"the folder {missing.parent} does not exist" in err and "(autotune thing --help lists the flags)" in err


def test_parse_args_alone_checks_only_the_flags(tmp_path: Path) -> None:
    """A recipe for another machine names its folders: its flags can still be checked here."""
    args = _parser(tmp_path).parse_args(["-o", "/no/such/folder/out.json", "--n", "3"])
    assert args.output == "/no/such/folder/out.json" and args.n == 3


def test_a_bad_number_is_one_line_with_the_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _parser(tmp_path).parse_command(["--n", "-1"])
    assert stop.value.code == cli.BAD_INPUT
    err = capsys.readouterr().err
    assert err == ("autotune thing: error: argument --n: must be an integer from 1 to 2147483647; got '-1' "
                   "(autotune thing --help lists the flags)\n")


def test_examples_name_the_command_as_it_was_run(tmp_path: Path) -> None:
    shown = _parser(tmp_path).format_help()
    assert shown.startswith("usage: autotune thing ") and "\n  autotune thing --n 2" in shown


def test_emit_keeps_a_result_whose_folder_vanished_while_the_command_ran(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    args = _parser(tmp_path).parse_command(["--json", "-o", str(folder / "r.json")])
    folder.rmdir()  # checked at the start; gone by the end
    code = cli.emit(args, text="the thing", record={"answer": 42})
    printed = capsys.readouterr()
    assert code == cli.BAD_INPUT and "cannot write" in printed.err
    assert json.loads(printed.out) == {"answer": 42}  # measured, printed, not lost
