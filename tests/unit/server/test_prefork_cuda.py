"""The fork server's answers to torch's device questions without CUDA (autotune_prefork_cuda).

torch here is the CPU build, so "CUDA is available" is the one thing stood in (a GPU cannot run
here); every question the answers do not cover goes to this torch, which then fails as it would
on a machine without CUDA, and shows that it was asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.server._prefork import autotune_prefork_cuda as cuda_answers
from autotune.server._prefork import autotune_prefork_driver as driver

REPO = Path(__file__).resolve().parents[3]
torch = pytest.importorskip("torch")


@pytest.fixture
def available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


H100 = cuda_answers.Identity((9, 0), "NVIDIA H100 80GB HBM3")


def test_the_capability_name_and_device_zero_are_answered_and_nothing_else(available: None) -> None:
    real = {n: getattr(torch.cuda, n) for n in ("current_device", "get_device_capability", "get_device_properties",
                                                "_lazy_init")}
    answers = cuda_answers.Answers(H100)
    answers.attach(torch.cuda)
    try:
        assert torch.cuda.current_device() == 0
        for device in (None, 0, "cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)):
            assert torch.cuda.get_device_capability(device) == (9, 0)
        props = torch.cuda.get_device_properties(0)
        assert (props.major, props.minor) == (9, 0)
        # torch's own get_device_name reads the answered properties' name (SGLang's fla/utils.py asks it).
        assert "NVIDIA H" in torch.cuda.get_device_name(0)
        assert answers.first_init is None
        # What the answer does not hold is torch's own, asked then: this torch has no CUDA.
        with pytest.raises((AssertionError, RuntimeError)):
            _ = props.total_memory
        # Where torch went to initialise CUDA is kept for the fork server's status.
        assert answers.first_init is not None and "props.total_memory" in answers.first_init
        with pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.get_device_capability(1)
        assert not torch.cuda.is_initialized()
        assert answers.given == {"current_device": 1, "get_device_capability": 6, "get_device_properties": 2,
                                 "name": 1}
    finally:
        answers.detach()
    assert {n: getattr(torch.cuda, n) for n in real} == real


@pytest.fixture
def compiled_for_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's compile-time accelerator as a CUDA build's (this one is a CPU build)."""
    monkeypatch.setattr(torch._C, "_accelerator_getAccelerator", lambda: torch.device("cuda"))


def test_the_accelerator_s_module_is_answered_without_asking_the_runtime(available: None,
                                                                          compiled_for_cuda: None) -> None:
    real = torch.get_device_module
    answers = cuda_answers.Answers(H100)
    answers.attach(torch.cuda)
    answers.attach_torch(torch)
    try:
        # torch's own asks the runtime (cudaGetDeviceCount), which initialises the driver: SGLang's
        # parallel_state does so in a class body at import (pytorch/pytorch#190708).
        assert torch.get_device_module() is torch.cuda
        assert torch.get_device_module("cpu") is torch.cpu  # a named device is torch's own
        assert answers.given == {"get_device_module": 1}
    finally:
        answers.detach()
    assert torch.get_device_module is real
    assert torch.get_device_module() is torch.cpu  # this CPU build's own answer, asked of torch


def test_the_accelerator_s_module_is_torch_s_own_where_cuda_is_not_available_or_not_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers = cuda_answers.Answers(H100)
    answers.attach(torch.cuda)
    answers.attach_torch(torch)
    try:
        assert torch.get_device_module() is torch.cpu  # CUDA not available (this machine)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert torch.get_device_module() is torch.cpu  # available, but not the compiled accelerator
        assert not answers.given
    finally:
        answers.detach()


def test_without_a_shared_name_the_name_goes_to_torch(available: None) -> None:
    answers = cuda_answers.Answers(cuda_answers.Identity((9, 0), None))
    answers.attach(torch.cuda)
    try:
        with pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.get_device_name(0)
        assert "name" not in answers.given and answers.first_init is not None
    finally:
        answers.detach()


