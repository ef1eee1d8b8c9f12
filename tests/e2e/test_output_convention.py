"""Every ``autotune`` command writes its result the one way ``autotune.cli`` says.

Text on stdout by default; ``--json``: one JSON document on stdout instead; ``-o FILE``: the result
(text, or JSON with ``--json``) in FILE and nothing on stdout; progress and errors on stderr. The
commands run in this process through ``python -m autotune``'s ``main`` on real inputs (a packaged
space, a recorded landscape, a small MLflow store); only the two that start servers, ``search``
and ``trial``, get their measurement replaced by a finished result, since the convention is about
what the command line does with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.__main__ import COMMANDS, main
from autotune.search.cost_surface import surface_of
from autotune.search.options import SearchOutcome
from autotune.space.search_space import load_space
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import eagle, result

REPO = Path(__file__).resolve().parents[2]
LANDSCAPE = str(REPO / "benchmarks/landscapes/recorded-h200-llama-8b.json")
NAME = "convention"
PARAMS = '{"speculative_num_steps": 2, "speculative_eagle_topk": 1}'


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project folder with a finished search in its MLflow store and its (synced) run folder."""
    root = tmp_path_factory.mktemp("project")
    tr = Tracker(NAME, root=root).connect()
    tr.start_search(backend="sim")
    tr.log_trial("base", result({}, 1000.0))
    tr.log_trial("t_best", result(eagle(3, 1), 1500.0))
    tr.finish_search()
    (root / "mlruns" / "ray" / NAME / "run-1").mkdir(parents=True)  # nothing spooled: all in MLflow
    return root


def _outcome() -> SearchOutcome:
    won = result(eagle(3, 1), 1500.0)
    return SearchOutcome(name="demo", winner=won.to_dict(), baseline=None, trials=2, feasible=2, infeasible=0,
                         failed=0, interrupted=False, baseline_wins=False, finalists=[], tracking_uri=None,
                         parent_run_id=None, experiment_path=None, overheads_s=[0.2],
                         report_files={"summary.md": "# the summary\n", "trials.csv": "kind,trial_id\n"})


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """``search`` and ``trial`` get a finished measurement; search says one progress line."""
    from autotune.cli import search as search_command
    from autotune.cli import trial as command

    def search(opts: Any, *, out: Any) -> SearchOutcome:
        print("trial 1 of 2: measuring (progress)", file=out, flush=True)
        return _outcome()

    monkeypatch.setattr(search_command, "run_search", search)
    monkeypatch.setattr(command, "evaluate", lambda config, **kw: result(eagle(2, 1), 1400.0))


def _surface(tmp_path: Path) -> Path:
    """A cost surface of the packaged demo space from three finished results (repick's input)."""
    results = [result({}, 1000.0), result(eagle(2, 1), 1400.0), result(eagle(3, 1), 1500.0)]
    surface = surface_of(load_space("demo"), results, name=NAME)
    path = tmp_path / "surface.json"
    path.write_text(json.dumps(surface))
    return path


def _argv(name: str, project: Path, tmp_path: Path) -> list[str]:
    """A cheap invocation of each command that has a result."""
    if name == "acceptance":  # one short run's request records, a code and a chat prompt
        run = tmp_path / "requests.jsonl"
        run.write_text("".join(json.dumps({"prompt_id": k, "kind": k, "ok": True,
                                           "spec": {"spec_correct_drafts_histogram": h}}) + "\n"
                               for k, h in (("code", [2, 3, 15]), ("chat", [10, 6, 4]))))
        return [str(run), "--steps", "2", "--topk", "1"]
    if name == "repick":
        return ["--surface", str(_surface(tmp_path)), "--acceptance", "rates:[0.7, 0.6, 0.5, 0.4, 0.3, 0.3, 0.3]"]
    return {
        "search": ["--space", "demo", "--no-tracking"],
        "trial": ["--space", "demo", "--params", PARAMS],
        "export": ["--name", NAME, "--root", str(project)],
        "probe": ["--space", "demo", "--tp", "2", "--backend", "sim", "--iters", "5", "--warmup", "1",
                  "--tokens", "1"],
        "evaluate": ["--space", "demo", "--optimum"],
        "bench-search": ["--landscape", LANDSCAPE, "--seeds", "2", "--budget", "20", "--strategies", "random"],
        "sync": ["--name", NAME, "--root", str(project)],
        "store-copy": ["--store", str(project / "mlruns"), "--into", str(tmp_path / "copy")],
        "spaces": [],
    }[name]


