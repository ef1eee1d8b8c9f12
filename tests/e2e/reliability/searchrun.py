"""Running ``python -m autotune.search`` as a real subprocess, and reading back what it left:
Ray Tune's trial directories, the Optuna study in the searcher checkpoint, and the MLflow store.

The CLI runs with the test's directory as its working directory (that is the search's root:
``mlruns/`` goes there) and with the test's token in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.reliability.procs import TOKEN_ENV

REPO = Path(__file__).resolve().parents[3]


def cli_env(token: str, **extra: str) -> dict[str, str]:
    """The environment of a CLI run: this one, the token, no inherited Ray address."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTEST_CURRENT_TEST")}
    env.update({TOKEN_ENV: token, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1", **extra})
    return env


def cli_argv(space: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "autotune.search", "--space", str(space), *args]


def run_cli(space: Path, *args: str, root: Path, token: str, timeout_s: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion; stdout and stderr captured as text."""
    return subprocess.run(cli_argv(space, *args), cwd=root, env=env or cli_env(token), check=False,
                          capture_output=True, text=True, timeout=timeout_s)


def start_cli(space: Path, *args: str, root: Path, token: str, log: Path,
              **extra_env: str) -> subprocess.Popen[bytes]:
    """Start the CLI in the background (its output goes to ``log``); for interrupt tests."""
    with open(log, "ab") as out:
        return subprocess.Popen(cli_argv(space, *args), cwd=root, env=cli_env(token, **extra_env),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@dataclass
class SearchDir:
    """A search's leftovers under ``<root>/mlruns``."""

    root: Path
    name: str

    @property
    def ray_root(self) -> Path:
        return self.root / "mlruns" / "ray" / self.name

    def run_dirs(self) -> list[Path]:
        return sorted(p for p in self.ray_root.glob("run-*") if p.is_dir())

    def trial_results(self) -> dict[str, dict[str, Any]]:
        """Ray Tune's last reported result of every trial that reported (trial id -> result)."""
        out: dict[str, dict[str, Any]] = {}
        for run in self.run_dirs():
            for result in run.glob("trainable_*/result.json"):
                lines = [ln for ln in result.read_text().splitlines() if ln.strip()]
                if lines:
                    data = json.loads(lines[-1])
                    out[data["trial_id"]] = data
        return out

    def searcher(self) -> Any:
        """Ray's Optuna searcher as saved in the newest checkpoint of the newest run."""
        from ray.tune.search.optuna import OptunaSearch

        searcher = OptunaSearch()
        searcher.restore_from_dir(str(self.run_dirs()[-1]))
        return searcher

    def optuna_mismatches(self) -> list[str]:
        """Where the Optuna study disagrees with Ray Tune's trials: every Tune trial must map to
        one COMPLETE Optuna trial with the same suggested values and the same verdict."""
        import optuna

        searcher = self.searcher()
        study = searcher._ot_study
        problems = []
        for trial_id, result in self.trial_results().items():
            ot = searcher._ot_trials.get(trial_id)
            if ot is None:
                problems.append(f"Tune trial {trial_id} has no Optuna trial")
                continue
            frozen = study.trials[ot.number]
            if frozen.state != optuna.trial.TrialState.COMPLETE:
                problems.append(f"{trial_id}: Optuna trial {frozen.number} is {frozen.state.name}")
            config = result.get("config") or {}
            if any(config.get(k) != v for k, v in frozen.params.items()):
                problems.append(f"{trial_id}: Optuna params {frozen.params} vs Tune config {config}")
            if frozen.user_attrs.get("status") != result.get("status"):
                problems.append(f"{trial_id}: Optuna status {frozen.user_attrs.get('status')} vs "
                                f"Tune {result.get('status')}")
        return problems

    def tracker(self, tracking_uri: str | None = None) -> Any:
        """A read-only MLflow tracker on the search's local store (or on ``tracking_uri``)."""
        from autotune.tracking.tracker import Tracker

        return Tracker(self.name, root=str(self.root), tracking_uri=tracking_uri).connect(create=False)

    def mlflow_view(self, tracking_uri: str | None = None) -> dict[str, Any]:
        """Parent runs and their trial runs, with the facts the tests check."""
        tracker = self.tracker(tracking_uri)
        parents = tracker.parent_runs()
        runs = []
        for parent in parents:
            runs.extend(tracker.trial_runs(parent.info.run_id))
        trial_ids = [r.trial_id for r in runs if r.kind == "trial"]
        dupes = sorted(t for t, n in Counter(trial_ids).items() if n > 1)
        return {
            "parents": [(p.info.run_id, p.info.status) for p in parents],
            "runs": runs,
            "trial_runs": [r for r in runs if r.kind == "trial"],
            "duplicate_trial_ids": dupes,
            "running": [r.run_id for r in runs if r.mlflow_status == "RUNNING"]
            + [p.info.run_id for p in parents if p.info.status == "RUNNING"],
        }

    def artifact_text(self, run_id: str, name: str) -> str | None:
        """An artifact of a run as text, None if it was not logged."""
        client = self.tracker().client
        names = {a.path for a in client.list_artifacts(run_id)}
        if name not in names:
            return None
        local = client.download_artifacts(run_id, name, dst_path=str(self.root / "downloads" / run_id))
        return Path(local).read_text()
