"""``workload.source: sglang:<dataset>``: the cases in ``sglang_datasets_cases.py``, run in the
environment with SGLang's dataset loaders (``.venv-sglang-data``, built by ``make test``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DATA_PYTHON = REPO / ".venv-sglang-data" / "bin" / "python"


@pytest.mark.slow  # 37 s at load ~8 (make test-fast leaves it out)
def test_sglang_dataset_sources_in_an_environment_with_sglangs_loaders() -> None:
    if not DATA_PYTHON.exists():
        pytest.fail(f"{DATA_PYTHON} is missing: `make test` builds it (SGLang's dataset loaders and "
                    "transformers beside the main environment)")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([str(DATA_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/unit/sglang/sglang_datasets_cases.py"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=280, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout and "skipped" not in proc.stdout
