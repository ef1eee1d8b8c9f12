"""The real search and its ground truth, one space after another, on whatever GPU is here.

Usage (on the remote GPU host, from the repo root, the kit unpacked; see docs/gpu-validation.md):
    python3 scripts/gpu/real_search.py --out DIR [--deadline-s S] SPACE [SPACE ...]

For each space, in order:
1. ``python -m autotune.search --space SPACE`` (embedded Ray, the space's sampler, real servers,
   MLflow under ``mlruns/``), its summary JSON and console log kept;
2. the sweep: every config of the space that the search did not measure, through
   ``python -m autotune.trial --json`` with the search's own baseline store and the same
   workload, so ``DIR/NAME/sweep/`` plus the search's trials cover the whole space;
3. ``python -m autotune.export`` of the winner (checked by the installed SGLang's parser), written
   with the search's records before the sweep starts;
4. a count of server processes left behind (there must be none).

With ``--resume`` (a plan restored onto a fresh host by ``scripts/gpu/state.sh``) it keeps what the
earlier hosts finished: a search that ended is not run again, an interrupted one continues
(``autotune.search.run --resume``), a finished sweep slot is kept. Before sweeping on a host that took
over a finished search it re-measures the winner beside a fresh baseline (``anchors/``): the rest of
the sweep is judged against this host's baseline, and the winner's two figures say how far the
hosts agree.

Variants for the multi-GPU plans (``scripts/gpu/plan_x2.sh``, ``plan_x8.sh``): ``--sweep FILE``
sweeps only the configs listed there (a JSON list of params), ``--sweep-first`` measures them
before the search, beside a baseline store of their own, so the search's verdict can be held
against an independent sweep; ``--alone`` re-measures every config a concurrent search measured,
alone, on the GPU its trial had (``alone.py``).

Everything is run in the working directory, whose ``mlruns/`` holds the MLflow store and Ray's
state, as ``python -m autotune.search`` does by default.

``--deadline-s`` is the time left for all of it: a step that cannot finish in time is skipped and
said so in ``DIR/plan.json``, which is rewritten after every step, so a cut run still tells what it
did. Nothing here knows whether the servers are real SGLang or the emulator.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # alone.py beside it

from autotune.space.search_space import load_space  # noqa: E402
from autotune.space.trial_config import config_key  # noqa: E402

# Seconds one trial server run takes, for the deadline: with prefill CUDA graphs and 4 x 768 tokens
# a repeat, the 8B search's 8 servers took 132 s each (sixth GPU run); a MoE trial about 180 s.
TRIAL_S = float(os.environ.get("AUTOTUNE_GPU_TRIAL_S", "150"))
# Command lines of servers and of SGLang's own subprocesses (it retitles them "sglang::scheduler...").
SERVER_MODULES = ("sglang.launch_server", "autotune.sim.server", "sglang::")


# Every process this plan starts inherits this mark, so the orphan count sees only the plan's own
# servers (escaped ones too), not those of anything else running on the machine.
PLAN_MARK = ("AUTOTUNE_GPU_PLAN", uuid.uuid4().hex)
os.environ[PLAN_MARK[0]] = PLAN_MARK[1]


def server_pids() -> list[int]:
    """Pids of inference servers (real or emulated) this plan started that are still running."""
    mark = f"{PLAN_MARK[0]}={PLAN_MARK[1]}".encode()
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not any(m in cmd for m in SERVER_MODULES) or "real_search.py" in cmd:
                continue
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                out.append(int(proc.name))
        except OSError:
            continue
    return out


def plain_params(params: dict) -> dict:
    """A record's params as the space file spells them: a search narrowed by its NCCL pre-screen
    adds the kept candidate's name (``nccl_candidate``) beside the NCCL_* values it stands for."""
    return {k: v for k, v in params.items() if k != "nccl_candidate"}


