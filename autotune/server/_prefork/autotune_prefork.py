"""The server's child processes started from a pre-imported fork server (``measure.prefork``).

SGLang's launcher sets the ``spawn`` start method, so each scheduler process is a fresh interpreter
that imports SGLang and torch again (docs/startup.md). With ``measure.prefork`` a standby
(``autotune/server/_standby.py``) also starts multiprocessing's fork server with this module as its
preload, and that fork server imports what those processes import first
(:attr:`autotune.backend.Backend.prefork`) while the server before it starts up. Two halves,
standard library only (it is imported by its file's folder, outside the autotune package, and
nothing of autotune enters the server):

- **In the fork server** (:func:`_preload`, run on import where ``AUTOTUNE_PREFORK_SPEC`` is set):
  the modules are imported with every environment variable read through ``os.environ`` recorded,
  CUDA must still be uninitialised afterwards (the driver says so: a process forked after
  ``cuInit`` cannot use the GPU) and no import may have started a thread (a fork copies only the
  calling one), and a status file says what happened. Then the fork server waits
  for work, blocked in ``select``, as multiprocessing's does.
- **In the server the standby becomes** (:func:`install`): SGLang's ``mp.set_start_method("spawn")``
  installs :class:`_Context`. A child process is forked from the fork server only where that is the
  same as a spawn: the variables that differ from the fork server's were not read by its imports
  (a loader or ``PYTHON*`` variable always counts as read), the interpreter is the one the fork
  server runs, and nothing outside the standard library copied the whole environment at import.
  The child then takes the launcher's whole environment, stdout and stderr, as a spawned one would
  have them, before its target runs. Otherwise it is spawned, and the server log says why.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

SPEC = "AUTOTUNE_PREFORK_SPEC"
#: Set by the standby for the fork server's imports only: torch's CUDA check through NVML, so that
#: an import asking whether CUDA is there does not initialise it (which would make every fork fail).
_NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
_OURS = (SPEC, _NVML_CHECK)
#: Read by the loader or the interpreter at start-up, before any import: a spawn would see them.
_START_UP_PREFIXES = ("LD_", "PYTHON")
_HELPERS = frozenset({"os", "_collections_abc", "collections.abc"})
#: The line every decision writes to the server log, and what it says of the child.
TAG = "autotune prefork:"
FORKED = " forked from the pre-imported fork server"
SPAWNED = " spawned afresh: "
REBOUND = "rebound "


class _Reading(os._Environ[str]):
    """``os.environ`` over the same data, remembering the names read and who iterated it."""

    names: set[str]
    iterated_by: set[str]

    readers: Any = None

    def __getitem__(self, key: str) -> str:
        self.names.add(key)
        if self.readers is not None:
            self.readers.saw(key, self.iterated_by)
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        frame = sys._getframe(1)
        # os.environ.copy(), items() and the like iterate on their caller's behalf.
        while frame.f_back is not None and frame.f_globals.get("__name__") in _HELPERS:
            frame = frame.f_back
        self.iterated_by.add(frame.f_globals.get("__name__") or "?")
        return super().__iter__()


def _stdlib(module: str) -> bool:
    return module.split(".", 1)[0] in sys.stdlib_module_names


def _origin(module: object) -> str | None:
    where = getattr(module, "__file__", None)
    return os.path.realpath(where) if where else None


def _preload(spec: dict[str, Any]) -> None:
    """The fork server's imports (see the module's text); writes ``spec["status"]``."""
    # Its stdout is the standby's channel to the caller: nothing imported here may write there.
    os.dup2(2, 1)
    # `python -c` put the working directory first on the path, and the standby put this module's
    # folder on PYTHONPATH to be found: the imports below see neither, as a spawned child would not
    # (3.11's fork server ignores the sys.path it is given).
    if sys.path and sys.path[0] == "":
        sys.path.pop(0)
    import importlib

    # Beside this file, found while its folder is still on the path (imported by name, as this one is).
    cuda_answers: Any = importlib.import_module("autotune_prefork_cuda")
    driver: Any = importlib.import_module("autotune_prefork_driver")
    rebinding: Any = importlib.import_module("autotune_prefork_rebind")

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p) != here]
    if spec.get("pythonpath") is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = spec["pythonpath"]
    real = os.environ
    reading = _Reading(real._data,  # type: ignore[attr-defined]
                        real.encodekey, real.decodekey, real.encodevalue, real.decodevalue)
    reading.names, reading.iterated_by = set(), set()
    rebind: dict[str, dict[str, str]] = spec.get("rebind") or {}
    reading.readers = rebinding.Readers(rebind, spec.get("scans") or {}, helpers=_HELPERS)
    before = rebinding.set_probes(rebind)
    had_check = os.environ.get(_NVML_CHECK)
    os.environ[_NVML_CHECK] = "1"
    with open(spec["modules_file"]) as f:
        modules = [line.strip() for line in f if line.strip()]
    t0 = time.monotonic()
    error = None
    skipped: list[str] = []
    os.environ = reading  # noqa: B003 (to record what is read, not to change it)
    # torch's questions about the device answered without initialising CUDA, from when torch.cuda
    # is imported (autotune_prefork_cuda: exact answers only, and none where NVML cannot give one).
    identity = cuda_answers.nvml_identity()
    answers = cuda_answers.answer_when_imported(identity)
    # Where the driver is first initialised, torch or not (native code can call cuInit at import).
    watch = driver.DriverWatch().start()
    try:
        for name in modules:
            try:
                __import__(name)
            except ImportError as exc:  # not importable on its own: the child imports it, as spawned
                skipped.append(f"{name}: {exc}")
    except BaseException as exc:  # any other failure means: no fork server, the children are spawned
        error = f"{name}: {type(exc).__name__}: {exc}"
    finally:
        watch.stop()
        os.environ = real  # noqa: B003
        if answers is not None:
            answers.detach()
    if had_check is None:
        os.environ.pop(_NVML_CHECK, None)
    os.environ.pop(SPEC, None)
    # The forkserver's children inherit anything still buffered here; they get their own streams.
    sys.stdout.flush()
    sys.stderr.flush()
    # SGLang's scheduler and detokenizer send SIGQUIT to their parent when they fail; here that is
    # this fork server, so it passes the signal on to the launcher that started it (the parent a
    # spawned child would have had).
    launcher = os.getppid()
    signal.signal(signal.SIGQUIT, lambda *_: os.kill(launcher, signal.SIGQUIT))
    cuda = bool(driver.driver_initialised())
    rebound = rebinding.find(rebind, reading.readers) if error is None else {}
    reading.readers = None
    env = {k: v for k, v in os.environ.items() if k not in _OURS}  # the probes: what the imports read
    rebinding.restore(before)
    # A fork copies only the calling thread: a thread an import started would be missing from every
    # child, where a spawned child's own import would have started it.
    import threading

    threads = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
    # A module that iterates the environment reads every name it keeps; where the backend says which
    # prefixes it keeps (``scans``), those count as read, and any other non-stdlib scan stops forks.
    scans: dict[str, list[str]] = spec.get("scans") or {}
    foreign = sorted(m for m in reading.iterated_by if not _stdlib(m) and m not in scans)
    prefixes = sorted({p for m in reading.iterated_by if m in scans for p in scans[m]})
    status = {
        "ok": error is None and not cuda and not threads,
        "why_not": error or ("its imports initialised CUDA" if cuda else None)
        or (f"its imports started threads ({', '.join(threads)}), which a forked child would lack"
            if threads else None),
        "pid": os.getpid(), "import_s": round(time.monotonic() - t0, 3), "executable": sys.executable,
        "env": env, "rebind": rebound,
        "read": sorted(n for n in reading.names if n not in _OURS),
        "copied_by": foreign, "read_prefixes": prefixes, "modules": len(modules), "skipped": skipped[:20],
        "skipped_n": len(skipped),
        "cuda_answers": {"capability": identity.capability if identity else None,
                         "name": identity.name if identity else None,
                         "given": dict(answers.given) if answers else {},
                         "first_init": answers.first_init if answers else None},
        "driver_init": watch.report(),
        "roots": {name: _origin(mod) for name, mod in list(sys.modules.items()) if "." not in name},
    }
    tmp = spec["status"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(status, f)
    os.replace(tmp, spec["status"])


if SPEC in os.environ and "multiprocessing.forkserver" in sys.modules:
    _preload(json.loads(os.environ[SPEC]))


# ---- the server's half -------------------------------------------------------------------------

_status: dict[str, Any] = {}


def _say(line: str) -> None:
    sys.stderr.write(f"{TAG} {line}\n")
    sys.stderr.flush()


def why_spawn(env: dict[str, str], status: dict[str, Any], *, executable: str) -> str | None:
    """Why a child started now, in ``env`` by ``executable``, must be spawned and not forked from
    the fork server that wrote ``status``; None where a fork is the same as a spawn."""
    if not status.get("ok"):
        return f"no fork server ({status.get('why_not') or 'none was started'})"
    if os.path.realpath(executable) != os.path.realpath(status["executable"]):
        return f"the child's interpreter is {executable}, the fork server's {status['executable']}"
    if status.get("copied_by"):
        return f"{', '.join(status['copied_by'])} copied the whole environment while importing"
    differ = _differ(status["env"], env)
    read = set(status["read"])
    prefixes = (*_START_UP_PREFIXES, *status.get("read_prefixes", ()))
    rebound = _rebound(status)
    early = sorted(k for k in differ if (k in read or k.startswith(prefixes)) and k not in rebound)
    if early:
        return f"{', '.join(early)} differ(s) from what the fork server's imports read"
    return None


def _rebound(status: dict[str, Any]) -> set[str]:
    """The variables a fork server that wrote ``status`` found every binding of: each forked child
    binds its own value there (``autotune_prefork_rebind``)."""
    return {k for k, v in (status.get("rebind") or {}).items() if v.get("ok")}


def _differ(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The variables set differently (or only) in one of ``a`` and ``b``, sorted."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _run_with_env(env: dict[str, str], stdio: Any, answered: dict[str, Any] | None, target: Any, args: Any,
                  kwargs: Any) -> Any:
    """A forked child's first step: the launcher's environment and output, the fork server's answers
    to be checked at the child's own CUDA start (``answered``: its status's ``cuda_answers``, where it
    gave any), then its target."""
    os.environ.clear()
    os.environ.update(env)
    stdio.attach()
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    rebinding = sys.modules.get("autotune_prefork_rebind")  # the fork server's, with what it found
    for line in rebinding.rebind() if rebinding is not None else ():
        _say(f"{REBOUND}{line}")
    if answered:
        import importlib

        cuda_answers: Any = importlib.import_module("autotune_prefork_cuda")
        identity = cuda_answers.Identity(tuple(answered["capability"]), answered.get("name"))
        cuda_answers.check_after_init(sys.modules["torch.cuda"], identity,
                                      accelerator="get_device_module" in (answered.get("given") or {}))
    return target(*args, **kwargs)


class _Stdio:
    """The launcher's stdout and stderr, passed to a forked child as file descriptors."""

    def __init__(self, out: Any = None, err: Any = None) -> None:
        self.out, self.err = out, err

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocessing import reduction

        # Pickled while the fork server's Popen is spawning: DupFd sends the descriptors along.
        return (_Stdio, (reduction.DupFd(1), reduction.DupFd(2)))

    def attach(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for dup, fd in ((self.out, 1), (self.err, 2)):
            got = dup.detach()
            os.dup2(got, fd)
            os.close(got)


def fork_server_alive(pid: int) -> bool:
    import multiprocessing.forkserver

    if multiprocessing.forkserver._forkserver._forkserver_pid != pid:  # type: ignore[attr-defined]
        return False
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:
        return False


def _popen(process_obj: Any) -> Any:
    import multiprocessing.spawn

    why = why_spawn(dict(os.environ), _status, executable=os.fsdecode(multiprocessing.spawn.get_executable()))
    if why is None and not fork_server_alive(_status["pid"]):
        why = f"the fork server (pid {_status['pid']}) has exited"
    if why is not None:
        from multiprocessing.popen_spawn_posix import Popen as SpawnPopen

        _say(f"{process_obj.name}{SPAWNED}{why}")
        return SpawnPopen(process_obj)
    from multiprocessing.popen_forkserver import Popen as ForkPopen

    env = dict(os.environ)
    differ = _differ(_status["env"], env)
    target, args, kwargs = process_obj._target, process_obj._args, process_obj._kwargs
    answers = _status.get("cuda_answers") or {}
    answered = answers if answers.get("given") else None
    process_obj._target, process_obj._args, process_obj._kwargs = _run_with_env, (env, _Stdio(), answered, target,
                                                                                   args, kwargs), {}
    popen = ForkPopen(process_obj)
    ok = _rebound(_status)
    rebound = [k for k in differ if k in ok]
    _say(f"{process_obj.name} (pid {popen.pid}){FORKED} (pid {_status['pid']}); "
         f"{len(differ)} variable(s) set since its imports, none of them read by them"
         f"{' but ' + ', '.join(rebound) + ', rebound in the child' if rebound else ''}: {', '.join(differ)}")
    return popen


def install(status: dict[str, Any]) -> None:
    """In the server, before its module runs: SGLang's ``spawn`` becomes :func:`_popen`'s choice."""
    import multiprocessing
    import multiprocessing.context as mpc
    from multiprocessing import process

    _status.clear()
    _status.update(status)

    class _Process(process.BaseProcess):
        _start_method = "spawn"
        _Popen = staticmethod(_popen)

    class _Context(mpc.SpawnContext):
        # Named as what SGLang asked for: its checks (`get_start_method() == "spawn"`) hold, and a
        # child that cannot be forked honestly is spawned.
        Process = _Process  # type: ignore[assignment]

    real_set = multiprocessing.set_start_method

    def set_start_method(method: str, force: bool = False) -> None:
        real_set(method, force=force)
        if method == "spawn":
            mpc._default_context._actual_context = _Context()  # type: ignore[attr-defined]

    multiprocessing.set_start_method = set_start_method  # type: ignore[assignment]
