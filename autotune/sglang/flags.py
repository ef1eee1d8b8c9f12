"""Which SGLang flags exist, under the SGLang actually in use, and how names map to them.

Flags come and go between SGLang releases: in 0.5.17 ``--cuda-graph-max-bs`` is a deprecated alias
of ``--cuda-graph-max-bs-decode``; in 0.5.23 the alias is gone and ``--cuda-graph-max-bs`` is an
ambiguous prefix of ``--cuda-graph-max-bs-decode`` and ``--cuda-graph-max-bs-prefill``. Nothing
here lists such differences: a :class:`FlagSet` reads them from a parser's own actions.

Where the flags come from (:func:`active_flags`), first match wins:

1. a :func:`using_flags` block (tests, tools);
2. ``AUTOTUNE_SGLANG_FLAG_TABLE=<json>``: a flag table written by :func:`write_flag_table`
   (``tests/data/make_sglang_flags.py`` for a release that is not installed; the test suite for the
   installed one, so its subprocesses skip SGLang's import), so an emulator subprocess can follow
   the same version;
3. the installed SGLang's parser (``ServerArgs.add_cli_args``), when it imports;
4. autotune's built-in twin of SGLang 0.5.23 (:mod:`autotune.sglang._parser_twin`).

Name resolution (:meth:`FlagSet.resolve`), for a ``ServerArgs``-style name such as
``cuda_graph_max_bs``:

* the exact option string ``--cuda-graph-max-bs`` wins; if its action is a deprecated alias whose
  ``new_flag`` is another option storing into the same field, the name is rewritten to that
  option and keyed by the field (``cuda_graph_max_bs_decode``);
* else a field (argparse dest) of that name, under the flag that stores into it
  (``fp8_gemm_runner_backend`` -> ``--fp8-gemm-backend``);
* anything else is an error naming the candidates and the SGLang version: abbreviations are not
  accepted even where argparse would take them, since the next release may make them ambiguous.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, LaunchArgsError
from autotune.sglang import _parser_twin as builtin
from autotune.sglang import parser_tables

FLAG_TABLE_ENV = "AUTOTUNE_SGLANG_FLAG_TABLE"
"""Environment variable naming a JSON flag table to use instead of the installed SGLang."""

_ARG_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")


class ServerArgNameError(LaunchArgsError, ValueError):
    """A server-arg name the SGLang in use has no flag for (ambiguous, unknown, malformed).

    Also a ValueError: code that rebuilds launches from records (and caught ValueError for a bad
    name before names were resolved) keeps working.
    """


@dataclass(frozen=True)
class ArgRef:
    """A server-arg name resolved against one SGLang's parser.

    Attributes:
        name: The name as given (``cuda_graph_max_bs``).
        key: The name to key it by: the field when the flag is the field's own
            (``cuda_graph_max_bs_decode``), else the given name.
        flag: The option string to render (``--cuda-graph-max-bs-decode``).
        action: The argparse action of ``flag``.
        alias: The deprecated spelling that was rewritten, if any (``--cuda-graph-max-bs``).
    """

    name: str
    key: str
    flag: str
    action: argparse.Action
    alias: str | None = None

    @property
    def switch(self) -> bool:
        """A flag that takes no value (store_true or store_const)."""
        return self.action.nargs == 0

    @property
    def boolean_pair(self) -> bool:
        """A ``--x/--no-x`` pair."""
        return isinstance(self.action, argparse.BooleanOptionalAction)


def _is_deprecated(action: argparse.Action) -> bool:
    return isinstance(getattr(action, "new_flag", None), str) or type(action).__name__.startswith("Deprecated")


class FlagSet:
    """The options of one SGLang parser, indexed for resolution and rendering.

    Args:
        parser: A parser filled by ``ServerArgs.add_cli_args`` (or a rebuilt twin of one).
        version: The SGLang version it describes.
        origin: Where it came from, for messages (``installed SGLang``, ``flag table <file>``).
        config_keys: How SGLang's ``--config`` loader reads YAML keys:
            ``{"store_true": [key, ...], "unsupported": {key: action class}}``; None derives it
            from each action's ``config_kind`` attribute (the built-in twin's flag table).
    """

    def __init__(self, parser: argparse.ArgumentParser, *, version: str, origin: str,
                 config_keys: Mapping[str, Any] | None = None) -> None:
        self.parser = parser
        self.version = version
        self.origin = origin
        self.actions: tuple[argparse.Action, ...] = tuple(
            a for a in parser._actions
            if a.option_strings and a.dest != "config" and not isinstance(a, argparse._HelpAction))
        self._by_option: dict[str, argparse.Action] = {}
        self._negatives: dict[str, argparse.Action] = {}
        by_dest: dict[str, list[argparse.Action]] = {}
        for action in self.actions:
            positives = action.option_strings
            if isinstance(action, argparse.BooleanOptionalAction):
                positives = [o for o in action.option_strings if not o.startswith("--no-")]
                for o in action.option_strings:
                    if o.startswith("--no-"):
                        self._negatives[o] = action
            for option in positives:
                self._by_option[option] = action
            by_dest.setdefault(action.dest, []).append(action)
        # The flag of a field: its own spelling if one stores into it, else the first live one.
        self._by_dest: dict[str, argparse.Action] = {}
        for dest, actions in by_dest.items():
            own = "--" + dest.replace("_", "-")
            live = [a for a in actions if not _is_deprecated(a)]
            named = [a for a in live if own in a.option_strings]
            self._by_dest[dest] = (named or live or actions)[0]
        self._config_keys = config_keys

    def describe(self) -> str:
        """``SGLang 0.5.17 (flag table tests/data/...)``."""
        return f"SGLang {self.version} ({self.origin})"

    # ----------------------------------------------------------------- lookups

    def has_option(self, option: str) -> bool:
        """Whether ``option`` is an exact spelling of some flag (``--no-x`` included)."""
        return option in self._by_option or option in self._negatives

    def action_of(self, dest: str) -> argparse.Action | None:
        """The action that a field's own flag uses, or None when no flag stores into it."""
        return self._by_dest.get(dest)

    def dests(self) -> frozenset[str]:
        """Every field some flag stores into."""
        return frozenset(self._by_dest)

    @functools.cached_property
    def config_keys(self) -> tuple[frozenset[str], dict[str, str]]:
        """(store_true keys, unsupported key -> action class) of SGLang's ``--config`` loader."""
        if self._config_keys is not None:
            return (frozenset(self._config_keys.get("store_true", ())),
                    dict(self._config_keys.get("unsupported", {})))
        store_true: set[str] = set()
        supported: set[str] = set()
        unsupported: dict[str, str] = {}
        for action in self.actions:
            keys = {action.dest} | {o[2:].replace("-", "_") for o in action.option_strings}
            kind = getattr(action, "config_kind", "v")
            if kind == "t":
                store_true |= keys
                supported |= keys
            elif kind == "v":
                supported |= keys
            else:
                for key in keys:
                    unsupported.setdefault(key, kind)
        # The 0.5.23 loader's rule: a key that a supported flag also reads (a shared dest) stays usable.
        return frozenset(store_true), {k: v for k, v in unsupported.items() if k not in supported}

    def lookup(self, name: str) -> ArgRef | None:
        """:meth:`resolve` without the error: None when the name has no flag of its own."""
        option = "--" + name.replace("_", "-")
        action = self._by_option.get(option)
        alias = None
        if action is not None:
            target = getattr(action, "new_flag", None)
            new = self._by_option.get(target) if isinstance(target, str) else None
            if new is not None and new is not action and new.dest == action.dest \
                    and (new.nargs == 0) == (action.nargs == 0):
                action, alias = new, option
            if self._by_dest.get(action.dest) is action:
                return ArgRef(name, action.dest, action.option_strings[0], action, alias)
            # A spelling with its own meaning (a deprecated switch that sets another field to a
            # constant) keeps its name and its spelling.
            return ArgRef(name, name, option, action, alias)
        action = self._by_dest.get(name)
        if action is not None:
            return ArgRef(name, name, action.option_strings[0], action)
        return None

    def resolve(self, name: str) -> ArgRef:
        """The flag a server-arg name stands for under this SGLang.

        Raises:
            LaunchArgsError: For a name that is not lower_case, is an ambiguous abbreviation, or
                names no flag; the message names the candidates and the SGLang version.
        """
        if not isinstance(name, str) or not _ARG_NAME.match(name):
            raise ServerArgNameError(f"server arg {name!r} is not a ServerArgs field name (lower case, underscores)")
        ref = self.lookup(name)
        if ref is not None:
            return ref
        raise ServerArgNameError(self.unknown_message(name))

    def abbreviates(self, name: str) -> list[str]:
        """The options that ``--<name>`` abbreviates (argparse's prefix matching), sorted."""
        option = "--" + name.replace("_", "-")
        return sorted(o for o in self._by_option if o.startswith(option) and o != option)

    def unknown_message(self, name: str) -> str:
        """Why ``name`` has no flag here, with the candidates."""
        option = "--" + name.replace("_", "-")
        prefixed = self.abbreviates(name)
        if len(prefixed) > 1:
            fields = sorted({self._by_option[o].dest for o in prefixed})
            return (f"server arg {name!r} ({option}) is not a flag of {self.describe()}: it is an ambiguous "
                    f"abbreviation of {', '.join(prefixed)}; name the field instead: {', '.join(fields)}")
        if len(prefixed) == 1:
            dest = self._by_option[prefixed[0]].dest
            return (f"server arg {name!r} ({option}) is not a flag of {self.describe()}: it only abbreviates "
                    f"{prefixed[0]}; name the field {dest!r} (abbreviations break when a later SGLang "
                    "adds a flag with the same prefix)")
        close = difflib.get_close_matches(name, sorted(self._by_dest), n=3, cutoff=0.75)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"server arg {name!r} ({option}) is not a flag of {self.describe()}{hint}"


