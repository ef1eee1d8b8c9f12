"""One exception tree for the whole package.

Config errors are the user's to fix and carry where they came from. Server errors separate a
server that died from one that never answered, because the fixes differ (a bad flag or an OOM
versus a slow weight load).
"""

from __future__ import annotations

import errno


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose."""


class ConfigError(AutotuneError):
    """A user-supplied file, flag or value is wrong.

    Args:
        message: What is wrong and what would be right.
        file: The file it came from, if any.
        line: 1-based line in that file, if known.
        field: Dotted path of the offending field, if any (``parameters.speculative_num_steps.low``).
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "")
        if self.field:
            where = f"{where}: {self.field}" if where else self.field
        return f"{where}: {self.message}" if where else self.message


class LaunchArgsError(ConfigError):
    """SGLang's argument parser (or our built-in twin) rejected a launch command.

    Args:
        message: The parser's own message.
        argv: The rejected command line.
    """

    def __init__(self, message: str, *, argv: list[str] | None = None) -> None:
        self.argv = list(argv or [])
        super().__init__(message)


class ServerError(AutotuneError):
    """A server process did not do what it should.

    Args:
        message: What happened.
        log_tail: The last lines of the server log, for the user and for MLflow.
        returncode: The exit code, when the process ended.
    """

    def __init__(self, message: str, *, log_tail: str = "", returncode: int | None = None) -> None:
        self.log_tail = log_tail
        self.returncode = returncode
        super().__init__(message)


class ServerStartupCrash(ServerError):
    """The server process exited before it became ready (bad flag, OOM, crash at start)."""


class ServerStartupTimeout(ServerError):
    """The server stayed alive but did not become ready in time."""


class ServerCrashed(ServerError):
    """The server was ready, then died (crash mid-run)."""


class BenchError(AutotuneError):
    """The benchmark client could not produce a measurement."""


#: The most characters of a value an error message shows (:func:`cut`).
SHOWN_CHARS = 300


def cut(text: str, *, limit: int = SHOWN_CHARS) -> str:
    """``text`` as an error message shows a value: at most ``limit`` characters, and when longer,
    its start and how much was left out, so that a huge value (a YAML alias bomb, a garbled line)
    never floods the console.

    Raises:
        ValueError: ``limit`` is below 20 (too short to say anything).
    """
    if limit < 20:
        raise ValueError(f"limit must be >= 20, got {limit}")
    if len(text) <= limit:
        return text
    note = f"... ({len(text) - limit} more characters)"
    return text[: max(limit - len(note), 0)] + note


def chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception behind it: causes, contexts and the ``orig`` a SQLAlchemy error
    wraps (a full disk seen by SQLite arrives as MLflow's error around SQLAlchemy's around
    ``sqlite3``'s), each once."""
    out: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop(0)
        if current is None or any(current is seen for seen in out):
            continue
        out.append(current)
        orig = getattr(current, "orig", None)
        todo.extend([current.__cause__, current.__context__, orig if isinstance(orig, BaseException) else None])
    return out


#: How SQLite (``SQLITE_FULL``) and the C library say ENOSPC in an error's text, where the error is
#: no ``OSError`` (``sqlite3.OperationalError`` wrapped by SQLAlchemy, wrapped by MLflow).
_FULL_WORDS = ("database or disk is full", "no space left on device")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` or anything in its :func:`chain` is a full disk: an ``OSError`` with
    ``ENOSPC``, or SQLite's ``database or disk is full`` however deep it was wrapped."""
    return any((isinstance(e, OSError) and e.errno == errno.ENOSPC)
               or any(word in str(e).lower() for word in _FULL_WORDS) for e in chain(exc))
