"""What every ``python -m autotune.*`` command shares: one table of exit codes, one output convention,
and ``--version``.

Output (:func:`add_output`, :func:`emit`; ``--help`` of every command shows it):

- the result goes to stdout as text a person reads;
- ``--json`` puts it on stdout as one JSON document instead (one line), for scripts;
- ``-o FILE`` (``--output FILE``) writes the result (the text, or the JSON with ``--json``, indented)
  to FILE instead, and stdout stays empty; stderr says where it went;
- progress, warnings and errors go to stderr, whatever the flags.

Flags of earlier releases keep working for the scripts that use them (``search --summary-json
FILE`` and ``probe --out FILE``: stdout as without them, and the JSON record in FILE as well).

| code | meaning |
|---|---|
| 0 | it ran and has a usable result (a winner, a measured trial, a ranking, a written export) |
| 1 | it ran, but nothing usable came of it (every trial failed, nothing to export) |
| 2 | bad input: a space file, a flag, a path; nothing was run |
| 130 | interrupted (SIGINT, Ctrl-C); what was done is kept, workers stopped; a search resumes with --resume |
| 143 | terminated (SIGTERM: Slurm, Kubernetes, ``timeout``); the same stop as 130 |
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import signal
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, Protocol

from autotune.errors import ConfigError
from autotune.flag_types import (
    MAX_COUNT,
    MAX_SEED,
    float_in,
    int_in,
    int_list,
    non_negative_int,
    port,
    positive_float,
    positive_int,
    seed,
)

OK = 0
NO_RESULT = 1
BAD_INPUT = 2
INTERRUPTED = 130
TERMINATED = 143

#: Packages whose installed versions ``--version`` and the MLflow runs report, beside autotune's,
#: each with the distributions that provide it: a slim install (the GPU kit) has mlflow-skinny only.
_VERSIONED = {"ray": ("ray",), "optuna": ("optuna",), "mlflow": ("mlflow", "mlflow-skinny"),
              "sglang": ("sglang",)}


def versions() -> dict[str, str]:
    """autotune's version and the installed ones of the packages a search depends on (``not
    installed`` if absent)."""
    # autotune's own from the package, not from distribution metadata: the distribution is named
    # autotune-sglang (PyPI's "autotune" is another project, whose metadata must never be read as
    # ours), and a source checkout run with PYTHONPATH has no metadata at all.
    from autotune import __version__

    out = {"autotune": __version__}
    for name, distributions in _VERSIONED.items():
        out[name] = "not installed"
        for dist in distributions:
            try:
                out[name] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def version_text() -> str:
    """``autotune X (ray Y, optuna Z, mlflow W, sglang V)``: the versions MLflow runs record too."""
    from autotune import __version__

    others = ", ".join(f"{k} {v}" for k, v in versions().items() if k != "autotune")
    return f"autotune {__version__} ({others})"


class _Version(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS,
                         help="print autotune's version and those of Ray, Optuna, MLflow and SGLang")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit(OK)


#: The stop signals this process received, in order (see :func:`interruptible`).
_STOPS: list[int] = []


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (Slurm, Kubernetes, ``timeout``) takes SIGINT's path: whatever handles SIGINT
    now (Python's ``KeyboardInterrupt``, or Ray Tune's graceful stop while a search's trials run)
    handles it, so every command stops the same way for both; only the exit code differs."""
    _STOPS.append(signal.SIGTERM)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:  # SIGINT ignored or left to the system: stop here all the same
        raise KeyboardInterrupt


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _STOPS.append(signal.SIGINT)
    raise KeyboardInterrupt


def interruptible() -> None:
    """One signal path for SIGINT and SIGTERM: both raise ``KeyboardInterrupt`` in this process.

    A process started with SIGINT ignored (a shell script's background job: ``cmd &``) keeps it
    ignored across exec, so an explicit ``kill -INT`` from whoever supervises it (a plan's
    deadline, a test) would do nothing, and the command would run on to its end. SIGTERM, what a
    scheduler sends, would kill it without a word (or, once Ray is up, with Ray's crash dump).
    Every autotune command promises exit 130 on SIGINT and 143 on SIGTERM
    (:func:`interrupted_code`) with its workers stopped; this keeps that promise. Call it again
    after anything that installs its own handlers (``ray.init``).
    """
    signal.signal(signal.SIGINT, _on_sigint)
    signal.signal(signal.SIGTERM, _on_sigterm)


def note_stop(signum: int) -> None:
    """Record a stop signal that reached this process by another road (Ray's own SIGTERM handler,
    active while ``ray.init`` runs, raises ``SystemExit(15)``)."""
    _STOPS.append(signum)


def interrupted_code() -> int:
    """The exit code of a command that was stopped: :data:`TERMINATED` if a SIGTERM came, else
    :data:`INTERRUPTED`."""
    return TERMINATED if signal.SIGTERM in _STOPS else INTERRUPTED


