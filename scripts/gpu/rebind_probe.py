"""Does a child forked from the fork server bind its own forced accept length? (``measure.prefork``
with synthetic acceptance, ``autotune/server/_prefork/autotune_prefork_rebind.py``.)

    python3 scripts/gpu/rebind_probe.py --out DIR [--budget-s 150] [--values 2.756,unset]
    bash scripts/gpu/ab_call.sh rebind_probe 150          # on a GPU host; carry .gpu/kit

For each value: a standby with the backend's fork server (its real modules: SGLang's scheduler and
detokenizer), started with another value of the variable, launches a small launcher that, as
SGLang's does, sets the ``spawn`` start method and starts one child with ``mp.Process``. The child
reports what SGLang's modules bound: each module's global of that name and each function default
of the parameter of that name in the binding module, and what the reader says now. No server, no
GPU memory: what it checks is the import-time state the scheduler would start from.

Printed and written to ``DIR/rebind-probe.json``: the fork server's status for the variable (sites
found, or why refused), whether the child was forked, the server log's "rebound" line, and the
child's bindings. PASS where every child was forked and every binding equals its own value; exit 1
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from autotune.backend import get_backend  # noqa: E402
from autotune.server.group import release_watchdog, stop_group  # noqa: E402
from autotune.server.standby import Standby, prefork_children  # noqa: E402
from autotune.sglang.speculative import SIMULATE_ACC_LEN_ENV, SIMULATE_ACC_LEN_UNSET  # noqa: E402

# What SGLang's launcher imports before it starts its children is imported here too (``PREIMPORT``:
# the backend's preimport and main block): its imports set variables (cache folders, DeepGEMM's)
# that the fork server's imports set as well.
LAUNCH = '''
import importlib, json, multiprocessing as mp, sys
from rbprobe import child

for _name in PREIMPORT:
    try:
        importlib.import_module(_name)
    except ImportError as exc:
        print(f"rbprobe: {_name} not imported: {exc}", flush=True)


def main():
    mp.set_start_method("spawn", force=True)
    r, w = mp.Pipe(duplex=False)
    p = mp.Process(target=child.run, args=(w, json.loads(sys.argv[1])))
    p.start()
    w.close()  # the child's end only: a child that dies unheard is an EOF here, not a hang
    try:
        said = r.recv()
    except EOFError:
        said = {"error": "the child ended without a word (its log is above)"}
    p.join()
    print("RESULT " + json.dumps(said), flush=True)
    sys.exit(p.exitcode)

if __name__ == "__main__":
    main()
'''
CHILD = '''
import importlib, inspect, os, sys, types


def _resolve(path):
    module, _, attrs = path.partition(":")
    obj = importlib.import_module(module)
    for attr in filter(None, attrs.split(".")):
        obj = getattr(obj, attr)
    return obj


def run(w, rebind):
    out = {"pid": os.getpid(), "ppid": os.getppid(), "vars": {}}
    for name, spec in rebind.items():
        module = importlib.import_module(spec["module"])
        glob = spec["global"]
        found = {"env": os.environ.get(name), "reader": _resolve(spec["reader"])(), "globals": {}, "defaults": {}}
        for mod_name, mod in list(sys.modules.items()):
            if isinstance(mod, types.ModuleType) and glob in vars(mod):
                found["globals"][mod_name] = vars(mod)[glob]
        for fn in vars(module).values():
            if isinstance(fn, types.FunctionType):
                for param in inspect.signature(fn).parameters.values():
                    if param.name.lower() == glob.lower() and param.default is not param.empty:
                        found["defaults"][fn.__qualname__] = param.default
        out["vars"][name] = found
    w.send(out)
'''


def _package(root: Path, preimport: list[str]) -> Path:
    (root / "rbprobe").mkdir(parents=True, exist_ok=True)
    launch = f"PREIMPORT = {preimport!r}\n" + textwrap.dedent(LAUNCH)
    for name, text in {"__init__": "", "launch": launch, "child": CHILD}.items():
        (root / "rbprobe" / f"{name}.py").write_text(textwrap.dedent(text))
    return root


def probe(value: str | None, *, start: str | None, out: Path, pkg: Path, rebind: dict[str, Any],
          modules: list[str], scans: dict[str, Any], late: list[str], name: str,
          preimport: list[str]) -> dict[str, Any]:
    """One standby (started with ``start``) launching the probe package ``pkg`` with ``value`` (None:
    unset); its logs under ``out/logs``."""
    base = {k: v for k, v in os.environ.items() if k != name}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pkg), os.environ.get("PYTHONPATH")]))
    env_start = {**base, **({name: start} if start is not None else {})}
    env_run = {**base, **({name: value} if value is not None else {})}
    tag = "unset" if value is None else value
    log_dir = out / "logs" / f"run-{tag}"
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    standby = Standby(python=sys.executable, module="rbprobe.launch", preimport=[*preimport, "rbprobe.child"],
                      env=env_start,
                      cwd=str(log_dir), late_env=late, log_path=log_dir / "standby.log", prefork=modules,
                      prefork_scans=scans, prefork_rebind=rebind)
    row: dict[str, Any] = {"value": value, "fork_server_started_with": start}
    try:
        row["ready"] = standby.ready(timeout_s=240.0)
        row["ready_s"] = round(time.monotonic() - t0, 1)
        pre = standby.prefork or {}
        row["prefork"] = {k: pre.get(k) for k in ("ok", "why_not", "import_s", "skipped", "rebind")}
        if not row["ready"]:
            return row
        log = log_dir / "server.log"
        proc, note = standby.launch([sys.executable, "-m", "rbprobe.launch", json.dumps(rebind)], env=env_run,
                                    cwd=log_dir, log_path=log)
        if proc is None:
            row["why_not"] = note
            return row
        try:
            row["exit"] = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            row["exit"] = "timed out after 120 s"
            stop_group(proc, grace_s=5.0)  # the launched server leads its own group, its children in it
        text = log.read_text(errors="replace")
        said = next((json.loads(ln[7:]) for ln in text.splitlines() if ln.startswith("RESULT ")), None)
        row["child"] = said
        row["children"] = prefork_children(log)
        if said is None:
            row["log_tail"] = text[-3000:]
    finally:
        standby.discard()
        reaper = standby.take_watchdog()
        if reaper is not None:
            release_watchdog(reaper)
    return row


def verdict(row: dict[str, Any], *, name: str, unset: float) -> list[str]:
    """What failed for one probe (empty: it holds)."""
    why = []
    children = row.get("children") or {}
    if children.get("forked") != 1:
        why.append(f"the child was not forked: {children.get('why_spawned') or row.get('prefork')}")
    found = ((row.get("child") or {}).get("vars") or {}).get(name)
    if found is None:
        return [*why, "the child reported nothing"]
    want = unset if row["value"] is None else float(row["value"])
    seen = {"reader": found["reader"], **{f"global {m}": v for m, v in found["globals"].items()},
            **{f"default {f}": v for f, v in found["defaults"].items()}}
    why += [f"{where} is {got!r}, not {want!r}" for where, got in seen.items() if float(got) != want]
    if len(seen) < 3:
        why.append(f"only {len(seen)} binding(s) reported: {sorted(seen)}")
    return why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--values", default="2.756,unset", help="the launched servers' values, comma-separated")
    ap.add_argument("--start", default="3.526", help="the value the standbys are started with ('unset': none)")
    args = ap.parse_args(argv)
    backend = get_backend("sglang")
    name = SIMULATE_ACC_LEN_ENV
    rebind = {k: dict(v) for k, v in backend.prefork_rebind.items()}
    scans = {k: list(v) for k, v in backend.prefork_scans.items()}
    start = None if args.start == "unset" else args.start
    t_end = time.monotonic() + args.budget_s
    rows, failed = [], False
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # The launcher's main block imports more (the model config, the HTTP server), which set
        # variables too (DeepGEMM's DG_JIT_*): a launcher without them would differ from the fork server.
        pkg = _package(Path(tmp), [*backend.preimport, *backend.main_block])
        for value in args.values.split(","):
            if time.monotonic() > t_end - 60:
                print(f"budget spent: {value} not probed", flush=True)
                break
            row = probe(None if value == "unset" else value, start=start, out=args.out, pkg=pkg, rebind=rebind,
                        modules=list(backend.prefork), scans=scans, late=list(backend.late_env), name=name,
                        preimport=list(backend.preimport))
            why = verdict(row, name=name, unset=SIMULATE_ACC_LEN_UNSET)
            failed = failed or bool(why)
            row["failures"] = why
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("value", "ready_s", "prefork", "children", "child")},
                             default=str), flush=True)
            print(("FAIL: " + "; ".join(why)) if why else f"PASS: {value}", flush=True)
    (args.out / "rebind-probe.json").write_text(json.dumps(rows, indent=1, default=str))
    print("PASS" if rows and not failed else "FAIL", flush=True)
    return 0 if rows and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
