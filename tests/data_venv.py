"""The environment beside the main one that has SGLang's dataset loaders, ``transformers`` and
``tokenizers`` (``.venv-sglang-data``, built by ``make test``): running a cases file there, and
the word-level tokenizer the GPU kit's dummy models use, for the cases that need a real one."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_PYTHON = REPO / ".venv-sglang-data" / "bin" / "python"


def data_python() -> Path:
    """The environment's interpreter; the test fails (not skips) where ``make test`` did not build it."""
    if not DATA_PYTHON.exists():
        pytest.fail(f"{DATA_PYTHON} is missing: `make test` builds it (SGLang's dataset loaders, transformers "
                    "and tokenizers beside the main environment)")
    return DATA_PYTHON


def run_cases(cases: str) -> None:
    """Run the pytest file ``cases`` (relative to the repository) in that environment; every case
    must pass, none be skipped."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([str(data_python()), "-m", "pytest", "-q", "-p", "no:cacheprovider", cases], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=280, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout and "skipped" not in proc.stdout


def word_level_tokenizer(folder: Path, vocab: int) -> Path:
    """``folder`` with the word-level tokenizer of the GPU kit's dummy models
    (``scripts/gpu/make_models.py``), over ``vocab`` words."""
    spec = importlib.util.spec_from_file_location("make_models", REPO / "scripts/gpu/make_models.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    mod.write_tokenizer(str(folder), vocab)
    return folder
