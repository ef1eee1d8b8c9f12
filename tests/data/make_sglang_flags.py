"""Write an SGLang version's ``launch_server`` flag table as JSON, from that version's own parser.

The table lets the tests build a real argparse parser for an SGLang that is not installed (CI has
0.5.23 only). See ``tests/data/README.md`` for how ``sglang-0.5.17-flags.json`` was made. The
format is written by :func:`autotune.sglang.flags.write_flag_table` (the test suite's session table
of the installed SGLang uses it too).

Usage::

    python tests/data/make_sglang_flags.py --site DIR [--site DIR ...] [--stub MODULE ...] --out FILE

``--site`` directories go first on ``sys.path`` (the unpacked SGLang wheel, then any pure-Python
dependencies it needs to import on a CPU). ``--stub`` names top-level modules that are imported
only for things the parser never uses (0.5.17 imports ``torchvision.io.decode_jpeg`` and
``sentencepiece`` at module level); each becomes a module whose attributes are inert classes.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import sys
import types
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]


class _Inert(type):
    """A class whose every attribute is another inert class and that subscripts to itself."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _inert(name)

    def __getitem__(cls, item: Any) -> Any:
        return cls


def _inert(name: str) -> type:
    return _Inert(name, (), {"__init__": lambda self, *a, **k: None})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _inert(name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the stubbed top-level modules (and any submodule of them)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        # Libraries that check versions (transformers checks torchvision's) read these.
        module.__version__ = "0.0.0+stub"
        module.__file__ = f"<stub {spec.name}>"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", action="append", default=[], help="directory to put first on sys.path")
    parser.add_argument("--stub", action="append", default=[], help="top-level module to stub out")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    sys.path[:0] = [*args.site, str(_REPO)]
    if args.stub:
        sys.meta_path.insert(0, _StubFinder(set(args.stub)))

    import sglang
    from sglang.srt.server_args import ServerArgs

    from autotune.sglang import flags as sglang_flags
    from autotune.sglang import parser_tables

    real = argparse.ArgumentParser()
    ServerArgs.add_cli_args(real)
    flags = sglang_flags.FlagSet(real, version=sglang.__version__, origin="make_sglang_flags.py",
                                 config_keys=parser_tables.config_keys_of(real))
    count = sglang_flags.write_flag_table(flags, args.out,
                                          generated_by="tests/data/make_sglang_flags.py (see tests/data/README.md)")
    print(f"wrote {count} flags of SGLang {sglang.__version__} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
