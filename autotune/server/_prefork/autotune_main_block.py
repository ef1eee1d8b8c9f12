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
- **What each group's imports read or write is recorded** (:func:`import_ahead`; a group is one
  main-block module and all its import imported): every variable read through ``os.environ`` or
  changed, and the prefixes of a module that iterated the environment (all of it, where the backend
  names none for it). The groups are imported in the launcher's order, each after what the ones
  before it wrote; what they all wrote is taken back at the end.
- **Checked where the launcher would have imported it** (:class:`Check`): from the hand-over, the
  first import that asks for a module of a group (an ``import`` statement or
  ``importlib.import_module``, its parents and ``from`` names counted) compares those variables with
  the environment then; variables only the server's child processes read (``late``, the standby's
  own rule) are left out. Where all agree, a fresh import there would have read the same and
  written the same, so the group's writes are given back and the launcher goes on. Where one
  differs, the process re-executes itself as the fresh launch (``os.execve``: the same pid,
  session, log and working directory; the environment the standby was started with, given the
  caller's late variables), and its log says why.

What these imports change besides the environment (a logging handler, a warnings filter) they
change earlier than a fresh launch would; the GPU A/Bs judge the server they make
(``docs/startup.md``).

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
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, NoReturn

TAG = "autotune standby:"
#: Written to the server log when every module imported ahead was checked where it was asked for.
CHECKED = " imported ahead from the main block, each as a fresh import there would read it: "
#: Written to the server log before the process re-executes itself as a fresh launch.
RELAUNCHED = " re-executed as a fresh launch: "
#: A module that iterated the environment and that the backend names no prefixes for: all of it.
ALL = "*"


def given(env: MutableMapping[str, str], changes: Mapping[str, str | None]) -> MutableMapping[str, str]:
    """``env`` with ``changes`` made (a None value: the variable unset); returns ``env``."""
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def is_late(name: str, patterns: Sequence[str]) -> bool:
    """Whether ``name`` matches one of the ``fnmatch`` patterns of the variables only the server's
    child processes read (``Backend.late_env``)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _importing() -> str:
    """The module whose body is executing (the innermost ``<module>`` frame)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            return str(frame.f_globals.get("__name__") or "?")
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


class _Reads(os._Environ[str]):
    """``os.environ`` over the same data, remembering the names read and who iterated it."""

    names: set[str]
    iterated_by: set[str]

    def __getitem__(self, key: str) -> str:
        self.names.add(key)
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
    """Import ``modules`` in order, each after what the ones before it wrote; what they all wrote is
    taken back at the end, and given back group by group where the launcher asks for it (:class:`Check`).

    Returns one group per module, keyed by it: ``{"modules": [every module its import imported],
    "start": {NAME: VALUE or None}, "prefixes": [...], "writes": {NAME: VALUE or None}}``: ``start``
    holds, as they were before its import, the variables its imports read or wrote, ``prefixes`` those of a
    module that iterated the environment (:data:`ALL`: all of it, where ``scans`` names none for it),
    ``writes`` what its imports changed. A module whose import fails is left to the launcher, which
    meets the same failure where it imports it; ``failed`` gets why, and what its import did import
    is recorded and checked as the rest."""
    seen = set(sys.modules)
    real = os.environ
    start_env = dict(real)
    plan: dict[str, dict[str, Any]] = {}
    for name in modules:
        # In the launcher's order: each group from what the ones before it wrote, as a fresh launch
        # imports it after those (their writes are given back there first).
        before = dict(real)
        reads = _Reads(real._data, real.encodekey, real.decodekey,  # type: ignore[attr-defined]
                       real.encodevalue, real.decodevalue)
        reads.names, reads.iterated_by = set(), set()
        os.environ = reads  # noqa: B003 (to record what is read, not to change it)
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 (the launcher's own import will say it)
            if failed is not None:
                failed.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
        finally:
            os.environ = real  # noqa: B003
        new = [m for m in list(sys.modules) if m not in seen]
        seen.update(new)
        writes = {k: real.get(k) for k in set(before) | set(real) if real.get(k) != before.get(k)}
        prefixes = sorted({p for m in reads.iterated_by for p in scans.get(m, (ALL,))})
        keys = reads.names | set(writes) | {k for k in before if ALL in prefixes or k.startswith(tuple(prefixes))}
        plan[name] = {"modules": new, "start": {k: before.get(k) for k in sorted(keys)}, "prefixes": prefixes,
                      "writes": writes}
    # Taken back: the launcher's main block runs before these imports would have.
    given(real, {k: start_env.get(k) for k in set(start_env) | set(real) if real.get(k) != start_env.get(k)})
    return plan


def _absolute(name: str, globals_: Mapping[str, Any] | None, level: int) -> str:
    if level == 0:
        return name
    package = (globals_ or {}).get("__package__") or ""
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


class Check:
    """Checks each group imported ahead where the launcher first asks for one of its modules (see
    the module's text).

    A group is a main-block module and all its import imported. A fresh launch imports it where it
    first asks for one of those, so there the environment must hold, for every variable the group's
    imports read or wrote (and for every one of the prefixes a module iterated), the value it had
    when the standby imported them; then what they wrote is given back, as the fresh import would
    write it. The hook goes once every group was asked for.

    Args:
        plan: :func:`import_ahead`'s record.
        late: Patterns of the variables left out (read only by the server's child processes).
        relaunch: Called with the reason where the environment differs; it does not return.
        say: Writes one line to the server log (once every group was checked).
    """

    def __init__(self, plan: Mapping[str, Mapping[str, Any]], *, late: Sequence[str],
                 relaunch: Callable[[str], NoReturn], say: Callable[[str], None]) -> None:
        self.groups = {root: dict(group) for root, group in plan.items()}
        self.member = {m: root for root, group in plan.items() for m in group.get("modules") or ()}
        self.modules = len(self.member)
        self.late = tuple(late)
        self.relaunch = relaunch
        self.say = say
        self.variables = 0
        self._import: Any = None
        self._import_module: Any = None

    def install(self) -> None:
        """Watch every import from now until every group has been asked for."""
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
        real = self._import  # asking may uninstall the hook (the last group checked)
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
            root = self.member.get(module)
            group = None if root is None else self.groups.pop(root, None)
            if group is None:
                continue
            why = self.differs(str(root), group)
            if why is not None:
                self.uninstall()
                self.relaunch(why)
            given(os.environ, group.get("writes") or {})
        if not self.groups:
            self.uninstall()
            self.say(f"{TAG}{CHECKED}{self.modules} modules, {self.variables} variables")

    def differs(self, root: str, group: Mapping[str, Any]) -> str | None:
        """Why the imports of ``root``'s group ahead are not what a fresh import now would make;
        None if the environment they read or wrote is as it was then."""
        start: Mapping[str, str | None] = group.get("start") or {}
        prefixes = tuple(group.get("prefixes") or ())
        names = set(start)
        if prefixes:
            names |= {k for k in os.environ if ALL in prefixes or k.startswith(prefixes)}
        names = {k for k in names if not is_late(k, self.late)}
        self.variables += len(names)
        for k in sorted(names):
            if os.environ.get(k) != start.get(k):
                return (f"the imports of {root} read or wrote {k}, {start.get(k)!r} when imported ahead, "
                        f"{os.environ.get(k)!r} where the launcher imports {root}")
        return None