def search_results(name: str) -> list[dict]:
    """Every trial result the search reported to Ray (finalists included), from its result.json."""
    found = []
    for path in sorted(glob.glob(str(Path.cwd() / "mlruns" / "ray" / name / "run-*" / "**" / "result.json"),
                                 recursive=True)):
        for line in Path(path).read_text().splitlines():
            try:
                row = json.loads(line)
                found.append(json.loads(row["trial_result"]))
                if row.get("baseline_result"):
                    found.append(json.loads(row["baseline_result"]))
            except (ValueError, KeyError, TypeError):
                continue
    return found


def save_search_records(rows: list[dict], folder: Path) -> int:
    """The search's trial results (:func:`search_results`) as ``python -m autotune.trial --json`` objects, one
    file each, in the order Ray wrote them (a finalist's re-measurement and its fresh baseline
    included). Paths under this checkout are written relative to it, so the files can be committed."""
    from autotune.trial.report import portable_paths, summary_json
    from autotune.trial.result import TrialResult

    folder.mkdir(parents=True, exist_ok=True)
    for i, row in enumerate(rows):
        record = portable_paths(summary_json(TrialResult.from_dict(row)), {str(REPO): ""})
        record.pop("records", None)
        (folder / f"s{i:02d}.json").write_text(json.dumps(record, default=str))
    return len(rows)


def search_finished(summary: Path) -> bool:
    """Whether a search ran to its end: its summary JSON exists and says it was not interrupted."""
    try:
        return json.loads(summary.read_text()).get("interrupted") is False
    except (OSError, ValueError, AttributeError):
        return False


