"""Exact answers to the CUDA questions an import asks, given without initialising CUDA.

A process forked after ``cuInit`` cannot use the GPU, so the fork server (``autotune_prefork``)
may import only what does not initialise CUDA. The first of SGLang 0.5.17's scheduler imports to
initialise it asks only for the current device's compute capability (``sgl_kernel`` picks its kernel
build from ``get_device_properties(current_device())``'s major and minor), as do SGLang's own
``is_sm90_supported`` and the like (``get_device_capability``); SGLang's ``fla/utils.py`` asks for
the device's name at import. What the imports ask is listed by ``scripts/gpu/prefork_probe.py``.
While CUDA is uninitialised, an :class:`Answers` (attached to ``torch.cuda`` by
:func:`answer_when_imported` as soon as it is imported) answers exactly these, and nothing else:

- ``current_device()``: 0, torch's device until something sets one (setting one initialises CUDA);
- ``get_device_capability(d)`` for that device: the capability NVML reports, only where every GPU
  NVML sees has the same one, so that which of them CUDA numbers 0 (``CUDA_VISIBLE_DEVICES``,
  ``CUDA_DEVICE_ORDER``) cannot change the answer;
- ``get_device_properties(d)``: an object whose ``major`` and ``minor`` are that capability, whose
  ``name`` is NVML's name where every GPU has the same one (torch's ``get_device_name`` reads it
  there), and whose every other attribute asks torch for the real properties then (initialising
  CUDA, as the caller would have).

- ``torch.get_device_module()`` (no device): ``torch.cuda`` where CUDA is torch's compile-time
  accelerator and available (``torch.cuda.is_available()``, from NVML in the fork server). torch's own
  asks the runtime (``cudaGetDeviceCount``), which initialises the driver outside torch's
  ``_lazy_init``: SGLang 0.5.17's ``parallel_state`` does so at import, in a class body
  (``GraphCaptureContext``); pytorch/pytorch#190708.

Anything else, a device other than 0, or torch saying CUDA is not available, goes to torch as it
would have. After the imports torch's own functions are put back (:meth:`Answers.detach`). A child
forked from the fork server checks the answers against the device once it initialises CUDA itself
(:func:`check_after_init`), and fails there if any differs: its modules were imported on a wrong
answer.
Standard library only (it is loaded beside ``autotune_prefork``, outside the autotune package).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import sys
import traceback
from collections import Counter
from typing import Any, NamedTuple

_NVML_SUCCESS = 0
#: NVML_DEVICE_NAME_V2_BUFFER_SIZE: room for any device's name and its NUL.
_NVML_NAME_BYTES = 96


class Identity(NamedTuple):
    """What every GPU NVML sees shares: the compute capability, and the name where they share one."""

    capability: tuple[int, int]
    name: str | None


def nvml_identity() -> Identity | None:
    """The :class:`Identity` of the GPUs NVML sees; None where NVML is missing, sees no GPU, or the
    GPUs' capabilities differ (``name`` None where only their names differ). NVML initialises no
    CUDA context."""
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
        capabilities, names = set(), set()
        for index in range(count.value):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != _NVML_SUCCESS
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major),
                                                               ctypes.byref(minor)) != _NVML_SUCCESS):
                return None
            capabilities.add((major.value, minor.value))
            name = ctypes.create_string_buffer(_NVML_NAME_BYTES)
            ok = nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(_NVML_NAME_BYTES)) == _NVML_SUCCESS
            names.add(name.value.decode(errors="replace") if ok and name.value else None)
        if len(capabilities) != 1:
            return None
        return Identity(capabilities.pop(), names.pop() if len(names) == 1 else None)
    except AttributeError:
        return None
    finally:
        nvml.nvmlShutdown()


class _Properties:
    """The device's properties as far as the answers go (the capability, and the name where known);
    the rest from torch when first asked."""

    def __init__(self, identity: Identity, real: Any, device: Any, given: Counter[str]) -> None:
        self.major, self.minor = identity.capability
        self._name, self._given = identity.name, given
        self._real, self._device = real, device
        self._props: Any = None

    def __getattr__(self, name: str) -> Any:
        # Only for what __init__ did not set: anything beyond the answers is torch's own.
        if name == "name" and self._name is not None:
            self._given["name"] += 1
            return self._name
        if self._props is None:
            self._props = self._real(self._device)
        return getattr(self._props, name)

    def __repr__(self) -> str:
        return f"_Properties(major={self.major}, minor={self.minor}, name={self._name!r}, rest from torch when asked)"


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

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.capability = identity.capability
        self.given: Counter[str] = Counter()
        self._cuda: Any = None
        self._real: dict[str, Any] = {}
        self._torch: Any = None
        self._real_torch: dict[str, Any] = {}
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
        real, given, identity = self._real, self.given, self.identity

        def _lazy_init() -> None:
            # What the answers did not cover, named for the next look (the status carries it).
            if self.first_init is None and not cuda.is_initialized():
                self.first_init = "".join(traceback.format_stack(limit=14)[:-1])
            real["_lazy_init"]()

        answerable = self.answerable

        def current_device() -> int:
            if answerable(None):
                given["current_device"] += 1
                return 0
            return int(real["current_device"]())

        def get_device_capability(device: Any = None) -> tuple[int, int]:
            if answerable(device):
                given["get_device_capability"] += 1
                return identity.capability
            return tuple(real["get_device_capability"](device))

        def get_device_properties(device: Any = None) -> Any:
            if answerable(device):
                given["get_device_properties"] += 1
                return _Properties(identity, real["get_device_properties"], device, given)
            return real["get_device_properties"](device)

        # A module that took one of these by name (``from torch.cuda import ...``) keeps the answering
        # one after detach, which then asks torch: a forked child's own questions are torch's.
        for fn in (current_device, get_device_capability, get_device_properties, _lazy_init):
            setattr(cuda, fn.__name__, fn)

    def answerable(self, device: Any) -> bool:
        """Whether a question about ``device`` is answered now: while attached, CUDA uninitialised
        and available, and ``device`` the current one before any was set."""
        cuda = self._cuda
        return (cuda is not None and not cuda.is_initialized() and cuda.is_available()
                and _device_zero(device))

    def attach_torch(self, torch: Any) -> None:
        """Answer ``torch.get_device_module()`` for ``torch`` (the module, imported) from now on;
        nothing where this torch has no such function."""
        real = getattr(torch, "get_device_module", None)
        if real is None or self._torch is not None:
            return
        self._torch, self._real_torch = torch, {"get_device_module": real}
        given = self.given

        def get_device_module(device: Any = None) -> Any:
            if device is None and self.answerable(None):
                # The compile-time accelerator asks no device (it does not poison a fork); torch's
                # own answer adds the runtime's availability, which answerable() read from NVML.
                compiled = getattr(torch._C, "_accelerator_getAccelerator", lambda: None)()
                if compiled is not None and compiled.type == "cuda":
                    given["get_device_module"] += 1
                    return self._cuda
            return real(device)

        torch.get_device_module = get_device_module

    def detach(self) -> None:
        """torch's own functions back (and no more waiting for torch's import)."""
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        for name, fn in self._real.items():
            setattr(self._cuda, name, fn)
        for name, fn in self._real_torch.items():
            setattr(self._torch, name, fn)
        self._cuda = self._torch = None
        self._real_torch = {}


class _WhenImported(importlib.abc.MetaPathFinder):
    """Attaches ``answers`` to ``torch.cuda`` as soon as that module is imported, before whatever
    imported it goes on, and to ``torch`` once its own import ends (it defines
    ``get_device_module`` after importing ``torch.cuda``). It leaves ``sys.meta_path`` once it has
    seen both."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.pending: dict[str, Any] = {"torch": answers.attach_torch, "torch.cuda": answers.attach}

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        attach = self.pending.pop(name, None)
        if attach is None:
            return None
        at = sys.meta_path.index(self)
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            if self.pending:
                sys.meta_path.insert(at, self)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            real_exec(module)
            attach(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def answer_when_imported(identity: Identity | None) -> Answers | None:
    """Answers attached to ``torch.cuda`` and ``torch`` when they are imported (at once where they
    already are); None where there is nothing to answer with (:func:`nvml_identity`)."""
    if identity is None:
        return None
    answers = Answers(identity)
    if "torch.cuda" in sys.modules:
        answers.attach(sys.modules["torch.cuda"])
        answers.attach_torch(sys.modules["torch"])
    else:
        answers.finder = _WhenImported(answers)
        if "torch" in sys.modules:  # mid-import: torch.cuda is next, and torch's end is not watched
            del answers.finder.pending["torch"]
        sys.meta_path.insert(0, answers.finder)
    return answers


def differences(cuda: Any, identity: Identity, *, accelerator: str | None = None) -> list[str]:
    """Where the devices ``cuda`` (``torch.cuda``, initialised) sees differ from ``identity``: every
    one must match, as the answers were given for whichever CUDA numbers 0. ``accelerator``: the
    device type torch names its accelerator now, where ``get_device_module()`` was answered."""
    wrong = []
    for index in range(int(cuda.device_count())):
        props = cuda.get_device_properties(index)
        if (props.major, props.minor) != tuple(identity.capability):
            wrong.append(f"device {index}'s capability is {props.major}.{props.minor}, "
                         f"answered {identity.capability[0]}.{identity.capability[1]}")
        if identity.name is not None and props.name != identity.name:
            wrong.append(f"device {index}'s name is {props.name!r}, answered {identity.name!r}")
    if accelerator is not None and accelerator != "cuda":
        wrong.append(f"torch's accelerator is {accelerator!r}, answered 'cuda' (get_device_module)")
    return wrong


def check_after_init(cuda: Any, identity: Identity, *, accelerator: bool = False) -> None:
    """In a child forked from a fork server that answered: the first time ``cuda`` (``torch.cuda``)
    is initialised for real, the answers are compared with the devices (:func:`differences`; with
    ``accelerator``, torch's accelerator too), and a difference raises ``RuntimeError`` there,
    failing the child loudly: its modules were imported on a wrong answer. torch's ``_lazy_init``
    is put back at that first initialisation."""
    real = cuda._lazy_init

    def _lazy_init() -> None:
        real()
        if cuda._lazy_init is not _lazy_init or not cuda.is_initialized():
            return
        cuda._lazy_init = real
        # Asking the runtime is harmless now: this process has initialised CUDA itself.
        now = sys.modules["torch"]._C._get_accelerator().type if accelerator else None
        wrong = differences(cuda, identity, accelerator=now)
        if wrong:
            raise RuntimeError("the fork server's answers to the device questions were wrong, so this "
                               "process's imports were too: " + "; ".join(wrong))

    cuda._lazy_init = _lazy_init