class _Initialised:
    """``torch.cuda`` after a real start on a host whose GPUs are ``devices`` (capability, name): the
    one part of a forked child's check that needs a GPU, stood in."""

    def __init__(self, devices: list[tuple[tuple[int, int], str]]) -> None:
        self.devices, self.inits, self._on = devices, 0, False

    def _lazy_init(self) -> None:
        self.inits += 1
        self._on = True

    def is_initialized(self) -> bool:
        return self._on

    def device_count(self) -> int:
        return len(self.devices)

    def get_device_properties(self, index: int) -> object:
        self._lazy_init()  # as torch's: through the module's _lazy_init
        (major, minor), name = self.devices[index]
        return type("Props", (), {"major": major, "minor": minor, "name": name})()


def test_a_forked_child_checks_the_answers_at_its_own_cuda_start() -> None:
    right = _Initialised([((9, 0), "NVIDIA H100 80GB HBM3")] * 2)
    real = right._lazy_init
    cuda_answers.check_after_init(right, H100)
    assert right._lazy_init is not real
    right._lazy_init()  # the child's first initialisation: checked, then torch's own put back
    assert right._lazy_init == real and right.inits >= 1
    for devices, said in (([((9, 0), "NVIDIA H100 80GB HBM3"), ((8, 0), "NVIDIA A100")],
                           "device 1's capability is 8.0, answered 9.0"),
                          ([((9, 0), "NVIDIA H100 80GB HBM3"), ((9, 0), "NVIDIA H200")],
                           "device 1's name is 'NVIDIA H200', answered 'NVIDIA H100 80GB HBM3'")):
        wrong = _Initialised(devices)
        cuda_answers.check_after_init(wrong, H100)
        with pytest.raises(RuntimeError, match=said):
            wrong._lazy_init()
    unnamed = _Initialised([((9, 0), "anything")])
    cuda_answers.check_after_init(unnamed, cuda_answers.Identity((9, 0), None))
    unnamed._lazy_init()  # no name was answered: none is checked


def test_a_forked_child_checks_the_answered_accelerator_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # After its own start, torch's accelerator is asked of the runtime: this CPU build says "cpu".
    child = _Initialised([((9, 0), "NVIDIA H100 80GB HBM3")])
    cuda_answers.check_after_init(child, H100, accelerator=True)
    with pytest.raises(RuntimeError, match="torch's accelerator is 'cpu', answered 'cuda'"):
        child._lazy_init()
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda *a: torch.device("cuda"))
    child = _Initialised([((9, 0), "NVIDIA H100 80GB HBM3")])
    cuda_answers.check_after_init(child, H100, accelerator=True)
    child._lazy_init()
    assert child.inits >= 1


def test_nothing_is_answered_where_torch_says_cuda_is_not_there() -> None:
    answers = cuda_answers.Answers(H100)
    answers.attach(torch.cuda)
    try:
        with pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.get_device_capability()
        assert not answers.given
    finally:
        answers.detach()


def test_no_answers_without_a_capability_and_none_here_without_nvml() -> None:
    assert cuda_answers.answer_when_imported(None) is None
    try:
        import ctypes

        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        assert cuda_answers.nvml_identity() is None
    else:  # a machine with a GPU driver: one capability, or None where its GPUs differ
        found = cuda_answers.nvml_identity()
        assert found is None or (isinstance(found.capability, tuple) and len(found.capability) == 2)


CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from autotune.server._prefork import autotune_prefork_cuda as cuda_answers
answers = cuda_answers.answer_when_imported(cuda_answers.Identity((8, 6), None))
waiting = answers.finder in sys.meta_path
import torch  # torch.cuda is imported with it: the answers attach then, and to torch at its end
torch.cuda.is_available = lambda: True
torch._C._accelerator_getAccelerator = lambda: torch.device("cuda")  # as a CUDA build's
answered = torch.cuda.get_device_capability()
module = torch.get_device_module().__name__
gone = answers.finder not in sys.meta_path
answers.detach()
try:
    torch.cuda.get_device_capability()
    after = "answered"
except (AssertionError, RuntimeError) as exc:
    after = type(exc).__name__
