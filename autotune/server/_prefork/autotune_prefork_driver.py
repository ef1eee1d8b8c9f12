"""Whether this process's CUDA driver is initialised, and where during imports it first was.

A process forked after ``cuInit`` cannot use the GPU, and torch's ``_lazy_init`` is not the only way
in: a runtime call such as ``cudaGetDeviceCount`` (torch's C++ accelerator check, for one) or
native code run while a module is imported initialises the driver too. Both questions here ask the
driver itself, through an already loaded ``libcuda.so.1`` only (``RTLD_NOLOAD``: asking loads
nothing, and ``cuDeviceGetCount`` answers CUDA_ERROR_NOT_INITIALIZED before ``cuInit`` and
initialises nothing).
Standard library only (it is loaded beside ``autotune_prefork``, outside the autotune package).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import os
import sys
import traceback
from typing import Any

#: cuDeviceGetCount's answer before cuInit (CUDA_ERROR_NOT_INITIALIZED).
_NOT_INITIALIZED = 3


def _loaded_driver() -> Any:
    """``libcuda.so.1`` where this process has already loaded it; None where it has not."""
    try:
        return ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def _asked(driver: Any) -> bool:
    try:
        count = ctypes.c_int(0)
        return int(driver.cuDeviceGetCount(ctypes.byref(count))) != _NOT_INITIALIZED
    except AttributeError:
        return True  # loaded, and not askable: assume the worst


def driver_initialised() -> bool | None:
    """Whether this process initialised the CUDA driver: None where the driver is not even loaded
    (a library linked against it loads it without initialising it)."""
    driver = _loaded_driver()
    return None if driver is None else _asked(driver)


class DriverWatch(importlib.abc.MetaPathFinder):
    """Where this process's CUDA driver was first initialised during imports, torch or not.

    A :class:`DriverWatch` in ``sys.meta_path`` asks the driver (:meth:`initialised`) at the start
    and at the end of every module's execution until it first answers initialised, and keeps
    :attr:`where`: between which two of those points it happened, the modules being imported then,
    and the stack at the second point.
    """

    def __init__(self) -> None:
        self.where: str | None = None
        self.stack: str | None = None
        self.checks = 0
        self._last = "the watch's start"
        self._importing: list[str] = []
        self._driver: Any = None

    def initialised(self) -> bool:
        """Whether the driver is initialised now (False while it is not even loaded)."""
        if self._driver is None:
            self._driver = _loaded_driver()
            if self._driver is None:
                return False
        return _asked(self._driver)

    def checkpoint(self, label: str) -> None:
        """A point between two pieces of import work, named ``label``."""
        if self.where is not None:
            return
        self.checks += 1
        if self.initialised():
            chain = " > ".join(self._importing) or "nothing"
            self.where = f"between {self._last} and {label} (importing: {chain})"
            self.stack = "".join(traceback.format_stack(limit=14)[:-1])
        self._last = label

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if self.where is not None:
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        # Only a loader of this one module (a file's: its ``name`` is the module's) is wrapped: one
        # shared by several (built-in and frozen modules, some packages' own importers) would carry
        # one module's label into another's import.
        if loader is None or isinstance(loader, type) or getattr(loader, "name", None) != name:
            return spec
        real_exec, watch = loader.exec_module, self

        def exec_module(module: Any) -> None:
            watch.checkpoint(f"the start of {name}")
            watch._importing.append(name)
            try:
                real_exec(module)
            finally:
                watch.checkpoint(f"the end of {name}")
                watch._importing.pop()

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # a loader that takes no attributes: unwatched
            pass
        return spec

    def start(self) -> DriverWatch:
        sys.meta_path.insert(0, self)
        return self

    def stop(self) -> None:
        self.checkpoint("the watch's end")
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def report(self) -> dict[str, Any]:
        return {"where": self.where, "stack": self.stack, "checks": self.checks}
