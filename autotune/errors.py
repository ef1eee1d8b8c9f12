"""One exception tree for the whole package.

Config errors are the user's to fix and carry where they came from. Server errors separate a
server that died from one that never answered, because the fixes differ (a bad flag or an OOM
versus a slow weight load).
"""

from __future__ import annotations


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
