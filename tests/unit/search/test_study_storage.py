"""search.storage: where the Optuna study lives (autotune.search.searcher.study_storage)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import pytest
import yaml

from autotune.errors import ConfigError
from autotune.search.searcher import mirror_study, study_name, study_storage
from autotune.space.search_space import load_space

if TYPE_CHECKING:
    from tests.conftest import SpaceFactory

REPO = Path(__file__).resolve().parents[3]


DEMO = yaml.safe_load((REPO / "search_spaces/demo.yaml").read_text())


def test_a_bad_storage_is_refused_with_file_line_and_the_choices(space_factory: SpaceFactory) -> None:
    path = space_factory.write(DEMO, file="s.yaml", search={"storage": "postgres-ish"})
    with pytest.raises(ConfigError) as err:
        load_space(str(path))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "storage:" in text)
    assert str(err.value).startswith(f"{path}:{line}: search.storage: 'postgres-ish' is not a study storage")
    assert "sqlite (mlruns/optuna.db), journal (mlruns/optuna.journal)" in str(err.value)
    assert space_factory(DEMO, file="s.yaml", search={"storage": "journal"}).search.storage == "journal"
    assert load_space(str(REPO / "search_spaces/demo.yaml")).search.storage is None


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_the_mirror_matches_the_searchers_study_and_replaces_itself(tmp_path: Path, kind: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage, where = study_storage(kind, root=tmp_path)
    assert where is not None and Path(where.removeprefix("sqlite:///")).parent == (tmp_path / "mlruns").resolve()
    name = study_name("demo", "run-20261201-000000")
    live = optuna.create_study(direction="maximize")  # the searcher's, in memory
    live.optimize(lambda t: t.suggest_int("steps", 1, 5), n_trials=2)
    asked = live.ask()  # in flight when the search was interrupted
    asked.suggest_int("steps", 1, 5)
    assert mirror_study(live, storage, name) == 3
    # Ray's resume restores the searcher from its pickle and goes on; the mirror is rewritten.
    again = pickle.loads(pickle.dumps(live))
    again.tell(asked.number, 4.0)
    again.optimize(lambda t: t.suggest_int("steps", 1, 5), n_trials=1)
    assert mirror_study(again, storage, name) == 4
    # What optuna-dashboard does: open the storage, find the study by its name.
    opened = optuna.load_study(study_name=name, storage=where if kind == "sqlite" else storage)
    assert [(t.number, t.state, t.params, t.value) for t in opened.trials] == \
        [(t.number, t.state, t.params, t.value) for t in again.trials]
    assert opened.direction == optuna.study.StudyDirection.MAXIMIZE
    # Another search run is another study: the mirror of one never holds another's trials.
    assert mirror_study(live, storage, study_name("demo", "run-2")) == 3
    assert len(optuna.load_study(study_name=name, storage=storage).trials) == 4
