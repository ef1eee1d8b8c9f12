"""MLflow's usage telemetry stays off in autotune's processes unless the user turns it on.

Offline (a GPU cluster, CI), MLflow's telemetry thread fails to fetch its config and then pops
``_MLFLOW_TELEMETRY_SESSION_ID`` from ``os.environ`` while an HTTP request may be iterating it: the
request fails with ``KeyError('_MLFLOW_TELEMETRY_SESSION_ID')``. That failed an ``autotune sync``
in the reliability tests. Each case is a fresh interpreter with an environment MLflow does not
take for CI or a test run (else it turns telemetry off by itself and the check could not fail).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# MLflow turns telemetry off by itself under these (mlflow/telemetry/utils.py), and on request.
_MLFLOW_OFF_SIGNALS = ("PYTEST_CURRENT_TEST", "GITHUB_ACTIONS", "CI", "CIRCLECI", "GITLAB_CI",
                       "JENKINS_URL", "TRAVIS", "TF_BUILD", "BITBUCKET_BUILD_NUMBER",
                       "CODEBUILD_BUILD_ARN", "BUILDKITE", "TEAMCITY_VERSION", "CLOUD_RUN_EXECUTION",
                       "RUNBOT_HOST_URL", "RUNBOT_BUILD_NAME", "RUNBOT_WORKER_ID", "DO_NOT_TRACK",
                       "MLFLOW_DISABLE_TELEMETRY", "_MLFLOW_TELEMETRY_SESSION_ID")

_PROBE = """
import json, os, sys
first = sys.argv[1]
if first == "mlflow":
    import mlflow
else:
    import autotune.tracking.tracker
from mlflow.telemetry.client import get_telemetry_client
print(json.dumps({"client": get_telemetry_client() is not None,
                  "session_id_in_environ": "_MLFLOW_TELEMETRY_SESSION_ID" in os.environ,
                  "disable": os.environ.get("MLFLOW_DISABLE_TELEMETRY")}))
"""


def _probe(first: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _MLFLOW_OFF_SIGNALS}
    env.update(extra, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", _PROBE, first], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_plain_mlflow_here_would_start_its_telemetry_so_the_check_below_can_fail() -> None:
    assert _probe("mlflow") == {"client": True, "session_id_in_environ": True, "disable": None}


@pytest.mark.slow  # 8 s at load ~8 (make test-fast leaves it out)
def test_autotune_tracking_turns_mlflow_telemetry_off() -> None:
    assert _probe("autotune") == {"client": False, "session_id_in_environ": False, "disable": "true"}


def test_a_users_explicit_setting_is_kept() -> None:
    assert _probe("autotune", MLFLOW_DISABLE_TELEMETRY="false") == {
        "client": True, "session_id_in_environ": True, "disable": "false"}
