"""A space whose prompts are far from its declared production sample, searched end to end: real Ray,
real emulator servers, real MLflow (sqlite in tmp_path). The search warns on stderr at its start, and
its ``summary.md`` and MLflow run say the same; the driver reads the sample from disk once."""

from __future__ import annotations

import builtins
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.bench.shape_match import TAG_PRODUCTION_SAMPLE
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from autotune.search.summary_files import SUMMARY_MD
from tests.conftest import SpaceFactory
from tests.e2e.test_search import _assert_no_emulator_left, _mlflow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def count_opens(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[str]:
    """Every open of ``path`` in this process from now on (``open()`` and ``Path.open``, which calls
    ``io.open``), each passed on to the real open: a list that grows by one mode per open."""
    real: Callable[..., Any] = io.open
    opened: list[str] = []

    def counted(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, Path)) and Path(file) == path:
            opened.append(mode)
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", counted)
    monkeypatch.setattr(builtins, "open", counted)
    return opened


def test_a_far_workload_is_warned_of_at_the_start_and_recorded(
        tmp_path: Path, sim_env: Path, space_factory: SpaceFactory, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Production: one long shared document asked about again and again; the space sends two short,
    # distinct built-in prompts.
    doc = "Section 4.2 of the shared service agreement, quoted in full. " * 60
    (tmp_path / "prod.jsonl").write_text("".join(json.dumps({"prompt": doc + f"Question {i % 10}?"}) + "\n"
                                                 for i in range(30)))
    path = space_factory.write(name="prod-sample", workload={"production_sample": "prod.jsonl"},
                               budget={"trials": 1})
    out = io.StringIO()
    opened = count_opens(monkeypatch, tmp_path / "prod.jsonl")
    outcome = run_search(SearchOptions(space=str(path), root=str(tmp_path)), out=out)
    # Read once, when the space loaded; the start's warning and the end's summary compare with that.
    # (The Ray trial processes load the space on their own; this counts the driver.)
    assert opened == ["r"], opened
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "production sample" in line]
    assert len(warnings) == 1, err
    assert warnings[0].startswith("warning: the workload's prompts are far from the production sample "
                                  f"{tmp_path / 'prod.jsonl'} (30 prompts)")
    assert "median prompt" in warnings[0] and "distinct prompts 100% vs the sample's 33%" in warnings[0]
    # Said before the first trial started: the console had only the search's first line by then.
    assert out.getvalue().index("Search 'prod-sample'") < out.getvalue().index("Ray ")

    match = outcome.production_match
    assert match is not None and match["far"] and match["production"]["shared_prefix_pct"] == 100.0
    md = outcome.report_files[SUMMARY_MD]
    section = md.split("## Production sample", 1)[1].split("\n## ", 1)[0]
    assert "**Far from production.**" in section and match["line"] in section
    parent, _ = _mlflow("prod-sample", tmp_path)
    assert parent.data.tags[TAG_PRODUCTION_SAMPLE] == match["line"]
    assert parent.data.metrics["production_sample_far"] == 1.0
    assert parent.data.metrics["production_prompt_chars_p50_ratio"] < 0.5
    _assert_no_emulator_left(sim_env)
