"""A standby's imports from its module's main block, checked where the main block imports them.

SGLang 0.5.17's launcher imports most of its time after its main block starts: its model config
(``sglang.srt.configs.model_config``, which pulls in torch's compiler, 3.7-4.1 s on an H100) while
it handles its arguments, and its HTTP server (1.4 s) once they are handled
(``scripts/gpu/launcher_profile.py``). A standby (``autotune/server/_standby.py``) may import
those ahead too (:attr:`autotune.backend.Backend.main_block`), but a fresh launch imports them later,
after code that may change what their imports read: the environment (SGLang's argument handling
sets ``SGLANG_*`` variables) and the plugins its main block loads first. So:

- **Nothing is imported ahead where a plugin is installed** (an entry point of the groups the
  backend names): a plugin loaded before those imports may change what they do.
- **What each module's import reads is recorded** (:func:`import_ahead`): every variable read
  through ``os.environ``, given to the module whose body was executing, and every module that
  iterated the environment (which then counts as reading all of it, or the prefixes the backend
  names for it).
- **Checked where the launcher would have imported it** (:class:`Check`): from the hand-over, each
  import asking for a module imported ahead (an ``import`` statement or ``importlib.import_module``,
  its parents and ``from`` names counted) compares what the imports of that module's group (the
  main-block module that imported it, and all it imported) read with the environment now, until
  the group's own main-block module has been asked for. Variables only the server's child processes read
  (``late``, the standby's own rule) are left out. Where all agree, the module is what a fresh
  import there would have made, as far as its environment goes; where one differs, the process
  re-executes itself as the fresh launch (``os.execve``: the same pid, session, log and working
  directory, the environment of the hand-over), and its log says why.

Standard library only, loaded by its folder's path as the fork server's modules are: nothing of
autotune enters the server.
"""

from __future__ import annotations

import builtins
import fnmatch
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

TAG = "autotune standby:"
#: Written to the server log when every module imported ahead was checked where it was asked for.
CHECKED = " imported ahead from the main block, each as a fresh import there would read it: "
#: Written to the server log before the process re-executes itself as a fresh launch.
RELAUNCHED = " re-executed as a fresh launch: "
#: A module that iterated the environment and that the backend names no prefixes for: all of it.
ALL = "*"


def _importing() -> str:
    """The module whose body is executing (the innermost ``<module>`` frame)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            return str(frame.f_globals.get("__name__") or "?")
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


class _Reads(os._Environ[str]):
    """``os.environ`` over the same data, remembering which module's import read what."""

    read_by: dict[str, set[str]]
    iterated_by: set[str]

    def __getitem__(self, key: str) -> str:
        self.read_by.setdefault(_importing(), set()).add(key)
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[str]:
        self.iterated_by.add(_importing())
        return super().__iter__()


def plugins_installed(groups: Sequence[str]) -> list[str]:
    """The installed entry points of ``groups``, as ``group:name``."""
    from importlib.metadata import entry_points

    return [f"{group}:{ep.name}" for group in groups for ep in entry_points(group=group)]