def _run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = main(argv)
    printed = capsys.readouterr()
    return code, printed.out, printed.err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_prints_text_json_or_writes_a_file(name, project, tmp_path, measured, capsys):
    argv = [name, *_argv(name, project, tmp_path)]
    code, out, err = _run([*argv, "--json"], capsys)
    assert code == 0, err[-2000:]
    assert out.endswith("\n") and out.count("\n") == 1, out[:500]  # one document, on one line
    record = json.loads(out)
    assert isinstance(record, dict) and record

    into = tmp_path / "result.json"
    code, out, err = _run([*argv, "--json", "-o", str(into)], capsys)
    assert code == 0 and out == "", (out[:500], err[-2000:])
    assert f"wrote the JSON record to {into}" in err
    assert json.loads(into.read_text()).keys() == record.keys()

    text = tmp_path / "result.txt"
    code, out, err = _run([*argv, "-o", str(text)], capsys)
    assert code == 0 and out == "", (out[:500], err[-2000:])
    written = text.read_text()
    assert written.strip() and f" to {text}" in err
    with pytest.raises(ValueError):
        json.loads(written)  # for a person, not a second copy of the JSON


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_the_convention(name, capsys):
    with pytest.raises(SystemExit) as shown:
        main([name, "--help"])
    assert shown.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--json" in text and "-o FILE, --output FILE" in text
    assert "Progress, warnings and errors go to stderr" in text and "130 interrupted" in text


def test_search_progress_goes_to_stderr_and_its_files_beside_the_output(tmp_path, measured, capsys):
    into = tmp_path / "winner.json"
    code, out, err = _run(["search", "--space", "demo", "--no-tracking", "--json", "-o", str(into)], capsys)
    assert code == 0 and out == ""
    assert "(progress)" in err
    assert json.loads(into.read_text())["winner_params"]["speculative_num_steps"] == 3
    assert (tmp_path / "winner.md").read_text() == "# the summary\n"
    assert (tmp_path / "winner.trials.csv").read_text() == "kind,trial_id\n"
    # A text summary written as .md keeps it: summary.md goes beside under another name.
    text = tmp_path / "result.md"
    assert _run(["search", "--space", "demo", "--no-tracking", "-o", str(text)], capsys)[0] == 0
    assert text.read_text().startswith("=" * 78) and "Winner" in text.read_text()
    assert (tmp_path / "result.summary.md").read_text() == "# the summary\n"


def test_the_earlier_summary_json_flag_works_as_it_did(tmp_path, measured, capsys):
    """scripts/gpu/real_search.py, the Makefile's demo: the text on stdout, the JSON in FILE too."""
    into = tmp_path / "summary.json"
    code, out, err = _run(["search", "--space", "demo", "--no-tracking", "--summary-json", str(into)], capsys)
    assert code == 0 and "Winner (confirmed beside a fresh baseline)" in out
    assert json.loads(into.read_text())["output_tok_s"] == 1500.0
    assert (tmp_path / "summary.md").read_text() == "# the summary\n"
    # Where they went is said (make demo's mlruns/demo-summary.* used to go unmentioned).
    assert f"summary files: {into}, {tmp_path / 'summary.md'}, {tmp_path / 'summary.trials.csv'}" in err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_an_output_file_that_cannot_be_written_is_bad_input_before_anything_runs(name, project, tmp_path, measured,
                                                                                capsys):
    """Exit 2 means nothing was run: a search told to write into a folder that is not there used to
    find out after the whole search (issue 36)."""
    missing = tmp_path / "missing" / "best.json"
    with pytest.raises(SystemExit) as stop:
        main([name, *_argv(name, project, tmp_path), "--json", "-o", str(missing)])
    assert stop.value.code == 2
    printed = capsys.readouterr()
    assert f"argument -o/--output: cannot write {missing}: the folder {missing.parent} does not exist" in printed.err
    assert printed.out == "" and "(progress)" not in printed.err and "Traceback" not in printed.err
    assert not (tmp_path / "copy").exists()  # store-copy made nothing either


def test_export_json_is_its_json_format_and_refuses_another(project, capsys):
    code, out, _ = _run(["export", "--name", NAME, "--root", str(project), "--json"], capsys)
    assert code == 0
    code, same, _ = _run(["export", "--name", NAME, "--root", str(project), "--format", "json"], capsys)
    assert code == 0 and json.loads(out) == json.loads(same)
    code, out, err = _run(["export", "--name", NAME, "--root", str(project), "--json", "--format", "yaml"],
                          capsys)
    assert code == 2 and out == "" and "--format yaml" in err
