"""What every ``python -m autotune.*`` command shares: one table of exit codes, and ``--version``.

| code | meaning |
|---|---|
| 0 | it ran and has a usable result (a winner, a measured trial, a ranking, a written export) |
| 1 | it ran, but nothing usable came of it (every trial failed, nothing to export) |
| 2 | bad input: a space file, a flag, a path; nothing was run |
| 130 | interrupted (SIGINT); what was done is kept |
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import signal
import textwrap
from collections.abc import Sequence

OK = 0
NO_RESULT = 1
BAD_INPUT = 2
INTERRUPTED = 130

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


def interruptible() -> None:
    """Make SIGINT raise KeyboardInterrupt in this process, whatever the parent left.

    A process started with SIGINT ignored (a shell script's background job: ``cmd &``) keeps it
    ignored across exec, so an explicit ``kill -INT`` from whoever supervises it (a plan's
    deadline, a test) would do nothing, and the command would run on to its end. Every autotune
    command promises exit 130 on SIGINT with its workers stopped; this keeps that promise.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


def command_parser(prog: str, description: str, *, examples: Sequence[str] = ()) -> argparse.ArgumentParser:
    """An autotune command's parser: ``description``'s first paragraph as plain text, the
    ``examples`` as its epilog, and ``--version``."""
    epilog = ("examples:\n" + "\n".join(f"  {e}" for e in examples)) if examples else None
    # Raw, so that the examples keep their lines; the description is wrapped here instead.
    text = textwrap.fill(" ".join(plain(description.split("\n\n")[0]).split()), width=88)
    parser = argparse.ArgumentParser(prog=prog, description=text, epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_version(parser)


__all__ = ["BAD_INPUT", "INTERRUPTED", "NO_RESULT", "OK", "add_version", "command_parser", "interruptible", "plain",
           "version_text"]
