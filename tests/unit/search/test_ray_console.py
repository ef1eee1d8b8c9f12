"""Ray's log lines during a search go to the run folder's ray.log, off the console."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import ray  # noqa: F401 - sets up the "ray" logger's stderr handler, as in a search

from autotune.search.ray_console import RAY_LOG, ray_lines_to


def test_tunes_restore_hint_goes_to_the_run_folder_not_the_console(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ray_logger = logging.getLogger("ray")
    before = list(ray_logger.handlers)
    assert before, "Ray gives its logger a console handler on import"
    hint = ("Experiment has been interrupted, but the most recent state was saved.\n"
            'Resume experiment with: Tuner.restore(path="x", trainable=...)')
    with ray_lines_to(tmp_path / "run-1" / RAY_LOG) as path:
        logging.getLogger("ray.tune.tune").warning(hint)
        logging.getLogger("ray.tune.experiment").warning("FileNotFoundError: [Errno 2] tuner.pkl")
    captured = capsys.readouterr()
    assert "Tuner.restore" not in captured.err + captured.out
    assert "FileNotFoundError" not in captured.err + captured.out
    text = path.read_text()
    assert "WARNING ray.tune.tune: Experiment has been interrupted" in text and "Tuner.restore" in text
    assert "FileNotFoundError" in text
    # Afterwards Ray's own handlers are back, and nothing more goes to the file.
    assert ray_logger.handlers == before and ray_logger.propagate is False
    logging.getLogger("ray.tune.tune").warning("after the search")
    assert "after the search" not in path.read_text()


def test_a_search_without_ray_lines_leaves_no_file(tmp_path: Path) -> None:
    with ray_lines_to(tmp_path / RAY_LOG) as path:
        pass
    assert not path.exists()