# ------------------------------------------------------------------------------------------
# Sources.
# ------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def sglang_importable() -> bool:
    """Whether ``sglang.srt.server_args`` imports here (seconds the first time, then cached)."""
    try:
        from sglang.srt.server_args import ServerArgs  # noqa: F401
    except Exception:  # any import failure means "use the built-in parser"
        return False
    return True


@functools.lru_cache(maxsize=1)
def installed_parser() -> builtin.RaisingParser:
    """SGLang's own parser, built once (it raises instead of exiting).

    Raises:
        AutotuneError: When SGLang is not importable.
    """
    if not sglang_importable():
        raise AutotuneError("SGLang is not importable here; install sglang to use its parser")
    from sglang.srt.server_args import ServerArgs

    parser = builtin.RaisingParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


@functools.lru_cache(maxsize=1)
def installed_flags() -> FlagSet:
    """The installed SGLang's flags (raises :class:`AutotuneError` without SGLang)."""
    import sglang

    parser = installed_parser()
    try:
        keys: Mapping[str, Any] = parser_tables.config_keys_of(parser)
    except Exception:  # a release without a config loader: every key is a plain value
        keys = {"store_true": [], "unsupported": {}}
    return FlagSet(parser, version=str(getattr(sglang, "__version__", "unknown")), origin="installed SGLang",
                   config_keys=keys)


