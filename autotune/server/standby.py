"""A standby launcher: the next server's imports, done while the current server starts.

``python -m sglang.launch_server`` spends its first 15-20 s on an H200 host importing SGLang and
torch before it reads its arguments (``docs/startup.md``). A :class:`Standby` is that process
started early, in the environment and working directory the next server will have: it imports
what the module imports first (:attr:`autotune.backend.Backend.preimport`), says it is ready, and
waits, blocked on its stdin, until :meth:`Standby.hand_over` gives it the server's arguments and
log, when it runs the module as ``__main__`` itself (``autotune/server/_standby.py``).

What keeps this honest:

- **The same program in the same environment.** :meth:`Standby.why_not` refuses a launch that is
  not ``python -m`` of the same module with the same interpreter and working directory, or whose
  environment differs in anything but the variables the backend names as read only by the
  server's child processes, after the hand-over (:attr:`autotune.backend.Backend.late_env`:
  those are set before the module runs). What the imports read from the environment is then what
  a fresh launch would read.
- **Idle while anything is measured.** The caller starts it while a server starts up and checks
  it is ready before that server's first measured request (:meth:`Standby.ready`; one that is
  still importing is discarded then). Blocked in ``read()`` it takes no CPU;
  :meth:`Standby.cpu_s` reads its CPU seconds from ``/proc`` so the caller can show that it did not
  run during the measurement.
- **Nothing leaks.** It leads its own session, as a server does, under the same reaper sidecar
  (:func:`autotune.server.group.start_watchdog`), which :class:`~autotune.server.process.ServerProcess`
  takes over with it; :meth:`Standby.discard` ends one that is not used.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.server._prefork.autotune_main_block import CHECKED, RELAUNCHED, is_late
from autotune.server._prefork.autotune_main_block import TAG as MAIN_BLOCK_TAG
from autotune.server._prefork.autotune_prefork import FORKED, REBOUND, SPAWNED
from autotune.server._prefork.autotune_prefork import TAG as PREFORK_TAG
from autotune.server.group import release_watchdog, session_cpu_s, start_watchdog, stop_group

__all__ = ["Standby", "env_differences", "main_block_outcome", "prefork_children"]

_STANDBY_FILE = Path(__file__).resolve().with_name("_standby.py")


def env_differences(have: Mapping[str, str], want: Mapping[str, str]) -> dict[str, str | None]:
    """The variables ``want`` sets differently from ``have`` (None: ``want`` does not set it)."""
    names = set(have) | set(want)
    return {k: want.get(k) for k in sorted(names) if have.get(k) != want.get(k)}


def _tagged(log_path: Path, tag: str) -> list[str] | None:
    """What follows ``tag`` on each of the server log's lines that carry it; None where unreadable."""
    try:
        return [ln.split(tag, 1)[1] for ln in log_path.read_text(errors="replace").splitlines() if tag in ln]
    except OSError:
        return None


def main_block_outcome(log_path: Path) -> dict[str, Any] | None:
    """What became of a standby's imports from its module's main block, from the server log: each
    checked where the launcher asked for it (``checked``: the line), or the process re-executed as a
    fresh launch (``relaunched``: why); None where the log says neither."""
    lines = _tagged(log_path, MAIN_BLOCK_TAG)
    if lines is None:
        return None
    checked = next((ln.split(CHECKED, 1)[1].strip() for ln in lines if CHECKED in ln), None)
    relaunched = next((ln.split(RELAUNCHED, 1)[1].strip() for ln in lines if RELAUNCHED in ln), None)
    if checked is None and relaunched is None:
        return None
    return {"checked": checked, "relaunched": relaunched}


