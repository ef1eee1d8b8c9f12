"""autotune.tracking.store_copy: a store moved off its machine gets readable artifacts again, the original untouched."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.tracking.store_copy import find_db, relocated_copy


def _store(root: Path) -> str:
    import mlflow
    from mlflow.tracking import MlflowClient

    (root / "mlruns" / "artifacts").mkdir(parents=True)
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlruns' / 'mlflow.db'}")
    exp = client.create_experiment("moved", artifact_location=(root / "mlruns" / "artifacts" / "moved").as_uri())
    run = client.create_run(exp)
    note = root / "launch.json"
    note.write_text('{"argv": ["--tp-size", "1"]}')
    client.log_artifact(run.info.run_id, str(note))
    client.set_terminated(run.info.run_id)
    del mlflow
    return run.info.run_id


def _read(db: Path, run_id: str, dest: Path) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    return Path(client.download_artifacts(run_id, "launch.json", str(dest))).read_text()


@pytest.mark.slow  # 12 s at load ~8 (make test-fast leaves it out)
def test_moved_store_reads_its_artifacts_through_the_copy(tmp_path: Path) -> None:
    run_id = _store(tmp_path / "device")
    shutil.move(str(tmp_path / "device"), str(tmp_path / "here"))  # the recorded absolute paths now dangle
    db = find_db(store=tmp_path / "here")
    assert db == tmp_path / "here" / "mlruns" / "mlflow.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    (tmp_path / "d1").mkdir()
    with pytest.raises(Exception, match="launch.json|No such file|Failed to download"):
        _read(db, run_id, tmp_path / "d1")

    copy = relocated_copy(db=db, into=tmp_path / "work")
    (tmp_path / "d2").mkdir()
    assert _read(copy, run_id, tmp_path / "d2") == '{"argv": ["--tp-size", "1"]}'
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.slow  # 9 s at load ~8 (make test-fast leaves it out)
def test_bad_stores_say_what_would_be_right(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="folder holding mlflow.db"):
        find_db(store=tmp_path)
    run = subprocess.run([sys.executable, "-m", "autotune.tracking.store_copy", "--store", str(tmp_path / "nope.db"),
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "no MLflow sqlite store" in run.stderr
    _store(tmp_path / "s")
    with pytest.raises(ConfigError, match="holds the store itself"):
        relocated_copy(db=tmp_path / "s" / "mlruns" / "mlflow.db", into=tmp_path / "s" / "mlruns")
