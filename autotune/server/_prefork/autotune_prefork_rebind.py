"""A variable bound at import, given its own value again in each forked child (``measure.prefork``).

SGLang 0.5.17's ``sglang.srt.speculative.spec_utils`` keeps ``SGLANG_SIMULATE_ACC_LEN`` as a module
constant and as a default argument when imported, and a space with synthetic acceptance sets it per
config: a child forked from a fork server that imported it in another config's environment would
keep that config's value. Spawning every such child costs the fork server's whole gain.

For each variable the backend names (:attr:`autotune.backend.Backend.prefork_rebind`), with the
module that binds it, the global it binds and the reader that parses it:

- **In the fork server**, the imports run with the variable set to a probe value, so that the object
  the reader returned is held by nothing but the bindings made from it. Afterwards every module
  global and every function default (positional or keyword-only) that holds that very object is a
  site. The rebind is refused, and the children spawned, where the module was not imported, its
  global is not the probe's value, another module read the variable while importing, or a container
  other than a module's globals or a function's defaults holds the object (a list, a class, an
  instance, a closure).
- **In a forked child**, once it has the launcher's environment, the reader is asked again and each
  site gets what it returns: what the child's own import would have bound.

What identity cannot see is a value derived from the variable at import (``X = LEN > 0``). The
backend names a variable only where the module's source has none: its docstring says what was read.
"""

from __future__ import annotations

import dis
import gc
import importlib
import os
import sys
import types
from typing import Any

#: Per variable: the object the reader returned in the fork server and where it is bound. Set in the
#: fork server; a forked child inherits it.
_SITES: dict[str, tuple[Any, list[tuple[str, Any, Any]], str]] = {}


def _resolve(path: str) -> Any:
    """``"package.module:attr.attr"`` -> that object (the module imported if it is not yet)."""
    module, _, attrs = path.partition(":")
    obj: Any = importlib.import_module(module)
    for attr in filter(None, attrs.split(".")):
        obj = getattr(obj, attr)
    return obj


#: The helpers through which a module that iterates the environment reads each value (``items()``,
#: ``values()``, ``copy()``): such a read is the scan's, which ``autotune_prefork`` judges by the
#: prefixes each scanning module keeps, not a read of this variable.
_SCANS = frozenset({"__iter__", "copy"})


class Readers:
    """Who read the watched variables while the fork server imported: the module of the first
    frame outside ``helpers`` (the modules between a read of ``os.environ`` and the code that asked
    for it) and the variable's own reader module (a read within a scan of the whole environment is
    not counted: see ``_SCANS``)."""

    def __init__(self, rebind: dict[str, dict[str, str]], scans: dict[str, list[str]], *,
                 helpers: frozenset[str]) -> None:
        self.helpers = helpers
        #: Per watched variable, the modules whose frames are passed over: the helpers and its reader's.
        self.passed = {name: helpers | {spec["reader"].partition(":")[0]} for name, spec in rebind.items()}
        self.scans = {module: tuple(prefixes) for module, prefixes in scans.items()}
        self.by: dict[str, set[str]] = {name: set() for name in rebind}

    def saw(self, key: str, iterated_by: set[str]) -> None:
        """Called by the fork server's ``os.environ`` on every read of ``key``; ``iterated_by``: the
        modules that have iterated it so far."""
        passed = self.passed.get(key)
        if passed is None:
            return
        frame = sys._getframe(2)
        direct = True
        while frame.f_back is not None and frame.f_globals.get("__name__") in passed:
            if frame.f_globals.get("__name__") in self.helpers and frame.f_code.co_name in _SCANS:
                return
            frame, direct = frame.f_back, False
        module = frame.f_globals.get("__name__") or "?"
        if direct and module in iterated_by and _bulk(frame) and not key.startswith(self.scans.get(module, ())):
            return  # `dict(os.environ, ...)`, `{**os.environ}`: C reads every value for a scan, as above
        self.by[key].add(module)


def _bulk(frame: types.FrameType) -> bool:
    """Whether ``frame`` is inside a call or a dict merge (C code reading the mapping for it), not
    a subscript of its own (``os.environ[KEY]``)."""
    op = dis.opname[frame.f_code.co_code[frame.f_lasti]]
    return op.startswith(("CALL", "PRECALL", "DICT_UPDATE", "DICT_MERGE"))