def prefork_children(log_path: Path) -> dict[str, Any] | None:
    """How a server's child processes were started, from the lines ``measure.prefork`` writes to
    its log: ``forked`` and ``spawned`` counts, each spawn's reason and what each forked child bound
    again (``rebound``: "VARIABLE: PROBE (...) -> VALUE in N place(s): ..."); None where it wrote none."""
    lines = [ln.strip() for ln in _tagged(log_path, PREFORK_TAG) or ()]
    if not lines:
        return None
    spawned = [ln.split(SPAWNED, 1)[1] for ln in lines if SPAWNED in ln]
    return {"forked": sum(FORKED in ln for ln in lines),
            "spawned": len(spawned), "why_spawned": spawned,
            "rebound": [ln.split(REBOUND, 1)[1] for ln in lines if ln.startswith(REBOUND)]}


class Standby:
    """One standby launcher process (see the module's text).

    Args:
        python: The interpreter the server would be run with.
        module: The module the server runs (``python -m MODULE``).
        preimport: What ``MODULE`` imports before its main block.
        env: The whole environment the next server is expected to have.
        cwd: Where it runs until the hand-over (the server's own is given then).
        late_env: Patterns (``fnmatch``) of the variables that may differ at the hand-over.
        log_path: Where its own output goes until then (import errors), appended.
        grace_s: The reaper's grace between SIGTERM and SIGKILL.
        prefork: What the server's child processes import, imported meanwhile by a fork server the
            standby starts (``measure.prefork``, ``autotune/server/_prefork/autotune_prefork.py``);
            empty: none.
        prefork_scans: The prefixes of the variables each module known to iterate the environment
            while imported keeps (:attr:`autotune.backend.Backend.prefork_scans`).
        prefork_rebind: The variables the ``prefork`` modules bind at import that each forked child
            binds again (:attr:`autotune.backend.Backend.prefork_rebind`).

    Raises:
        OSError: It could not be started.
    """

    def __init__(self, *, python: str, module: str, preimport: Sequence[str], env: Mapping[str, str],
                 cwd: str, late_env: Sequence[str], log_path: Path, grace_s: float = 10.0,
                 prefork: Sequence[str] = (), prefork_scans: Mapping[str, Sequence[str]] | None = None,
                 prefork_rebind: Mapping[str, Mapping[str, str]] | None = None, main_block: Sequence[str] = (),
                 plugin_groups: Sequence[str] = ()) -> None:
        self.python, self.module = python, module
        self.env = dict(env)
        self.late_env = tuple(late_env)
        self.log_path = log_path
        self.grace_s = grace_s
        self.started_at = time.monotonic()
        self.import_s: float | None = None
        #: The fork server's report once ready (``ok``, ``why_not``, ``pid``, ``import_s``, ...);
        #: None without ``prefork``.
        self.prefork: dict[str, Any] | None = None
        self._ready = False
        #: Its own imports are done and only its fork server's are not (it said so).
        self.imports_done = False
        self._said = b""
        self._taken = False
        self._roots: dict[str, str | None] = {}
        #: What its imports from the module's main block came to (``modules``, ``why_not``); None
        #: without ``main_block``.
        self.main_block: dict[str, Any] | None = None
        fork: tuple[str, ...] = ()
        scans = {k: list(v) for k, v in (prefork_scans or {}).items()}
        if main_block:
            fork = ("--main-block", json.dumps({
                "modules": list(main_block), "late": list(late_env), "unless": list(plugin_groups), "scans": scans}))
        #: The fork server's orders until the standby reads (and removes) them.
        self._spec: Path | None = None
        if prefork:
            # In a file, which the standby removes once read: thousands of module names pass the
            # kernel's limit for one argument.
            with tempfile.NamedTemporaryFile("w", dir=log_path.parent, prefix="prefork-spec-", suffix=".json",
                                             delete=False) as spec:
                json.dump({"modules": list(prefork), "dir": str(log_path.parent), "scans": scans,
                           "rebind": {k: dict(v) for k, v in (prefork_rebind or {}).items()}}, spec)
            fork, self._spec = (*fork, "--prefork", spec.name), Path(spec.name)
        with open(log_path, "ab") as log:
            try:
                self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                    [python, str(_STANDBY_FILE), module, *preimport, *fork],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=log, env=self.env, cwd=cwd, start_new_session=True,
                    close_fds=True)
            except BaseException:
                self._drop_spec()
                raise
            try:
                self.watchdog: subprocess.Popen[bytes] | None = start_watchdog(self.proc.pid, grace_s=grace_s,
                                                                               log=log)
            except BaseException:
                stop_group(self.proc, grace_s=0.0)
                self._drop_spec()
                raise

    def _drop_spec(self) -> None:
        """The fork server's orders removed where the standby never read them (it removes them)."""
        if self._spec is not None:
            self._spec.unlink(missing_ok=True)

    @property
    def pid(self) -> int:
        """The process's pid (the server's, once handed over)."""
        return self.proc.pid

    def ready(self, timeout_s: float = 0.0) -> bool:
        """Whether it has imported everything and waits; waits up to ``timeout_s`` for it."""
        t_end = time.monotonic() + max(timeout_s, 0.0)
        while not self._ready:
            line = self._line(max(t_end - time.monotonic(), 0.0))
            if line is None:
                return False
            try:
                said = json.loads(line)
            except ValueError:
                return False
            if said.get("importing"):  # its own imports done, its fork server's not yet
                self.imports_done = True
                self.import_s = said.get("import_s")
                continue
            self._ready = bool(said.get("ready"))
            self.import_s = said.get("import_s")
            self._roots = dict(said.get("roots") or {})
            self.prefork = said.get("prefork")
            self.main_block = said.get("main_block")
            if not self._ready:
                return False
        return True

    def _line(self, timeout_s: float) -> bytes | None:
        """Its next line on stdout, waiting up to ``timeout_s``; None where none came (or it exited).
        Read from the descriptor itself: two lines that arrive together both count."""
        t_end = time.monotonic() + timeout_s
        while b"\n" not in self._said:
            if self.proc.poll() is not None or self.proc.stdout is None or self.proc.stdout.closed:
                return None
            fd = self.proc.stdout.fileno()
            if not select.select([fd], [], [], max(t_end - time.monotonic(), 0.0))[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._said += chunk
        line, self._said = self._said.split(b"\n", 1)
        return line

    def drop_prefork(self, why: str, *, timeout_s: float) -> bool:
        """Where its own imports are done and only its fork server's are not: the fork server
        ended (``why`` goes into its report), and the standby kept without one. Returns whether it
        is ready then, within ``timeout_s``."""
        if self.ready():
            return True
        if not self.imports_done or self._taken or self.proc.stdin is None or self.proc.poll() is not None:
            return False
        try:
            self.proc.stdin.write((json.dumps({"drop_prefork": why}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return False
        return self.ready(timeout_s)

    def cpu_s(self) -> float | None:
        """Its CPU seconds so far, with its fork server's (user and system, from ``/proc``); None
        where unreadable."""
        return session_cpu_s(self.proc.pid)

    def why_not(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None) -> str | None:
        """Why this standby cannot become the server ``argv`` in ``env`` and ``cwd``; None if it can."""
        if self._taken:
            return "it was handed over already"
        if self.proc.poll() is not None:
            return f"it exited ({self.proc.returncode}; its log: {self.log_path})"
        if not self.ready():
            return "it is still importing"
        if list(argv[:3]) != [self.python, "-m", self.module]:
            return f"another program ({' '.join(argv[:3])}, not {self.python} -m {self.module})"
        folder = Path(cwd or os.getcwd())
        shadow = [root for root, origin in sorted(self._roots.items()) if _shadowed(folder, root, origin)]
        if shadow:
            return (f"its working directory {folder} holds {', '.join(shadow)}, which a fresh launch "
                    "would import from there")
        early = sorted(k for k in env_differences(self.env, env) if not is_late(k, self.late_env))
        if early:
            return f"the environment differs in {', '.join(early)}, which its imports may have read"
        return None

    def hand_over(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None,
                  log_path: Path) -> subprocess.Popen[bytes]:
        """Make it the server ``argv`` in ``cwd`` (checked by :meth:`why_not` first), logging to
        ``log_path``; the caller owns the returned process and :attr:`watchdog` from here.

        Raises:
            ValueError: :meth:`why_not` has a reason.
        """
        why = self.why_not(argv, env=env, cwd=cwd)
        if why is not None:
            raise ValueError(f"the standby cannot run this server: {why}")
        return self._send(argv, env=env, cwd=cwd, log_path=log_path)

    def _send(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None,
              log_path: Path) -> subprocess.Popen[bytes]:
        """The hand-over itself, :meth:`why_not` having said nothing."""
        assert self.proc.stdin is not None
        order = {"args": list(argv[3:]), "log": str(log_path), "cwd": os.path.realpath(cwd or os.getcwd()),
                 "env": env_differences(self.env, env)}
        self.proc.stdin.write((json.dumps(order) + "\n").encode())
        self.proc.stdin.close()
        self._taken = True
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc

    def launch(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | os.PathLike[str] | None,
               log_path: Path) -> tuple[subprocess.Popen[bytes] | None, dict[str, Any]]:
        """The server ``argv`` run by this standby where it can (else it is discarded), and a note:
        ``used``, ``why_not``, ``import_s``, ``started_s_before`` and ``line`` for the server log."""
        folder = None if cwd is None else str(cwd)
        why = self.why_not(argv, env=env, cwd=folder)
        note: dict[str, Any] = {"used": why is None, "why_not": why, "import_s": self.import_s,
                                "started_s_before": round(time.monotonic() - self.started_at, 3),
                                "prefork": self.prefork, "main_block": self.main_block}
        if why is not None:
            self.discard()
            note["line"] = f"standby not used: {why}"
            return None, note
        try:
            proc = self._send(argv, env=env, cwd=folder, log_path=log_path)  # checked just above
        except OSError as exc:  # it died between the check and the hand-over: launch afresh
            self.discard()
            note.update(used=False, why_not=f"the hand-over failed: {exc}", line=f"standby not used: {exc}")
            return None, note
        pre = self.prefork
        forks = "" if pre is None else (
            f"; its fork server (pid {pre.get('pid')}) imported the child processes' modules in {pre.get('import_s')} s"
            if pre.get("ok") else f"; no fork server: {pre.get('why_not')}")
        note["line"] = (f"launched by a standby started {note['started_s_before']:.1f} s earlier, its imports "
                        f"done in {self.import_s} s{forks} (autotune.server.standby)")
        return proc, note

    def take_watchdog(self) -> subprocess.Popen[bytes] | None:
        """The reaper sidecar, for the owner of the handed-over server (this standby lets go of it)."""
        reaper, self.watchdog = self.watchdog, None
        return reaper

    def discard(self) -> None:
        """End it, if it was not handed over: end of file on its stdin, then its group killed."""
        if self._taken:
            return
        self._taken = True
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        try:
            self.proc.wait(timeout=2.0)  # it leaves by itself at end of file (it started nothing yet)
        except subprocess.TimeoutExpired:
            stop_group(self.proc, grace_s=min(self.grace_s, 2.0))
        reaper, self.watchdog = self.watchdog, None
        if reaper is not None:
            release_watchdog(reaper)
        self._drop_spec()


def _shadowed(folder: Path, root: str, origin: str | None) -> bool:
    """Whether ``python -m`` run in ``folder`` would import the top-level module ``root`` from
    ``folder`` (first on its path), and not from ``origin``, where the standby imported it."""
    if origin is None:
        return False  # built in: no path entry can shadow it
    # A regular package, a module or an extension there would win; a folder without __init__.py
    # is only a namespace portion, which loses to a module found anywhere on the path.
    found = [p for p in (folder / root / "__init__.py", folder / f"{root}.py", *folder.glob(f"{root}.*.so"))
             if p.exists()]
    if not found:
        return False
    there = os.path.realpath(found[0].parent if found[0].name == "__init__.py" else found[0])
    return not (origin == there or origin.startswith(there + os.sep))
