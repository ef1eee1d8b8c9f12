"""autotune's commands: one module per command, each an ``XArgs`` dataclass and ``main(argv)``.

A command module parses its command line into its frozen, keyword-only ``XArgs`` (the types are the
contract between the command line and the library) and hands them to the library functions that
do the work; nothing below this package defines a ``main`` (``tests/unit/test_layout.py``). The package
sits at the top of the import order, since a command may use any package.

What every command shares (exit codes, the output convention, ``--version``, the parser) lives in
the foundation module :mod:`autotune.command_line`, which lower packages import; it is re-exported
here so that ``from autotune import cli`` and ``cli.emit`` keep working for scripts and tests.
"""

from __future__ import annotations

from autotune.command_line import (
    BAD_INPUT,
    CONVENTION,
    INTERRUPTED,
    MAX_COUNT,
    MAX_SEED,
    NO_RESULT,
    OK,
    TERMINATED,
    CommandParser,
    OutputArgs,
    add_output,
    add_version,
    command_parser,
    emit,
    float_in,
    int_in,
    int_list,
    interrupted_code,
    interruptible,
    non_negative_int,
    plain,
    port,
    positive_float,
    positive_int,
    run_main,
    seed,
    to_json,
    unwritable,
    version_text,
    versions,
)

__all__ = ["BAD_INPUT", "CONVENTION", "CommandParser", "INTERRUPTED", "MAX_COUNT", "MAX_SEED", "NO_RESULT", "OK",
           "TERMINATED", "OutputArgs", "add_output", "add_version", "command_parser", "emit", "float_in", "int_in",
           "int_list", "interrupted_code", "interruptible", "non_negative_int", "plain", "port", "positive_float",
           "positive_int", "run_main", "seed", "to_json", "unwritable", "version_text", "versions"]
