"""A server's log as error messages show it: its last lines, and how a process exited.

Start-up crashes, start-up timeouts and later crashes all carry the tail of the server's log
(read from the current launch's offset, long lines shortened) and the exit status in words;
these helpers build that text for :class:`~autotune.server.process.ServerProcess`.
"""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Sequence
from pathlib import Path

from autotune.errors import ServerStartupCrash, ServerStartupTimeout

__all__ = ["LOG_TAIL_LINES", "describe_exit", "read_tail", "with_tail"]

LOG_TAIL_LINES = 50


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "with an unknown status"
    if returncode < 0:
        try:
            return f"on signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"on signal {-returncode}"
    return f"with code {returncode}"


def read_tail(path: Path, n: int, *, start: int = 0, max_line_chars: int = 2000) -> str:
    """Last ``n`` lines of ``path``, reading only from byte offset ``start``.

    Lines longer than ``max_line_chars`` are shortened (SGLang logs all its server arguments on one
    line of some 15 000 characters).
    """
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            chunk = max(65536, n * 512)
            begin = max(start, size - chunk)
            f.seek(begin)
            data = f.read()
    except FileNotFoundError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if begin > start and lines:
        lines = lines[1:]  # the first line was cut by the chunk boundary
    lines = [line if len(line) <= max_line_chars
             else f"{line[:max_line_chars]}... [{len(line) - max_line_chars} more characters]"
             for line in lines[-n:]] if n > 0 else []
    return "\n".join(lines)


def with_tail(message: str, log_path: Path | None, tail: str) -> str:
    if not tail:
        return f"{message}\n(the server log {log_path} is empty)"
    return f"{message}\n--- last lines of {log_path} ---\n{tail}"


def startup_crash(*, pid: int | None, status: int, url: str, command: Sequence[str] | None, log_path: Path | None,
                  tail: str) -> ServerStartupCrash:
    """The error for a server that exited with ``status`` before ``url`` answered 200."""
    return ServerStartupCrash(
        with_tail(f"server pid {pid} exited {describe_exit(status)} before {url} answered 200; "
                  f"command: {shlex.join(command or [])}", log_path, tail), log_tail=tail, returncode=status)


def startup_timeout(*, pid: int | None, url: str, timeout_s: float, last: str, returncode: int | None,
                    command: Sequence[str] | None, log_path: Path | None, tail: str) -> ServerStartupTimeout:
    """The error for a server that stayed alive but never answered 200 at ``url`` within ``timeout_s``."""
    return ServerStartupTimeout(
        with_tail(f"server pid {pid} was alive but {url} did not answer 200 within {timeout_s:g} s (last "
                  f"answer: {last}); it was stopped {describe_exit(returncode)}; command: "
                  f"{shlex.join(command or [])}", log_path, tail), log_tail=tail)
