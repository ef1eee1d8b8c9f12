"""The example spaces shipped inside the package, and ``--space NAME`` for them.

The YAML files live in ``autotune/space/examples/`` (the repository's ``search_spaces/`` is a
link to that folder), so a wheel carries them and ``--space demo`` works without a checkout.
:func:`resolve_space` is the one place a ``--space`` value becomes a file: every command reaches
it through :func:`autotune.space.search_space.load_space`, and the search driver calls it before
handing the absolute path to its Ray workers.

``autotune spaces`` (:mod:`autotune.cli.spaces`) lists them; ``autotune spaces --path NAME``
prints one's file, to copy and edit.
"""

from __future__ import annotations

import difflib
import functools
import os
import sys
from pathlib import Path

import yaml

from autotune.errors import ConfigError

EXAMPLES = Path(__file__).resolve().with_name("examples")
_SUFFIXES = (".yaml", ".yml")


@functools.cache
def packaged() -> dict[str, tuple[Path, str]]:
    """Packaged space name -> (its file, its description), sorted by name.

    Only files with ``parameters`` count: the folder also holds an NCCL candidates file, which
    ``--candidates`` takes and no search could run.
    """
    out: dict[str, tuple[Path, str]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue  # a broken example still fails loudly when named as a file
        if isinstance(data, dict) and "parameters" in data:
            out[path.stem] = (path, str(data.get("description") or "").strip())
    return out


#: Packaged spaces named so are the sampler benchmark's landscapes (``python -m autotune.bench_search``),
#: kept as benchmarked: listed apart by ``autotune spaces``, not starting points for tuning.
BENCHMARK_PREFIX = "bench-"


def is_benchmark(name: str) -> bool:
    """Whether packaged space ``name`` is one of the sampler benchmark's landscapes."""
    return name.startswith(BENCHMARK_PREFIX)


def names() -> list[str]:
    """The packaged space names."""
    return list(packaged())


def bare_name(text: str) -> str | None:
    """The packaged name ``text`` would mean, or None when it is written as a path."""
    if not text or os.sep in text or "/" in text or (os.altsep and os.altsep in text):
        return None
    for suffix in _SUFFIXES:
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def resolve_space(space: str | os.PathLike[str]) -> Path:
    """The file a ``--space`` value means: the file itself when it exists, else the packaged space
    of that name (``demo`` or ``demo.yaml``).

    A file that exists always wins, so a local ``demo.yaml`` is never shadowed by the example.

    Raises:
        ConfigError: Neither a file nor a packaged name; the message lists the packaged names.
    """
    path = Path(space).expanduser()
    if path.exists():
        return path
    name = bare_name(str(space))
    if name is not None and name in packaged():
        return packaged()[name][0]
    what = "no such file"
    if name is not None:
        close = difflib.get_close_matches(name, names(), n=1)
        what += ", and no packaged space of that name" + (f" (did you mean {close[0]!r}?)" if close else "")
    raise ConfigError(f"cannot read the search space: {what}; give a space YAML file or one of "
                      f"the packaged spaces: {', '.join(names())} (autotune spaces describes "
                      "them)", file=str(space))


#: The ``--space`` help every command shows.
SPACE_HELP = "search space: a YAML file, or the name of a packaged one (autotune spaces lists them)"


if __name__ == "__main__":
    import functools

    from autotune import command_line as cli
    from autotune.cli.spaces import main

    sys.exit(cli.run_main(functools.partial(main, prog="python -m autotune.space.packaged")))
