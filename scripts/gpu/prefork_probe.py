"""Which import of SGLang's scheduler modules initialises CUDA (``measure.prefork``'s fork server
must not: a process forked after ``cuInit`` cannot use the GPU).

    python3 scripts/gpu/prefork_probe.py [--out DIR] [--budget-s S]   (in the GPU kit's environment)

Imports what the fork server imports (:attr:`autotune.backend.Backend.prefork`, torch's CUDA check
through NVML as there) in this fresh process, watching every import: once the CUDA driver is
mapped, it asks the driver after each import whether it was initialised (``cuDeviceGetCount``
answers CUDA_ERROR_NOT_INITIALIZED, 3, before ``cuInit``, and asking initialises nothing), and
prints the import at which it first was, with the stack of torch's own CUDA initialisation where
that is the path. Written to ``DIR/prefork-probe.json`` as well.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))


def _mapped() -> bool:
    with open("/proc/self/maps") as maps:
        return any("libcuda.so" in line for line in maps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--budget-s", type=float, default=None, help="ignored (ab_call.sh passes it)")
    args = ap.parse_args(argv)
    from autotune.backend import get_backend

    modules = list(get_backend("sglang").prefork)
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    seen: list[str] = []
    found: dict[str, Any] = {"modules": modules, "mapped_at": None, "initialised_at": None, "stacks": []}
    state: dict[str, Any] = {"lib": None}

    def initialised() -> bool:
        if state["lib"] is None:
            if not _mapped():
                return False
            state["lib"] = ctypes.CDLL("libcuda.so.1")
            found["mapped_at"] = seen[-2:] if len(seen) > 1 else list(seen)
        n = ctypes.c_int(0)
        return int(state["lib"].cuDeviceGetCount(ctypes.byref(n))) == 0

    def hook(event: str, hargs: tuple[Any, ...]) -> None:
        if event != "import" or found["initialised_at"] is not None:
            return
        seen.append(str(hargs[0]))
        if len(seen) % 20 == 0 or state["lib"] is not None:
            if initialised():
                found["initialised_at"] = seen[-25:]
                found["stacks"].append("".join(traceback.format_stack(limit=40)))

    import torch  # first: its own import does not touch CUDA, and its hooks go in below

    for name in ("_lazy_init",):
        real = getattr(torch.cuda, name)

        def wrapped(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            if not torch.cuda.is_initialized():
                found["stacks"].append(f"torch.cuda.{_name} called from:\n" + "".join(traceback.format_stack(limit=40)))
            return _real(*a, **k)

        setattr(torch.cuda, name, wrapped)
    sys.addaudithook(hook)
    t0 = time.monotonic()
    error = None
    try:
        for name in modules:
            __import__(name)
    except BaseException as exc:  # report it with the rest
        error = f"{type(exc).__name__}: {exc}"
    found.update(import_s=round(time.monotonic() - t0, 1), error=error, initialised_end=initialised(),
                 torch_initialised=torch.cuda.is_initialized(), imports=len(seen))
    print(json.dumps({k: v for k, v in found.items() if k != "stacks"}, indent=1))
    for stack in found["stacks"][:3]:
        print(stack)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "prefork-probe.json").write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