def set_probes(rebind: dict[str, dict[str, str]]) -> dict[str, str | None]:
    """Each variable set to its probe value for the imports; returns what they were."""
    before = {name: os.environ.get(name) for name in rebind}
    for name, spec in rebind.items():
        os.environ[name] = spec["probe"]
    return before


def restore(before: dict[str, str | None]) -> None:
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _function_sites(old: Any) -> list[tuple[str, Any, Any]]:
    sites: list[tuple[str, Any, Any]] = []
    for obj in gc.get_objects():  # every function is tracked by the collector
        if not isinstance(obj, types.FunctionType):
            continue
        for value in obj.__defaults__ or ():
            if value is old:
                sites.append(("defaults", obj, None))
                break
        for key, value in (obj.__kwdefaults__ or {}).items():
            if value is old:
                sites.append(("kwdefaults", obj, key))
    return sites


def find(rebind: dict[str, dict[str, str]], readers: Readers) -> dict[str, dict[str, Any]]:
    """In the fork server, after its imports (the probes still set): each variable's sites, kept
    for the children, and what the status says of it (``ok``, ``why_not``, ``sites``)."""
    said: dict[str, dict[str, Any]] = {}
    _SITES.clear()
    for name, spec in rebind.items():
        why, old, sites = _find_one(name, spec, readers)
        if why is None:
            _SITES[name] = (old, sites, spec["reader"])
        said[name] = {"ok": why is None, "why_not": why, "sites": [_where(s) for s in sites]}
    return said


def _find_one(name: str, spec: dict[str, str],
              readers: Readers) -> tuple[str | None, Any, list[tuple[str, Any, Any]]]:
    """Why the variable cannot be rebound (None: it can), the object its import bound, its sites."""
    module = sys.modules.get(spec["module"])
    if module is None:
        return f"{spec['module']} was not imported", None, []
    others = sorted(readers.by[name] - {spec["module"]})
    if others:
        return f"{', '.join(others)} read it while importing too", None, []
    old = getattr(module, spec["global"], None)
    try:
        probe = _resolve(spec["reader"])()
    except Exception as exc:  # noqa: BLE001 (whatever the reader raises, the rebind is off)
        return f"its reader failed: {type(exc).__name__}: {exc}", None, []
    if old is None or type(old) is not type(probe) or old != probe:
        return f"{spec['module']}.{spec['global']} is {old!r}, not the probe's {probe!r}", None, []
    del probe
    by_function = _function_sites(old)
    defaults = {id(fn.__defaults__ if kind == "defaults" else fn.__kwdefaults__) for kind, fn, _ in by_function}
    modules = {id(vars(m)): m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    sites: list[tuple[str, Any, Any]] = []
    here = sys._getframe()
    for holder in gc.get_referrers(old):
        if holder is here or id(holder) in defaults:
            continue  # this function's own `old` (a suspended generator's frame is refused); a default
        owner = modules.get(id(holder))
        if owner is None:
            other = " other than a function's defaults" if isinstance(holder, (tuple, dict)) else ""
            return f"a {type(holder).__name__}{other} holds its value", None, []
        for key, value in list(vars(owner).items()):  # a loop: a comprehension would hold `old` in a cell
            if value is old:
                sites.append(("global", owner, key))
    return None, old, sites + by_function


def _where(site: tuple[str, Any, Any]) -> str:
    kind, holder, key = site
    if kind == "global":
        return f"{holder.__name__}.{key}"
    return f"{holder.__module__}.{holder.__qualname__} ({'default' if kind == 'defaults' else key})"


def rebind() -> list[str]:
    """In a forked child with its own environment: each site the fork server found given the
    reader's value now; returns one line per variable for the server log."""
    lines = []
    for name, (old, sites, reader) in _SITES.items():
        new = _resolve(reader)()
        for kind, holder, key in sites:
            if kind == "global":
                setattr(holder, key, new)
            elif kind == "defaults":
                holder.__defaults__ = tuple(new if d is old else d for d in holder.__defaults__)
            else:
                holder.__kwdefaults__ = {**holder.__kwdefaults__, key: new}
        lines.append(f"{name}: {old!r} (the fork server's probe) -> {new!r} in {len(sites)} place(s): "
                     + ", ".join(_where(s) for s in sites))
    return lines