def import_ahead(modules: Sequence[str], *, scans: Mapping[str, Sequence[str]],
                 failed: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Import ``modules`` in order; returns, for every module they imported, what its import read:
    ``{"read": {NAME: VALUE or None}, "prefixes": [...], "group": MODULE}`` (``prefixes`` holds
    :data:`ALL` where it iterated the environment and ``scans`` names no prefixes for it; ``group``
    is the one of ``modules`` whose import imported it). A module whose import fails is
    left to the launcher, which meets the same failure where it imports it; ``failed`` gets why,
    and what its import did import is recorded and checked as the rest."""
    seen = set(sys.modules)
    group: dict[str, str] = {}
    real = os.environ
    reads = _Reads(real._data, real.encodekey, real.decodekey,  # type: ignore[attr-defined]
                   real.encodevalue, real.decodevalue)
    reads.read_by, reads.iterated_by = {}, set()
    os.environ = reads  # noqa: B003 (to record what is read, not to change it)
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 (the launcher's own import will say it)
                if failed is not None:
                    failed.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
            for new in [m for m in list(sys.modules) if m not in seen]:
                group[new] = name
                seen.add(new)
    finally:
        os.environ = real  # noqa: B003
    plan: dict[str, dict[str, Any]] = {}
    for name, root in group.items():
        read = {k: real.get(k) for k in sorted(reads.read_by.get(name, ()))}
        prefixes = list(scans.get(name, (ALL,))) if name in reads.iterated_by else []
        plan[name] = {"read": read, "prefixes": prefixes, "group": root}
        if prefixes:
            plan[name]["env"] = {k: v for k, v in real.items() if ALL in prefixes or k.startswith(tuple(prefixes))}
    return plan


def _absolute(name: str, globals_: Mapping[str, Any] | None, level: int) -> str:
    if level == 0:
        return name
    package = (globals_ or {}).get("__package__") or ""
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


class Check:
    """Checks the modules imported ahead where the launcher asks for them (see the module's text).

    A module imported ahead is one of the main block's (a group's root) or was imported by one (its
    group). A fresh launch imports a whole group where it asks for the root, the group's modules
    with it, and any of them it asks for earlier there; so every time an import asks for a module
    of a group whose root has not been asked for yet, the group's modules are checked against the
    environment then. A group is done once its root was asked for; when all are, the hook goes.

    Args:
        plan: :func:`import_ahead`'s record.
        late: Patterns of the variables left out (read only by the server's child processes).
        relaunch: Called with the reason where a module's import read another value; it does not return.
        say: Writes one line to the server log (once every group was checked).
    """

    def __init__(self, plan: Mapping[str, Mapping[str, Any]], *, late: Sequence[str],
                 relaunch: Callable[[str], NoReturn], say: Callable[[str], None]) -> None:
        self.plan = dict(plan)
        self.groups: dict[str, list[str]] = {}
        for name, record in self.plan.items():
            self.groups.setdefault(str(record.get("group") or name), []).append(name)
        self.modules = len(self.plan)
        self.late = tuple(late)
        self.relaunch = relaunch
        self.say = say
        self.checks = 0
        self.variables: set[str] = set()
        self._import: Any = None
        self._import_module: Any = None

    @property
    def pending(self) -> bool:
        return bool(self.groups)

    def install(self) -> None:
        """Watch every import from now until the root of every group has been asked for."""
        if not self.groups:
            return
        self._import, self._import_module = builtins.__import__, importlib.import_module
        builtins.__import__ = self._hook
        importlib.import_module = self._hook_module

    def uninstall(self) -> None:
        if self._import is not None:
            builtins.__import__ = self._import
            importlib.import_module = self._import_module
            self._import = None

    def _hook(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),  # noqa: A002
              level: int = 0) -> Any:
        real = self._import  # asking may uninstall the hook (the last group done)
        if self.groups:
            self.asked(_absolute(name, globals, level), fromlist or ())
        return real(name, globals, locals, fromlist, level)

    def _hook_module(self, name: str, package: str | None = None) -> Any:
        real = self._import_module
        if self.groups:
            self.asked(importlib.util.resolve_name(name, package) if name.startswith(".") else name, ())
        return real(name, package)

    def asked(self, name: str, fromlist: Sequence[str]) -> None:
        """An import asks for ``name`` (its parents, and ``name.X`` for X in ``fromlist``)."""
        parts = name.split(".")
        wanted = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        wanted += [f"{name}.{x}" for x in fromlist if isinstance(x, str)]
        for module in wanted:
            record = self.plan.get(module)
            root = None if record is None else str(record.get("group") or module)
            if root is None or root not in self.groups:
                continue
            self.checks += 1
            for member in self.groups[root]:
                why = self.differs(member, self.plan[member])
                if why is not None:
                    self.uninstall()
                    self.relaunch(why)
            if module == root:
                del self.groups[root]
        if not self.groups:
            self.uninstall()
            self.say(f"{TAG}{CHECKED}{self.modules} modules, {len(self.variables)} variables, {self.checks} checks")

    def differs(self, module: str, record: Mapping[str, Any]) -> str | None:
        """Why ``module``'s import ahead is not what a fresh import now would read; None if it is."""
        read: Mapping[str, str | None] = record.get("read") or {}
        names = [k for k in read if not self._late(k)]
        self.variables.update(names)
        for k in names:
            if os.environ.get(k) != read[k]:
                return (f"{module}'s import read {k}={read[k]!r}, which is {os.environ.get(k)!r} where the "
                        "launcher imports it")
        prefixes = record.get("prefixes") or []
        if prefixes:
            seen = dict(record.get("env") or {})
            for k in set(seen) | set(os.environ):
                if (ALL in prefixes or k.startswith(tuple(prefixes))) and not self._late(k) \
                        and seen.get(k) != os.environ.get(k):
                    return f"{module} iterated the environment on import, and {k} has changed since"
        return None

    def _late(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.late)
