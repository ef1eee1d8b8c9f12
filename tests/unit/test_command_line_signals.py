"""autotune.command_line: one path for SIGINT and SIGTERM, and the writable-folder check."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune import command_line as cli
from autotune.errors import ConfigError


@pytest.fixture
def handlers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's signal handlers and stop record, as they were after the test."""
    monkeypatch.setattr(cli, "_STOPS", [])
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_sigterm_takes_sigints_path_and_exits_143(handlers: None) -> None:
    cli.interruptible()
    assert cli.interrupted_code() == cli.INTERRUPTED
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
    assert cli.interrupted_code() == cli.TERMINATED == 143


def test_sigterm_reaches_whatever_handles_sigint_now(handlers: None) -> None:
    """Ray Tune's graceful stop replaces SIGINT's handler while trials run; SIGTERM must reach it."""
    cli.interruptible()
    seen: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    os.kill(os.getpid(), signal.SIGTERM)
    assert seen == [signal.SIGINT] and cli.interrupted_code() == cli.TERMINATED


def test_run_main_turns_a_stop_into_one_line_and_its_code(handlers: None, capsys: pytest.CaptureFixture) -> None:
    def stopped(argv: list[str] | None) -> int:
        raise KeyboardInterrupt

    assert cli.run_main(stopped, []) == cli.INTERRUPTED
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err
    assert cli.run_main(lambda argv: None, []) == cli.OK


def test_check_writable_makes_the_folder_or_says_why_not(tmp_path: Path) -> None:
    assert cli.check_writable(tmp_path / "a" / "mlruns", what="the state") == (tmp_path / "a" / "mlruns").resolve()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"cannot write the state in .*file/mlruns"):
        cli.check_writable(tmp_path / "file" / "mlruns", what="the state")


def test_a_stop_inside_generated_code_still_exits_130(tmp_path: Path) -> None:
    """A Ctrl-C that lands in code made by exec() of a string (a dataclass's methods, during a lazy
    import) is caught by run_main like any other; CPython would otherwise end the interpreter with
    SIGINT at exit (-2) although the exception was handled."""
    import subprocess
    import sys

    module = tmp_path / "stop_in_exec.py"
    module.write_text(
        "import os, signal, sys\n"
        "from autotune import command_line as cli\n"
        "def main(argv):\n"
        "    cli.interruptible()\n"
        "    exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nx = 1\\n', {})\n"
        "    return 0\n"
        "sys.exit(cli.run_main(main))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run([sys.executable, "-m", "stop_in_exec"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == cli.INTERRUPTED == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.strip() == "interrupted (SIGINT): stopped", proc.stderr