def swept_before(folder: Path, tag: str, params: dict) -> bool:
    """Whether sweep slot ``tag`` already holds a finished measurement of ``params``."""
    try:
        same = json.loads((folder / f"{tag}.params.json").read_text()) == params
        return same and "status" in json.loads((folder / f"{tag}.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def baseline_dir(name: str) -> str | None:
    runs = sorted(glob.glob(str(Path.cwd() / "mlruns" / "ray" / name / "run-*" / "baselines")))
    return runs[-1] if runs else None


def _env() -> dict[str, str]:
    """The environment of the steps: this checkout importable from any working directory (the
    store, ``mlruns/``, is the working directory's)."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


class Plan:
    """The steps done so far, rewritten to ``DIR/plan.json`` after each."""

    def __init__(self, out: Path, deadline_s: float, *, resume: bool = False) -> None:
        self.out, self.t0, self.deadline_s, self.resume = out, time.monotonic(), deadline_s, resume
        self.steps: list[dict] = []
        if resume and (out / "plan.json").exists():
            # The earlier machine's steps stay first; this machine's follow, clock restarted.
            self.steps = json.loads((out / "plan.json").read_text())

    def left(self) -> float:
        return self.deadline_s - (time.monotonic() - self.t0)

    def note(self, **step: object) -> None:
        step["at_s"] = round(time.monotonic() - self.t0, 1)
        self.steps.append(step)
        print(json.dumps(step), flush=True)
        (self.out / "plan.json").write_text(json.dumps(self.steps, indent=1))

    def run(self, cmd: list[str], *, log: Path, limit_s: float) -> tuple[int, float]:
        """Run a step in its own process group; past ``limit_s`` it is interrupted as a user
        would (SIGINT: the search saves its state and stops its trials' servers), then the
        group is terminated. On the H200 a plain kill of the search left 3 servers behind
        until the reaper got them."""
        t = time.monotonic()
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=_env(),
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=max(limit_s, 1))
            except subprocess.TimeoutExpired:
                rc = 124
                for sig, grace in ((signal.SIGINT, 60), (signal.SIGTERM, 20), (signal.SIGKILL, 5)):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        proc.wait(timeout=grace)
                        break
                    except subprocess.TimeoutExpired:
                        continue
        return rc, round(time.monotonic() - t, 1)


def one_space(plan: Plan, space_path: str, *, sweep: list[dict] | None = None, sweep_first: bool = False,
              alone_after: bool = False) -> None:
    """Search, export and sweep one space (see the module's docstring for the variants)."""
    space = load_space(space_path)
    out = plan.out / space.name
    (out / "sweep").mkdir(parents=True, exist_ok=True)
    if sweep_first:
        # An independent ground truth first: its own baseline store, nothing skipped for a search.
        sweep_configs(plan, space, space_path, out, todo=sweep or [], store=str(out / "sweep" / "baselines"))
    kept = search_step(plan, space, space_path, out)
    if kept is None:
        return
    records = search_results(space.name)
    if alone_after:
        import alone

        alone.measure_alone(plan, space, space_path, out, store=baseline_dir(space.name), measure=measure,
                            trial_s=TRIAL_S)
    if sweep_first or sweep == []:
        return
    measured = {config_key(space.coerce_params(plain_params(r["params"]))) for r in records
                if r.get("params") is not None and r.get("status") != "failed"}
    store = baseline_dir(space.name) or str(out / "baselines")
    wanted = list(space.enumerate()) if sweep is None else [space.coerce_params(p) for p in sweep]
    todo = [p for p in wanted if config_key(p) not in measured]
    plan.note(space=space.name, step="sweep-plan", configs=len(wanted), measured_by_search=len(measured),
              to_sweep=len(todo))
    left = [i for i, p in enumerate(todo) if not (plan.resume and swept_before(out / "sweep", f"c{i:02d}", p))]
    if kept and left and plan.left() > 2 * TRIAL_S:
        store = anchor(plan, space, space_path, out, records=records) or store
    sweep_configs(plan, space, space_path, out, todo=todo, store=store)


def search_step(plan: Plan, space: Any, space_path: str, out: Path) -> bool | None:
    """The search and the export of its records; returns whether the search was kept from an
    earlier machine, None when it was skipped for lack of time."""
    name = space.name
    need = TRIAL_S * (space.budget.trials + 2 * max(space.search.finalists, 1) + 1)
    kept = plan.resume and search_finished(out / "summary.json")
    if kept:
        plan.note(space=name, step="search", kept="finished on an earlier machine")
    elif plan.left() < TRIAL_S * 3:
        plan.note(space=name, step="search", skipped=f"{plan.left():.0f} s left")
        return None
    else:
        # An interrupted search brought over from an earlier machine continues where it stopped.
        again = plan.resume and bool(glob.glob(str(Path.cwd() / "mlruns" / "ray" / name / "run-*")))
        log = out / ("search.resumed.log" if again else "search.log")
        rc, wall = plan.run([sys.executable, "-m", "autotune.search", "--space", space_path,
                             "--summary-json", str(out / "summary.json"), *(["--resume"] if again else [])],
                            log=log, limit_s=min(plan.left() - 90, need * 1.5))
        plan.note(space=name, step="search", rc=rc, wall_s=wall, orphans=len(server_pids()),
                  **({"resumed": True} if again else {}))
    # Records and export before the sweep: a plan cut during the sweep (the H200 host was
    # released between two calls once) must still bring back what the search did.
    records = search_results(name)
    save_search_records(records, out / "search")
    rc, wall = plan.run([sys.executable, "-m", "autotune.export", "--name", name, "--format", "sh",
                         "-o", str(out / "export.sh")], log=out / "export.log", limit_s=120)
    plan.note(space=name, step="export", rc=rc, wall_s=wall)
    return kept


def sweep_configs(plan: Plan, space: Any, space_path: str, out: Path, *, todo: list[dict], store: str) -> None:
    """Measure each config of ``todo`` in slot ``sweep/cNN`` (a finished slot of a resumed plan is kept)."""
    name = space.name
    left = [i for i, p in enumerate(todo) if not (plan.resume and swept_before(out / "sweep", f"c{i:02d}", p))]
    for i, params in enumerate(todo):
        if plan.left() < TRIAL_S:
            plan.note(space=name, step="sweep", skipped=len(todo) - i, why=f"{plan.left():.0f} s left")
            break
        tag = f"c{i:02d}"
        if i not in left:
            plan.note(space=name, step="sweep", config=params, kept="measured on an earlier machine")
            continue
        (out / "sweep" / f"{tag}.params.json").write_text(json.dumps(params))
        rc, wall = measure(plan, space_path, params, store=store, json_out=out / "sweep" / f"{tag}.json",
                           workdir=out / "sweep" / f"{tag}-logs")
        plan.note(space=name, step="sweep", config=params, rc=rc, wall_s=wall, orphans=len(server_pids()))


def measure(plan: Plan, space_path: str, params: dict, *, store: str, json_out: Path,
            workdir: Path, env: dict[str, str] | None = None) -> tuple[int, float]:
    """One config through ``python -m autotune.trial --json`` (its baseline from ``store``, measured
    there first if the store has none); the JSON to ``json_out``, stderr beside it. ``env`` adds
    to the step's environment (the alone runs pin their GPU with it)."""
    cmd = [sys.executable, "-m", "autotune.trial", "--space", space_path, "--params", json.dumps(params),
           "--json", "--baseline-store", store, "--workdir", str(workdir)]
    t = time.monotonic()
    with open(json_out, "w") as fh, open(json_out.with_suffix(".err"), "w") as err:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=err, env={**_env(), **(env or {})}, timeout=max(plan.left(), 1),
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, round(time.monotonic() - t, 1)


def anchor(plan: Plan, space: Any, space_path: str, out: Path, *, records: list[dict]) -> str | None:
    """On a host that took over a finished search, re-measure its winner beside a fresh baseline.

    Hosts with the same GPU differ (an H200 read 5-1-6 at 358.6 tok/s where another read 373.8),
    so the rest of the sweep is judged against this host's baseline, and the winner measured on
    both says how far the two hosts' figures can be compared. Returns the new baseline store.
    """
    machine = sum(1 for s in plan.steps if s.get("step") == "start")
    folder = out / "anchors" / f"machine-{machine}"
    folder.mkdir(parents=True, exist_ok=True)
    winner = json.loads((out / "summary.json").read_text()).get("winner_params")
    if not winner:
        return None
    before = [r for r in records if r.get("params") is not None and not r.get("is_baseline")
              and config_key(space.coerce_params(plain_params(r["params"])))
              == config_key(space.coerce_params(plain_params(winner)))]
    rc, wall = measure(plan, space_path, winner, store=str(folder / "baselines"), json_out=folder / "winner.json",
                       workdir=folder / "logs")
    try:
        now = json.loads((folder / "winner.json").read_text())
    except ValueError:
        now = {}
    plan.note(space=space.name, step="anchor", machine=machine, config=winner, rc=rc, wall_s=wall,
              tok_s=now.get("output_tok_s"), baseline_tok_s=now.get("baseline_tok_s"),
              earlier_tok_s=before[0].get("output_tok_s") if before else None,
              earlier_baseline_tok_s=before[0].get("baseline_tok_s") if before else None,
              orphans=len(server_pids()))
    return str(folder / "baselines") if rc == 0 and now.get("baseline_tok_s") else None

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--deadline-s", type=float, default=1500.0)
    parser.add_argument("--resume", action="store_true",
                        help="continue a plan restored from an earlier host (scripts/gpu/state.sh): "
                             "keep what it finished, resume an interrupted search")
    parser.add_argument("--sweep", metavar="FILE",
                        help="sweep only these configs (a JSON list of params) instead of the whole space")
    parser.add_argument("--no-sweep", action="store_true", help="measure nothing beyond the search")
    parser.add_argument("--sweep-first", action="store_true",
                        help="measure the --sweep configs before the search, beside their own baseline store")
    parser.add_argument("--alone", action="store_true",
                        help="after the search, measure each config it measured alone, on its trial's GPU")
    parser.add_argument("spaces", nargs="+")
    args = parser.parse_args()
    if args.sweep_first and not args.sweep:
        parser.error("--sweep-first needs --sweep FILE")
    sweep = [] if args.no_sweep else json.loads(Path(args.sweep).read_text()) if args.sweep else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(out, args.deadline_s, resume=args.resume)
    plan.note(step="start", spaces=args.spaces, orphans_before=len(server_pids()), resume=args.resume)
    for space_path in args.spaces:
        one_space(plan, space_path, sweep=sweep, sweep_first=args.sweep_first, alone_after=args.alone)
    plan.note(step="done", orphans=len(server_pids()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
