"""The one interface a search tracks through (SearchTracker), on real stores and a real spool.

mypy checks that both implementations conform (``autotune.tracking.interface._both_conform``);
these tests check the same at run time, and that the durable tracker has no way around its spool.
"""

from __future__ import annotations

import inspect
import socket
from pathlib import Path

import pytest

from autotune.tracking.durable import TAG_SPOOL_ID, DurableTracker
from autotune.tracking.interface import SearchTracker
from autotune.tracking.runs import TAG_ATTEMPT, TAG_STATUS
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import eagle, result

#: What a search calls on its tracker (autotune/search/), and nothing more.
MEMBERS = {"tracking_uri", "experiment_id", "parent_run_id", "log_trial", "log_lost_attempt",
           "log_to_search", "fail_search", "finish_search", "drain", "unsynced"}


def _members() -> dict[str, object]:
    return {name: value for name, value in vars(SearchTracker).items() if not name.startswith("_")}


def test_the_interface_names_what_a_search_uses() -> None:
    assert set(_members()) == MEMBERS


@pytest.mark.parametrize("impl", [Tracker, DurableTracker])
def test_each_tracker_implements_every_member_with_the_interface_s_signature(impl: type, tmp_path: Path) -> None:
    tracker = Tracker("members", root=str(tmp_path))
    tracker.experiment_id, tracker.parent_run_id = "1", "0" * 32
    instance = tracker if impl is Tracker else DurableTracker(tracker, tmp_path / "tracking")
    for name, member in _members().items():
        own = inspect.getattr_static(impl, name, None)
        if isinstance(member, property):
            # The ids: a Tracker's own attributes, which a DurableTracker reads (never sets).
            assert getattr(instance, name) == getattr(tracker, name) is not None, name
            assert impl is Tracker or (isinstance(own, property) and own.fset is None), name
            continue
        assert callable(own), f"{impl.__name__} has no {name}"
        wanted = inspect.signature(member).parameters
        got = inspect.signature(own).parameters
        positional = [p for p in wanted if wanted[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert [p for p in got if got[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD][:len(positional)] \
            == positional, f"{impl.__name__}.{name}: positional parameters differ"
        for pname, p in wanted.items():
            assert pname in got, f"{impl.__name__}.{name} lacks {pname}"
            q = got[pname]
            assert (q.kind, q.default, q.annotation) == (p.kind, p.default, p.annotation), \
                f"{impl.__name__}.{name}({pname}): {q} is not the interface's {p}"
        extra = [q for pname, q in got.items() if pname not in wanted]
        assert all(q.default is not inspect.Parameter.empty for q in extra), \
            f"{impl.__name__}.{name} needs arguments the interface does not give: {extra}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_write_of_a_durable_tracker_is_spooled_and_nothing_else_reaches_mlflow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    down = Tracker("spooled", tracking_uri=f"http://127.0.0.1:{_closed_port()}")
    down.experiment_id, down.parent_run_id = "1", "0" * 32
    said: list[str] = []
    durable: SearchTracker = DurableTracker(down, tmp_path / "tracking", say=said.append, retry_after_s=60)
    a = eagle(3, 1)
    durable.log_trial("t1", result(a, 900.0), drain=False)
    durable.log_lost_attempt("t1", "the actor died; Ray runs it again", params=a)
    durable.log_to_search(tags={"autotune.nccl_prescreen": "failed"})
    durable.fail_search("NCCL pre-screen: no candidate")
    durable.finish_search(status="FAILED")
    assert isinstance(durable, DurableTracker)
    assert [(r.op, r.data.get("attempt")) for r in durable.spool.pending()] == [
        ("trial", 1), ("lost", 2), ("facts", None), ("fail", None), ("finish", None)]
    assert durable.unsynced() == 5 and len(said) == 1 and "failed a write" in said[0]
    # The ids a search reads back are the tracker's; Tracker's other writes are not reachable.
    assert (durable.tracking_uri, durable.experiment_id, durable.parent_run_id) == (
        down.tracking_uri, "1", "0" * 32)
    for around_the_spool in ("start_trial", "set_confirmed", "log_lost", "start_search", "client", "_search"):
        assert not hasattr(durable, around_the_spool), around_the_spool


@pytest.mark.slow  # 3 s: a real MLflow store (make test-fast leaves it out)
def test_a_tracker_logs_a_lost_attempt_as_the_run_s_next_and_finds_a_search_run_by_tag(tmp_path: Path) -> None:
    tracker = Tracker("direct", root=str(tmp_path)).connect()
    first = tracker.start_search(backend="sim", tags={TAG_SPOOL_ID: "spool-a"})
    run = tracker.log_trial("t1", result(eagle(3, 1), 900.0))
    assert tracker.log_lost_attempt("t1", "the actor died") == run
    tags = tracker.client.get_run(run).data.tags
    assert (tags[TAG_ATTEMPT], tags[TAG_STATUS]) == ("2", "failed")
    assert "attempts/2/lost.txt" in {a.path for a in tracker.client.list_artifacts(run, "attempts/2")}
    assert tracker.drain(force=True) == 0 and tracker.unsynced() == 0

    second = tracker.start_search(backend="sim", tags={TAG_SPOOL_ID: "spool-b"})
    assert tracker.find_trial_run("t1") is None  # a trial of the first search is not this one's
    assert tracker.search_run_tagged(TAG_SPOOL_ID, "spool-a") == first
    assert tracker.search_run_tagged(TAG_SPOOL_ID, "spool-b") == second != first
    assert tracker.search_run_tagged(TAG_SPOOL_ID, "spool-c") is None
    tracker.use_search_run(first)
    assert (tracker.parent_run_id, tracker.find_trial_run("t1")) == (first, run)