print(json.dumps({"waiting": waiting, "answered": answered, "module": module, "finder_gone": gone,
                  "after": after, "module_after": torch.get_device_module().__name__,
                  "given": dict(answers.given)}))
"""


def test_answers_attach_when_torch_cuda_is_imported_and_leave_with_detach() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(REPO)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"waiting": True, "answered": [8, 6], "module": "torch.cuda", "finder_gone": True,
                   "after": "AssertionError", "module_after": "torch.cpu",
                   "given": {"get_device_capability": 1, "get_device_module": 1}}


def test_a_forked_childs_first_step_arms_the_check_with_what_the_fork_server_answered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.server._prefork import autotune_prefork

    # The child finds the answers' module by the name the fork server imported it under.
    monkeypatch.setitem(sys.modules, "autotune_prefork_cuda", cuda_answers)
    wrong = _Initialised([((9, 0), "NVIDIA H200")])
    monkeypatch.setitem(sys.modules, "torch.cuda", wrong)
    monkeypatch.setattr(autotune_prefork.os, "environ", dict(autotune_prefork.os.environ))

    class _Streams:
        def attach(self) -> None:  # the launcher's stdout and stderr: this process's own here
            pass

    answered = {"capability": [9, 0], "name": "NVIDIA H100 80GB HBM3", "given": {"name": 1}}

    def target(cuda: _Initialised) -> str:  # as the scheduler's start: it initialises CUDA
        cuda._lazy_init()
        return "started"

    with pytest.raises(RuntimeError, match="device 0's name is 'NVIDIA H200', answered 'NVIDIA H100 80GB HBM3'"):
        autotune_prefork._run_with_env({"A": "1"}, _Streams(), answered, target, (wrong,), {})
    right = _Initialised([((9, 0), "NVIDIA H100 80GB HBM3")])
    monkeypatch.setitem(sys.modules, "torch.cuda", right)
    assert autotune_prefork._run_with_env({"A": "1"}, _Streams(), answered, target, (right,), {}) == "started"
    # Where nothing was answered, nothing is checked.
    monkeypatch.setitem(sys.modules, "torch.cuda", wrong)
    assert autotune_prefork._run_with_env({"A": "1"}, _Streams(), None, target, (wrong,), {}) == "started"


class _FlagWatch(driver.DriverWatch):
    """A watch whose driver is "initialised" once a module sets a flag (no driver here)."""

    def initialised(self) -> bool:
        return bool(getattr(sys.modules.get("watched_pkg.flag"), "ON", False))


def test_the_driver_watch_names_where_the_driver_was_first_initialised(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "watched_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "flag.py").write_text("ON = False\n")
    (pkg / "plain.py").write_text("X = 1\n")
    # As a native library's cuInit would: in the body of `starts`, after it imported `plain`.
    (pkg / "starts.py").write_text("import watched_pkg.plain\nimport watched_pkg.flag as f\nf.ON = True\n")
    (pkg / "later.py").write_text("import watched_pkg.starts\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    watch = _FlagWatch().start()
    try:
        import watched_pkg.later  # noqa: F401
    finally:
        watch.stop()
        for name in [n for n in sys.modules if n.startswith("watched_pkg")]:
            del sys.modules[name]
    assert watch not in sys.meta_path
    assert watch.where == ("between the end of watched_pkg.flag and the end of watched_pkg.starts "
                           "(importing: watched_pkg.later > watched_pkg.starts)"), watch.where
    assert watch.stack is not None and "exec_module" in watch.stack
    checks = watch.checks
    watch.checkpoint("after")  # once found, it stops asking
    assert watch.checks == checks and watch.report()["where"] == watch.where


def test_the_driver_watch_loads_no_driver_and_finds_none_here() -> None:
    watch = driver.DriverWatch().start()
    try:
        import colorsys  # noqa: F401 (a module not imported yet, most likely)
        import json as _json  # noqa: F401 (already imported: nothing to watch)
    finally:
        watch.stop()
    assert watch.where is None and not watch.initialised()
    assert driver.driver_initialised() is None  # not loaded: neither initialised nor not
    with open("/proc/self/maps") as maps:
        assert "libcuda.so" not in maps.read()
