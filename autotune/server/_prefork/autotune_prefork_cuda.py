"""Exact answers to the CUDA questions an import asks, given without initialising CUDA.

A process forked after ``cuInit`` cannot use the GPU, so the fork server (``autotune_prefork``)
may import only what does not initialise CUDA. The first of SGLang 0.5.17's scheduler imports to
initialise it asks only for the current device's compute capability (``sgl_kernel`` picks its kernel
build from ``get_device_properties(current_device())``'s major and minor), as do SGLang's own
``is_sm90_supported`` and the like (``get_device_capability``); what the later imports ask is
listed by ``scripts/gpu/prefork_probe.py``. While CUDA is uninitialised, an :class:`Answers`
(attached to ``torch.cuda`` by :func:`answer_when_imported` as soon as it is imported) answers
exactly these, and nothing else:

- ``current_device()``: 0, torch's device until something sets one (setting one initialises CUDA);
- ``get_device_capability(d)`` for that device: the capability NVML reports, only where every GPU
  NVML sees has the same one, so that which of them CUDA numbers 0 (``CUDA_VISIBLE_DEVICES``,
  ``CUDA_DEVICE_ORDER``) cannot change the answer;
- ``get_device_properties(d)``: an object whose ``major`` and ``minor`` are that capability, and
  whose every other attribute asks torch for the real properties then (initialising CUDA, as the
  caller would have).

Anything else, a device other than 0, or torch saying CUDA is not available, goes to torch as it
would have. After the imports torch's own functions are put back (:meth:`Answers.detach`).
Standard library only (it is loaded beside ``autotune_prefork``, outside the autotune package).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import sys
from collections import Counter
from typing import Any

_NVML_SUCCESS = 0


def nvml_capability() -> tuple[int, int] | None:
    """The compute capability every GPU NVML sees shares; None where NVML is missing, sees no GPU,
    or the GPUs differ. NVML initialises no CUDA context."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != _NVML_SUCCESS:
            return None
    except AttributeError:
        return None
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS or count.value == 0:
            return None
        found = set()
        for index in range(count.value):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != _NVML_SUCCESS
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major),
                                                               ctypes.byref(minor)) != _NVML_SUCCESS):
                return None
            found.add((major.value, minor.value))
        return found.pop() if len(found) == 1 else None
    except AttributeError:
        return None
    finally:
        nvml.nvmlShutdown()


class _Properties:
    """The device's properties as far as the capability goes; the rest from torch when first asked."""

    def __init__(self, capability: tuple[int, int], real: Any, device: Any) -> None:
        self.major, self.minor = capability
        self._real, self._device = real, device
        self._props: Any = None

    def __getattr__(self, name: str) -> Any:
        # Only for what __init__ did not set: anything beyond the capability is torch's own answer.
        if self._props is None:
            self._props = self._real(self._device)
        return getattr(self._props, name)

    def __repr__(self) -> str:
        return f"_Properties(major={self.major}, minor={self.minor}, rest from torch when asked)"


def _device_zero(device: Any) -> bool:
    """Whether ``device`` names the current device before any was set: device 0."""
    if device is None or device == 0:
        return True
    if isinstance(device, str):
        return device in ("cuda", "cuda:0")
    dev_type, index = getattr(device, "type", None), getattr(device, "index", -1)
    return dev_type == "cuda" and index in (None, 0)


class Answers:
    """torch's CUDA questions above answered without CUDA while attached (see the module's text);
    ``given`` counts the answers, by function."""

    def __init__(self, capability: tuple[int, int]) -> None:
        self.capability = capability
        self.given: Counter[str] = Counter()
        self._cuda: Any = None
        self._real: dict[str, Any] = {}
        self.finder: _WhenImported | None = None
        #: Where torch first initialised CUDA while attached (the stack's last frames), if it did.
        self.first_init: str | None = None

    def attach(self, cuda: Any) -> None:
        """Answer for ``cuda`` (the ``torch.cuda`` module) from now on."""
        if self._cuda is not None:
            raise ValueError("already attached")
        self._cuda = cuda
        self._real = {name: getattr(cuda, name) for name in ("current_device", "get_device_capability",
                                                             "get_device_properties", "_lazy_init")}
        real, given, capability = self._real, self.given, self.capability

        def _lazy_init() -> None:
            # What the answers did not cover, named for the next look (the status carries it).
            if self.first_init is None and not cuda.is_initialized():
                import traceback

                self.first_init = "".join(traceback.format_stack(limit=14)[:-1])
            real["_lazy_init"]()

        def answerable(device: Any) -> bool:
            return not cuda.is_initialized() and cuda.is_available() and _device_zero(device)

        def current_device() -> int:
            if answerable(None):
                given["current_device"] += 1
                return 0
            return int(real["current_device"]())

        def get_device_capability(device: Any = None) -> tuple[int, int]:
            if answerable(device):
                given["get_device_capability"] += 1
                return capability
            return tuple(real["get_device_capability"](device))

        def get_device_properties(device: Any = None) -> Any:
            if answerable(device):
                given["get_device_properties"] += 1
                return _Properties(capability, real["get_device_properties"], device)
            return real["get_device_properties"](device)

        # A module that took one of these by name (``from torch.cuda import ...``) keeps the answering
        # one after detach: it still answers only while CUDA is uninitialised, as exactly.
        for fn in (current_device, get_device_capability, get_device_properties, _lazy_init):
            setattr(cuda, fn.__name__, fn)

    def detach(self) -> None:
        """torch's own functions back (and no more waiting for torch.cuda's import)."""
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        for name, fn in self._real.items():
            setattr(self._cuda, name, fn)
        self._cuda = None


class _WhenImported(importlib.abc.MetaPathFinder):
    """Attaches ``answers`` to ``torch.cuda`` as soon as that module is imported, before whatever
    imported it goes on (one shot: it leaves ``sys.meta_path`` at the first look)."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader, answers = spec.loader, self.answers
        real_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            real_exec(module)
            answers.attach(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def answer_when_imported(capability: tuple[int, int] | None) -> Answers | None:
    """Answers attached to ``torch.cuda`` when it is imported (at once where it already is); None
    where there is no capability to answer with (:func:`nvml_capability`)."""
    if capability is None:
        return None
    answers = Answers(capability)
    if "torch.cuda" in sys.modules:
        answers.attach(sys.modules["torch.cuda"])
    else:
        answers.finder = _WhenImported(answers)
        sys.meta_path.insert(0, answers.finder)
    return answers