def stopped_code() -> int:
    """The exit code of a command that caught its stop (``KeyboardInterrupt``): every such
    command returns this, never :func:`interrupted_code` alone.

    CPython marks a ``KeyboardInterrupt`` that leaves any ``exec()`` of a string as unhandled, even
    when it is caught later, and then ends the interpreter with SIGINT (exit -2, not 130). A stop
    that lands in a dataclass's generated methods during a lazy import does exactly that. Each
    ``exec()`` of a string clears the mark as it starts, so an empty one clears it here.
    """
    exec("", {})  # noqa: S102 - an empty string, run only to clear that mark
    return interrupted_code()


def run_main(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a command's ``main`` the way every entry point does: stop signals take one path
    (:func:`interruptible`), and a stop that reaches the top is one line and its exit code, never a
    ``KeyboardInterrupt`` traceback (each command stops its own workers on the way up)."""
    interruptible()
    try:
        code = main(argv)
    except KeyboardInterrupt:
        what = "terminated (SIGTERM)" if interrupted_code() == TERMINATED else "interrupted (SIGINT)"
        print(f"{what}: stopped", file=sys.stderr, flush=True)
        return stopped_code()
    return OK if code is None else int(code)


def check_writable(folder: str | Path, *, what: str) -> Path:
    """``folder`` made if missing and checked writable, before a command starts any work: the one
    place that turns a read-only file system or a folder without permission into one line.

    Args:
        folder: The folder the command will write to (``mlruns/``).
        what: What goes there, for the message ("the search's state and its MLflow store").

    Returns:
        The folder, resolved.

    Raises:
        ConfigError: It cannot be made, or a file cannot be written in it (read-only, no
            permission, no space); the message names the folder and the system's reason.
    """

    path = Path(folder).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".writable-"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write {what} in {path}: {exc.strerror or exc}; run from a folder you can "
                          "write to, or free space there") from None
    return path


def add_version(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` a ``--version`` flag (versions are read only when it is asked for)."""
    parser.add_argument("--version", action=_Version)
    return parser


_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
_LEAD = re.compile(r"\A``[^`]+``: ")


def plain(text: str) -> str:
    """reStructuredText from a docstring as a terminal should show it: roles and literals without
    their markup (``:func:`~a.b``` -> ``b``), and no leading ````prog````: (``--help`` prints prog)."""
    text = _LEAD.sub("", text.strip())
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    text = text.replace("``", "").replace("::", ":")
    return text[:1].upper() + text[1:]


def command_parser(prog: str, description: str, *, examples: Sequence[str] = ()) -> CommandParser:
    """An autotune command's parser: ``description``'s first paragraph as plain text, the
    ``examples`` as its epilog, and ``--version``.

    Args:
        prog: The command as the user ran it (``autotune export``, ``python -m autotune.export``):
            usage lines and examples name it so.
        description: The command's docstring (its first paragraph is shown).
        examples: Command lines; ``{prog}`` in one stands for ``prog``.
    """
    epilog = ("examples:\n" + "\n".join(f"  {e.replace('{prog}', prog)}" for e in examples)) if examples else None
    # Raw, so that the examples keep their lines; the description is wrapped here instead.
    text = textwrap.fill(" ".join(plain(description.split("\n\n")[0]).split()), width=88)
    parser = CommandParser(prog=prog, description=text, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    add_version(parser)
    return parser


def unwritable(text: str) -> str | None:
    """Why a command could not write its result to the file ``text``, or None when it can.

    Its folder must exist and be writable, and the path must not be a folder.
    """
    path = Path(text).expanduser()
    folder = path.parent
    if path.is_dir():
        return f"{text} is a folder; name a file (in it, or elsewhere)"
    if not folder.is_dir():
        return (f"cannot write {text}: the folder {folder} does not exist; create it first, or name a "
                "file in a folder that exists")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return (f"cannot write {text}: {'the file' if path.exists() else f'the folder {folder}'} is not "
                "writable; name a file you can write")
    return None


class CommandParser(argparse.ArgumentParser):
    """An autotune command's parser: argparse's, plus the files the command will write.

    :meth:`parse_command` checks them before the command runs: a command that finds out only when
    its result is ready (a search, after an hour) has run for nothing, and exit 2 promises that
    nothing was run. :meth:`parse_args` stays argparse's, so that a command line written for
    another machine (the ``deploy/`` recipes) can be checked for its flags alone.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.output_files: list[argparse.Action] = []

    def writes(self, action: argparse.Action) -> argparse.Action:
        """Mark ``action`` (a flag that names a file) as a file the command writes."""
        self.output_files.append(action)
        return action

    def error(self, message: str) -> NoReturn:
        """A usage error as one line on stderr, exit 2: what is wrong and where the flags are
        listed (argparse's own prints the whole usage block first, which buries the line)."""
        self.exit(BAD_INPUT, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")

    def parse_command(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """:meth:`parse_args`, then every file the command writes checked (:func:`unwritable`):
        argparse's usage error, exit 2, when one cannot be written."""
        namespace = self.parse_args(argv)
        for action in self.output_files:
            value = getattr(namespace, action.dest, None)
            why = unwritable(str(value)) if value is not None else None
            if why is not None:
                self.error(f"argument {'/'.join(action.option_strings)}: {why}")
        return namespace


#: The output convention and exit codes, as every command's ``--help`` shows them.
CONVENTION = ("The result goes to stdout as text; --json prints it as one JSON document instead; -o FILE "
              "writes it (text, or JSON with --json) to FILE and leaves stdout empty. Progress, warnings and "
              "errors go to stderr. Exit codes: 0 ok, 1 ran but no usable result, 2 bad input, 130 interrupted "
              "(SIGINT), 143 terminated (SIGTERM).")


def add_output(parser: CommandParser, *, record: str, json_also: str | None = None) -> None:
    """Give ``parser`` the output flags of every command: ``--json`` and ``-o/--output FILE``.

    FILE is checked while parsing (:meth:`CommandParser.parse_command`): a folder that does not
    exist or cannot be written is exit 2 before the command runs.

    Args:
        parser: The command's parser; the flags go into an ``output`` group that shows
            :data:`CONVENTION`.
        record: What the JSON document holds, for ``--json``'s help ("the trial's record").
        json_also: An earlier release's flag that wrote the JSON record to a file while the text
            still went to stdout (``--summary-json``); kept working as it did, for scripts.
    """
    group = parser.add_argument_group("output", textwrap.fill(CONVENTION, width=88))
    group.add_argument("--json", action="store_true", help=f"print {record} as one JSON document instead of text")
    parser.writes(group.add_argument("-o", "--output", metavar="FILE",
                                     help="write the result to FILE instead of stdout"))
    if json_also:
        parser.writes(group.add_argument(
            json_also, dest="json_also", metavar="FILE",
            help="earlier spelling, kept for scripts: stdout as without it, and the JSON record to FILE as well "
                 "(--json -o FILE writes only the JSON)"))


def to_json(record: Any, *, indent: int | None = None) -> str:
    """``record`` as the JSON every command writes: values JSON lacks (paths, times) as strings."""
    return json.dumps(record, indent=indent, default=str) + "\n"


class OutputArgs(Protocol):
    """What :func:`emit` reads of a command's arguments: the flags :func:`add_output` gives (a
    command's ``XArgs`` dataclass, or an :class:`argparse.Namespace`)."""

    @property
    def json(self) -> bool: ...

    @property
    def output(self) -> str | None: ...


def emit(args: OutputArgs, *, text: str, record: Any, code: int = OK, executable: bool = False,
         what: str = "the result") -> int:
    """Write a command's result as :data:`CONVENTION` says, from the flags :func:`add_output` gave.

    Args:
        args: The command's arguments (``json``, ``output`` and, where the command has it,
            ``json_also``).
        text: The result for a person.
        record: The same result for scripts (anything :func:`json.dumps` takes, else as strings).
        code: The command's exit code when everything is written.
        executable: The text is a script: a FILE that gets it is made executable.
        what: The text's name in the ``wrote ... to FILE`` line on stderr.

    Returns:
        ``code``; or :data:`BAD_INPUT` when a file could not be written (said on stderr). What was
        meant for that file then goes to stdout instead, so that nothing measured is lost: the
        result meant for ``-o FILE``, or the JSON record meant for ``json_also``'s FILE.
    """
    stdout = to_json(record) if args.json else (text if text.endswith("\n") or not text else text + "\n")
    written = True
    if args.output:
        if _write(Path(args.output), to_json(record, indent=2) if args.json else stdout,
                  executable=executable and not args.json):
            print(f"wrote {'the JSON record' if args.json else what} to {args.output}", file=sys.stderr)
            stdout = ""
        else:
            written = False
    also = getattr(args, "json_also", None)
    if also and not _write(Path(also), to_json(record, indent=2), executable=False):
        stdout, written = to_json(record), False
    sys.stdout.write(stdout)
    sys.stdout.flush()
    return code if written else BAD_INPUT


def _write(path: Path, content: str, *, executable: bool) -> bool:
    """``content`` into ``path``; False (said on stderr) when it cannot be written."""
    try:
        path.write_text(content)
        if executable:
            path.chmod(path.stat().st_mode | 0o111)
    except OSError as exc:
        print(f"error: cannot write {path}: {exc}", file=sys.stderr)
        return False
    return True


__all__ = ["BAD_INPUT", "CONVENTION", "CommandParser", "INTERRUPTED", "MAX_COUNT", "MAX_SEED", "NO_RESULT", "OK",
           "TERMINATED", "OutputArgs", "add_output", "add_version", "check_writable", "command_parser", "emit",
           "float_in", "int_in", "int_list", "interrupted_code", "interruptible", "non_negative_int", "note_stop",
           "plain", "port", "positive_float", "positive_int", "run_main", "seed", "to_json", "unwritable",
           "version_text", "versions"]