@functools.lru_cache(maxsize=1)
def builtin_flags() -> FlagSet:
    """autotune's built-in twin of SGLang 0.5.23's parser."""
    return FlagSet(builtin.build_parser(), version=builtin.SGLANG_VERSION, origin="autotune's built-in twin")


@functools.lru_cache(maxsize=8)
def flags_from_table(path: str) -> FlagSet:
    """A flag table written by :func:`write_flag_table`, as a real parser.

    Raises:
        AutotuneError: An unreadable or malformed table.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = data["flags"]
        version = str(data["sglang_version"])
        config_keys = data["config_keys"]
        parser = parser_tables.parser_from_rows(rows)
    except (OSError, ValueError, KeyError, TypeError, argparse.ArgumentError) as exc:
        raise AutotuneError(f"cannot read the SGLang flag table {path}: {type(exc).__name__}: {exc}") from None
    return FlagSet(parser, version=version, origin=f"flag table {Path(path).name}", config_keys=config_keys)


def flag_table_text(flags: FlagSet, *, generated_by: str = "autotune.sglang.flags.write_flag_table") -> str:
    """``flags`` as the JSON text of a flag table (the format :func:`flags_from_table` reads).

    Args:
        flags: A real SGLang parser's flags (``installed_flags()``, or one built from a release's
            ``ServerArgs.add_cli_args`` with its ``config_keys_of``).
        generated_by: What wrote the table, recorded in it.
    """
    store_true, unsupported = flags.config_keys
    data = {
        "sglang_version": flags.version,
        "generated_by": generated_by,
        "config_keys": {"store_true": sorted(store_true), "unsupported": dict(sorted(unsupported.items()))},
        "flags": parser_tables.describe_rows(flags.parser),
    }
    text = json.dumps(data, indent=None, separators=(",", ":"))
    # One flag per line: small diffs when a table is regenerated.
    return text.replace(',"flags":[{', ',\n"flags":[\n{').replace('},{"options"', '},\n{"options"') + "\n"


def write_flag_table(flags: FlagSet, path: str | os.PathLike[str], *,
                     generated_by: str = "autotune.sglang.flags.write_flag_table") -> int:
    """Write ``flags`` as a flag table to ``path`` (see :func:`flag_table_text`).

    The one writer of the format: ``tests/data/make_sglang_flags.py`` (a release's table) and the
    test suite's session table of the installed SGLang both call it.

    Returns:
        How many flags the table holds.
    """
    Path(path).write_text(flag_table_text(flags, generated_by=generated_by), encoding="utf-8")
    return len(flags.actions)


_override: list[FlagSet] = []
_override_lock = threading.Lock()


@contextmanager
def using_flags(flags: FlagSet) -> Iterator[FlagSet]:
    """Make ``flags`` the active flag set inside the block (this process, every thread)."""
    with _override_lock:
        _override.append(flags)
    try:
        yield flags
    finally:
        with _override_lock:
            _override.remove(flags)


def active_flags() -> FlagSet:
    """The flags every launch is resolved, rendered and checked against (see the module doc)."""
    if _override:
        return _override[-1]
    table = os.environ.get(FLAG_TABLE_ENV)
    if table:
        return flags_from_table(table)
    return installed_flags() if sglang_importable() else builtin_flags()


def share_installed_flags(folder: str | os.PathLike[str]) -> Path | None:
    """Hand the installed SGLang's flags to the processes this one starts, as a flag table.

    A fresh process resolves its first flag by importing ``sglang.srt.server_args`` (16 s on the
    H200 host, once per Ray trial process: ``docs/startup.md``); with :data:`FLAG_TABLE_ENV` set it
    reads the table instead. Writes ``folder/sglang-flags-<version>.json`` and sets the variable in
    this process's environment, which the processes it starts from now on inherit.

    Returns:
        The table, or None where nothing was done: a table or a :func:`using_flags` block already
        decides, or SGLang is not installed (the built-in twin is already quick).
    """
    if os.environ.get(FLAG_TABLE_ENV) or _override or not sglang_importable():
        return None
    flags = installed_flags()
    path = Path(folder) / f"sglang-flags-{flags.version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}")
    write_flag_table(flags, part, generated_by="autotune.sglang.flags.share_installed_flags")
    os.replace(part, path)  # whole, for a concurrent search of the same name writing the same table
    os.environ[FLAG_TABLE_ENV] = str(path)
    return path


__all__ = ["ArgRef", "FLAG_TABLE_ENV", "FlagSet", "ServerArgNameError", "active_flags", "builtin_flags",
           "flag_table_text", "flags_from_table", "installed_flags", "installed_parser", "share_installed_flags",
           "sglang_importable", "using_flags", "write_flag_table"]
