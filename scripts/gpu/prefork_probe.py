"""How much of the scheduler process's imports a fork server could hold without initialising CUDA.

    python3 scripts/gpu/prefork_probe.py [--out DIR] [--budget-s S]   (in the GPU kit's environment)

A process forked after ``cuInit`` cannot use the GPU, and SGLang 0.5.17's scheduler imports
initialise it: ``sgl_kernel`` picks its kernel build by the GPU's compute capability when imported
(``sgl_kernel.load_utils._get_compute_capability``: ``torch.cuda.current_device()``). So
``measure.prefork`` can hold only what is imported before that. Up to four fresh interpreters, each
importing what SGLang's scheduler and detokenizer processes import (``CHILD_MODULES``, torch's CUDA
check through NVML as in the fork server):

- ``full``: all of it, timed, with the modules fully imported when torch first initialises CUDA
  (its ``_lazy_init``), the stack that got there, and every site that asked CUDA during the imports
  (the innermost caller outside torch of each ``_lazy_init``, when first and how often);
- ``full`` again with torch's device questions answered without CUDA, as the fork server answers
  them (``autotune_prefork_cuda``: the current device, its capability and name from NVML, and
  ``torch.get_device_module()``), where NVML gives a capability: how much further a fork server
  gets with those answers;
- ``split`` (twice; answered likewise where the second ``full`` ran): the modules held by the last
  ``full`` first, timed, then whether the driver was initialised by them
  (``cuDeviceGetCount`` answers CUDA_ERROR_NOT_INITIALIZED, 3, before ``cuInit``, and asking
  initialises nothing), then the rest, timed: the rest is what a forked child would still import.

Printed, and written to ``DIR/prefork-probe.json``; the modules imported before the
initialisation, in their order, to ``DIR/prefork-modules.txt`` (``scripts/gpu/prefork_call.sh``
hands them to the A/B).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

# The fork server's own check (standard library only: nothing of autotune's dependencies is loaded).
from autotune.server._prefork.autotune_prefork_cuda import (  # noqa: E402
    answer_when_imported,
    differences,
    nvml_identity,
)
from autotune.server._prefork.autotune_prefork_driver import DriverWatch, driver_initialised  # noqa: E402

#: Where sglang.srt.entrypoints.engine's children start: run_scheduler_process, run_detokenizer_process.
CHILD_MODULES = ("sglang.srt.managers.scheduler", "sglang.srt.managers.detokenizer_manager")


def _done(name: str, module: Any) -> bool:
    spec = getattr(module, "__spec__", None)
    return (module is not None and name not in ("__main__", "__mp_main__") and not name.startswith("autotune")
            and not getattr(spec, "_initializing", False))


def _held() -> list[str]:
    """The modules fully imported now whose packages are too, in import order: importing one of
    them alone then imports nothing more (a submodule finished while its package's ``__init__`` still
    runs would run the rest of that ``__init__`` when imported alone, and whatever it asks)."""
    done = {n for n, m in list(sys.modules.items()) if _done(n, m)}
    return [n for n in list(sys.modules) if n in done
            and all(".".join(n.split(".")[:i]) in done for i in range(1, n.count(".") + 1))]


def _answers(answer: bool) -> Any:
    """The fork server's answers to torch's device questions (None where not asked for or NVML cannot
    give them); attached once torch.cuda is imported."""
    return answer_when_imported(nvml_identity()) if answer else None


class _Inits:
    """torch's ``_lazy_init`` watched from now until :meth:`stop`: when and where CUDA was first
    initialised, the modules held then, and every site that asked (each one a fork server would have
    to answer without CUDA before it could hold the modules after the first)."""

    def __init__(self, torch: Any) -> None:
        self._torch, self._real = torch, torch.cuda._lazy_init
        self._torch_dir = os.path.dirname(torch.__file__) + os.sep
        self._asks: dict[str, dict[str, Any]] = {}
        self.t0 = time.monotonic()
        self.at_s: float | None = None
        self.held: list[str] | None = None
        self.stack: str | None = None
        torch.cuda._lazy_init = self._lazy_init

    def _lazy_init(self) -> None:
        at_s = round(time.monotonic() - self.t0, 2)
        if self.held is None and not self._torch.cuda.is_initialized():
            self.at_s, self.held = at_s, _held()
            self.stack = "".join(traceback.format_stack(limit=30))
        site = _caller(traceback.extract_stack(limit=40), self._torch_dir)
        ask = self._asks.setdefault(site, {"site": site, "first_at_s": at_s, "count": 0})
        ask["count"] += 1
        self._real()

    def asks(self) -> list[dict[str, Any]]:
        return sorted(self._asks.values(), key=lambda a: float(a["first_at_s"]))

    def stop(self) -> None:
        self._torch.cuda._lazy_init = self._real


def full(modules: list[str], *, answer: bool = False) -> dict[str, Any]:
    answers = _answers(answer)
    watch = DriverWatch().start()  # where the driver is first initialised, through torch or not
    import torch

    inits = _Inits(torch)
    for name in modules:
        __import__(name)
    inits.stop()
    watch.stop()
    found: dict[str, Any] = {"before_init": inits.held, "stack": inits.stack, "init_at_s": inits.at_s,
                             "import_s": round(time.monotonic() - inits.t0, 2), "asks": inits.asks(),
                             "driver_init": watch.report()}
    found["answered"] = None if answers is None else {"capability": answers.capability, "name": answers.identity.name,
                                                      "given": dict(answers.given)}
    identity = nvml_identity()
    if identity is not None and torch.cuda.is_initialized():
        # What NVML says against what CUDA says, on this host: the answers' exactness, measured.
        found["nvml"] = {"capability": identity.capability, "name": identity.name,
                         "differences": differences(torch.cuda, identity,
                                                    accelerator=torch._C._get_accelerator().type)}
    if inits.held is None:  # nothing initialised CUDA: every module could be held
        found["imported"] = _held()
    found["initialised"] = driver_initialised()
    # A thread started by an import stops forks too (the fork server's status says so).
    import threading

    found["threads"] = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
    return found


def _caller(stack: traceback.StackSummary, torch_dir: str) -> str:
    """The innermost frame outside torch and this script (the module that asked CUDA), and the torch
    function it called: ``FILE:LINE FUNCTION -> torch.API``."""
    called = "?"
    for frame in reversed(stack):
        if frame.filename == __file__:
            continue
        if frame.filename.startswith(torch_dir):
            called = frame.name
            continue
        return f"{frame.filename}:{frame.lineno} {frame.name} -> torch {called}"
    return f"torch {called}"


def split(modules: list[str], first: list[str], *, answer: bool = False) -> dict[str, Any]:
    answers = _answers(answer)
    import torch

    inits = _Inits(torch)  # where the held modules initialised CUDA, if they did
    t0 = time.monotonic()
    failed = []
    for name in first:
        try:
            __import__(name)
        except Exception as exc:  # noqa: BLE001 (reported: a module that fails alone)
            failed.append(f"{name}: {type(exc).__name__}")
    first_s = round(time.monotonic() - t0, 2)
    initialised = driver_initialised()
    inits.stop()
    if answers is not None:
        answers.detach()  # as the fork server does after its imports
    t1 = time.monotonic()
    for name in modules:
        __import__(name)
    return {"first_s": first_s, "first_initialised": initialised, "first_init_stack": inits.stack,
            "first_failed": failed[:20],
            "rest_s": round(time.monotonic() - t1, 2)}


def _child(mode: str, modules: list[str], first: list[str] | None = None, *, answer: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    # In a file: thousands of module names pass the kernel's limit for one argument.
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"mode": mode, "modules": modules, "first": first or [], "answer": answer}, f)
    try:
        done = subprocess.run([sys.executable, __file__, "--child", f.name], capture_output=True, text=True,
                              env=env, timeout=300)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        return {"error": done.stderr[-3000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _say(what: str, run: dict[str, Any]) -> None:
    if "error" in run:
        print(f"{what}: the imports failed:\n{run['error']}", flush=True)
        return
    shown = {k: v for k, v in run.items() if k not in ("before_init", "stack", "asks", "imported", "driver_init")}
    held = run.get("before_init")
    print(f"{what}: {json.dumps(shown)}; " + (f"{len(held)} modules imported before CUDA's first initialisation"
                                              if held is not None else "CUDA not initialised by the imports"),
          flush=True)
    print(run.get("stack") or "", flush=True)
    driver = run.get("driver_init") or {}
    print(f"the CUDA driver first initialised (torch or not, {driver.get('checks')} checks): "
          f"{driver.get('where') or 'not during the imports'}", flush=True)
    print(driver.get("stack") or "", flush=True)
    asks = run.get("asks") or []
    print(f"sites that asked CUDA during the imports ({len(asks)}; a fork server would have to answer each "
          "without CUDA to hold the modules after the first):", flush=True)
    for ask in asks:
        print(f"  at {ask['first_at_s']} s, {ask['count']}x: {ask['site']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--budget-s", type=float, default=None, help="ignored (ab_call.sh passes it)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--answered-only", action="store_true",
                    help="only the imports with the device questions answered (where NVML gives the answers), "
                         "no split: where CUDA is first initialised, in the least device time")
    args = ap.parse_args(argv)
    if args.child is not None:
        order = json.loads(Path(args.child).read_text())
        answer = bool(order.get("answer"))
        result = (full(order["modules"], answer=answer) if order["mode"] == "full"
                  else split(order["modules"], order["first"], answer=answer))
        print(json.dumps(result))
        return 0
    modules = list(CHILD_MODULES)
    if args.answered_only and nvml_identity() is not None:
        only: dict[str, Any] = {"modules": modules, "full_answered": _child("full", modules, answer=True)}
        _say("full, device questions answered without CUDA", only["full_answered"])
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "prefork-probe.json").write_text(json.dumps(only, indent=1))
        return 0
    report: dict[str, Any] = {"modules": modules, "full": _child("full", modules)}
    _say("full", report["full"])
    answered = nvml_identity() is not None
    if answered:  # the fork server answers the device questions too: how far it gets with them
        report["full_answered"] = _child("full", modules, answer=True)
        _say("full, device questions answered without CUDA", report["full_answered"])
    pick = report.get("full_answered") or report["full"]
    first = pick.get("before_init")
    if first is None and "error" not in pick:
        first = pick.get("imported")  # nothing initialised CUDA: all of it
    first = first or []
    report["split"] = [_child("split", modules, first, answer=answered) for _ in range(2)] if first else []
    for run in report["split"]:
        print(f"split: {json.dumps(run)}", flush=True)
    tops = sorted({n.split(".", 1)[0] for n in first})
    print(f"top-level packages before the initialisation ({len(tops)}): {' '.join(tops)}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "prefork-probe.json").write_text(json.dumps(report, indent=1))
        # What a fork server can import without CUDA: scripts/gpu/standby_ab.py --prefork-modules.
        (args.out / "prefork-modules.txt").write_text("".join(f"{n}\n" for n in first))
    return 0


if __name__ == "__main__":
    sys.exit(main())
