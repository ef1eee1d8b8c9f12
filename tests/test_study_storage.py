"""search.storage: where the Optuna study lives (autotune.search.searcher.study_storage)."""

from __future__ import annotations

import pickle
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import ConfigError
from autotune.search.searcher import study_name, study_storage
from autotune.space.search_space import load_space

REPO = Path(__file__).resolve().parents[1]


def _space_with(tmp_path: Path, storage: object) -> Path:
    data = yaml.safe_load((REPO / "search_spaces/demo.yaml").read_text())
    data.setdefault("search", {})["storage"] = storage
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_bad_storage_is_refused_with_file_line_and_the_choices(tmp_path: Path) -> None:
    path = _space_with(tmp_path, "postgres-ish")
    with pytest.raises(ConfigError) as err:
        load_space(str(path))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "storage:" in text)
    assert str(err.value).startswith(f"{path}:{line}: search.storage: 'postgres-ish' is not a study storage")
    assert "sqlite (mlruns/optuna.db), journal (mlruns/optuna.journal)" in str(err.value)
    assert load_space(str(_space_with(tmp_path, "journal"))).search.storage == "journal"
    assert load_space(str(REPO / "search_spaces/demo.yaml")).search.storage is None


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_the_study_survives_the_pickle_ray_keeps_and_opens_by_name(tmp_path: Path, kind: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage, where = study_storage(kind, root=tmp_path)
    assert where is not None and Path(where.removeprefix("sqlite:///")).parent == (tmp_path / "mlruns").resolve()
    name = study_name("demo", "run-20261201-000000")
    study = optuna.create_study(storage=storage, study_name=name, load_if_exists=True)
    study.optimize(lambda t: t.suggest_int("steps", 1, 5), n_trials=2)
    # Ray pickles its searcher (and the study with it) into the experiment state; a resume
    # unpickles it and goes on in the same storage.
    again = pickle.loads(pickle.dumps(study))
    again.optimize(lambda t: t.suggest_int("steps", 1, 5), n_trials=1)
    # What optuna-dashboard does: open the storage, find the study by its name.
    opened = optuna.load_study(study_name=name, storage=where if kind == "sqlite" else storage)
    assert [t.state for t in opened.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    # Another search run of the same search is another study: it starts empty.
    other = optuna.create_study(storage=storage, study_name=study_name("demo", "run-2"), load_if_exists=True)
    assert other.trials == []
