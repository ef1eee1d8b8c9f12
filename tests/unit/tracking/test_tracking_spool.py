"""The durable spool of a search's MLflow writes and its replay, on real files and real stores.

The failing store is a real one: an MLflow client on a port nothing listens on (connection
refused). The full disk is the kernel's: the spool file is a link to ``/dev/full``, which refuses
every write with ENOSPC. Replays go to a real sqlite store.
"""

from __future__ import annotations

import errno
import io
import json
import socket
from pathlib import Path

import pytest

from autotune.tracking.durable import DurableTracker
from autotune.tracking.spool import SPOOL, Record, Spool
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import eagle, result


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_new_line(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append("trial", "a", {"trial_id": "t1", "attempt": 1})
    spool.append("lost", "b", {"trial_id": "t2", "attempt": 1})
    spool.mark_synced(1)
    with open(tmp_path / SPOOL, "ab") as fh:  # a driver killed in the middle of a write
        fh.write(b'{"seq":3,"op":"trial","key":"c","at_ms":1,"data":{"trial_')
    again = Spool(tmp_path)
    assert [r.seq for r in again.records()] == [1, 2] and [r.seq for r in again.pending()] == [2]
    assert again.next_attempt("t2") == 2 and again.next_attempt("t9") == 1
    again.append("trial", "d", {"trial_id": "t2", "attempt": 2})
    lines = (tmp_path / SPOOL).read_text().splitlines()
    assert json.loads(lines[-1])["seq"] == 3 and json.loads(lines[-1])["data"]["attempt"] == 2
    assert [r.seq for r in Spool(tmp_path).pending()] == [2, 3]


def test_a_full_disk_keeps_records_in_memory_until_it_takes_them(tmp_path: Path) -> None:
    spool = Spool(tmp_path)  # opened first: reading /dev/full would never end
    (tmp_path / SPOOL).symlink_to("/dev/full")
    spool.append("trial", "a", {"trial_id": "t1", "attempt": 1})
    spool.append("trial", "b", {"trial_id": "t2", "attempt": 1})
    assert spool.write_error is not None and spool.write_error.errno == errno.ENOSPC
    assert [r.seq for r in spool.pending()] == [1, 2]
    (tmp_path / SPOOL).unlink()  # space again
    assert spool.retry_writes() and spool.write_error is None
    assert [r.seq for r in Spool(tmp_path).records()] == [1, 2]


@pytest.fixture
def down(tmp_path: Path) -> Tracker:
    """A tracker whose tracking server does not answer (after the search run was opened)."""
    tracker = Tracker("spooled", tracking_uri=f"http://127.0.0.1:{_closed_port()}")
    tracker.experiment_id, tracker.parent_run_id = "1", "0" * 32
    return tracker


@pytest.mark.slow  # 29 s at load ~8 (make test-fast leaves it out)
def test_writes_never_raise_while_mlflow_fails_then_replay_in_order_and_once(tmp_path: Path, down: Tracker,
                                                                             monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    said: list[str] = []
    folder = tmp_path / "run" / "tracking"
    durable = DurableTracker(down, folder, say=said.append, retry_after_s=60)
    a, b = eagle(3, 1), eagle(2, 1)
    durable.log_trial("t1", result(a, 900.0))
    durable.log_lost_attempt("t2", "the actor died; Ray runs it again", params=b)
    durable.log_trial("t2", result(b, 1100.0))
    durable.finish_search(status="FINISHED")
    assert durable.unsynced() == 4
    # One line for the outage (the writes after it are only spooled), naming the log with the traceback.
    assert len(said) == 1 and str(folder / "tracking-errors.log") in said[0], said
    assert "Traceback" in (folder / "tracking-errors.log").read_text()

    store = Tracker("spooled", root=tmp_path).connect()
    store.start_search(backend="sim")
    back = DurableTracker(store, folder, say=said.append)
    assert back.drain(force=True) == 0 and Spool(folder).pending() == []
    for record in Spool(folder).records():  # replayed again, as after a crash before the marks
        back.apply(record)
    runs = {r.trial_id: r for r in store.trial_runs()}
    assert sorted(runs) == ["t1", "t2"] and all(r.mlflow_status == "FINISHED" for r in runs.values())
    assert runs["t1"].tags["autotune.attempt"] == "1" and runs["t2"].tags["autotune.attempt"] == "2"
    assert runs["t2"].output_tok_s == 1100.0
    history = store.client.get_metric_history(runs["t2"].run_id, "output_tok_s")
    assert [(m.step, m.value) for m in history] == [(1, 1100.0)]
    kept = {a.path for a in store.client.list_artifacts(runs["t2"].run_id, "attempts/1")}
    kept |= {a.path for a in store.client.list_artifacts(runs["t2"].run_id, "attempts/2")}
    assert kept == {"attempts/1/lost.txt", "attempts/2/result.json"}
    parent = store.client.get_run(store.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags.get("autotune.winner_trial_id") == "t2"


def test_sync_refuses_an_unknown_search_and_waits_while_the_store_fails(tmp_path: Path, down: Tracker,
                                                                       monkeypatch, capsys) -> None:
    from autotune.cli.sync import main

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    assert main(["--name", "nothing-here", "--root", str(tmp_path)]) == 2
    assert "no search named 'nothing-here'" in capsys.readouterr().err
    folder = tmp_path / "mlruns" / "ray" / "spooled" / "run-1" / "tracking"
    durable = DurableTracker(down, folder, say=lambda line: None)
    # What begin() records, without its lock (this process is the sync's too).
    durable.spool.write_header({"name": "spooled", "tracking_uri": down.tracking_uri,
                                "experiment_id": "1", "parent_run_id": down.parent_run_id})
    durable.log_trial("t1", result(eagle(3, 1), 900.0))
    assert main(["--name", "spooled", "--root", str(tmp_path)], prog="autotune sync") == 1  # still refused
    printed = capsys.readouterr()  # what each run folder gave on stderr, what still waits on stdout
    assert "run-1: 1 record(s) still wait" in printed.err and "does not answer" in printed.err
    assert printed.out == ("1 record(s) of search 'spooled' still wait for MLflow; "
                           "run autotune sync again when it answers\n")



@pytest.mark.slow  # 12 s at load ~8 (make test-fast leaves it out)
def test_a_search_run_started_while_mlflow_is_unreachable_is_made_once_by_sync(tmp_path: Path,
                                                                              monkeypatch) -> None:
    from autotune.search.sync import sync_search
    from autotune.tracking.durable import TAG_SPOOL_ID
    from autotune.tracking.store import default_store

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    space = tmp_path / "my-space.yaml"
    space.write_text("name: spooled\n")
    never = Tracker("spooled", root=tmp_path, tracking_uri=f"http://127.0.0.1:{_closed_port()}")
    folder = tmp_path / "mlruns" / "ray" / "spooled" / "run-1" / "tracking"
    said: list[str] = []
    durable = DurableTracker(never, folder, say=said.append, retry_after_s=60)
    durable.open_search(start={"backend": "sim", "budget": 2, "objective": ["output_tok_s", "maximize"]},
                        space_file=str(space))
    durable.log_trial("t1", result(eagle(3, 1), 900.0))
    durable.finish_search(status="FINISHED")
    # One line: unreachable, where the results wait, and the command that syncs them.
    assert len(said) == 1 and "unreachable" in said[0] and str(folder / SPOOL) in said[0], said
    assert f"autotune sync --name spooled --root {tmp_path.resolve()} --tracking-uri {never.tracking_uri}" in said[0]
    spool = Spool(folder)
    assert [r.op for r in spool.pending()] == ["start", "trial", "finish"]
    assert spool.header()["parent_run_id"] is None
    durable.spool._lock_file.close()  # the search's lock ends with it; this process syncs next

    # The experiment exists already (an earlier search of that name): the sync reuses it, as a
    # search would, and adds this search's run beside the earlier one.
    earlier = Tracker("spooled", root=tmp_path).connect()
    earlier_run = earlier.start_search(backend="sim")
    earlier.fail_search("an earlier search")
    local = default_store(tmp_path)[0]
    out = io.StringIO()
    assert sync_search("spooled", root=str(tmp_path), tracking_uri=local, out=out).complete, out.getvalue()
    store = Tracker("spooled", root=tmp_path).connect(create=False)
    assert store.experiment_id == earlier.experiment_id
    parents = [p for p in store.parent_runs() if p.info.run_id != earlier_run]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert store.client.get_run(earlier_run).info.status == "FAILED"  # left as it was
    start = Spool(folder).records()[0]
    assert parents[0].data.tags[TAG_SPOOL_ID] == start.data["spool_id"]
    assert parents[0].info.start_time == start.at_ms  # when the search started, not the sync
    assert parents[0].data.params["space_path"] == str(space.resolve())
    assert [a.path for a in store.client.list_artifacts(parents[0].info.run_id, "space")] == ["space/my-space.yaml"]
    assert Spool(folder).header()["parent_run_id"] == parents[0].info.run_id
    # Replayed again from scratch (a sync killed before it marked anything): nothing twice.
    again = Tracker("spooled", root=tmp_path).connect()
    replay = DurableTracker(again, folder, say=out.write)
    for record in Spool(folder).records():
        replay.apply(record)
    assert sorted(p.info.run_id for p in again.parent_runs()) == sorted([parents[0].info.run_id, earlier_run])
    runs = again.trial_runs(parents[0].info.run_id)
    assert [r.trial_id for r in runs] == ["t1"] and runs[0].mlflow_status == "FINISHED"


@pytest.mark.parametrize("uri, words", [
    ("http://127.0.0.1:notaport", "malformed tracking URI"),
    ("http://", "malformed tracking URI"),
    ("foo://bar", "MLflow cannot use the tracking URI"),
])
def test_a_bad_tracking_uri_is_bad_input_not_an_unreachable_store(tmp_path: Path, uri: str, words: str) -> None:
    from autotune.errors import ConfigError
    from autotune.tracking.store import StoreUnreachable

    with pytest.raises(ConfigError, match=words) as caught:
        Tracker("spooled", root=tmp_path, tracking_uri=uri).connect()
    assert not isinstance(caught.value, StoreUnreachable)
    with pytest.raises(StoreUnreachable):
        Tracker("spooled", root=tmp_path, tracking_uri=f"http://127.0.0.1:{_closed_port()}").connect()


def test_a_server_that_answers_with_an_error_is_not_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unreachable is decided by the connection error in the exception's chain, not by words: a
    tracking server that answers (here 400, its message naming a refused database connection) is
    reachable, and a closed port is not."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from autotune.tracking.store import _unreachable

    class Answers(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps({"error_code": "INVALID_PARAMETER_VALUE",
                               "message": "Connection refused by the database (Max retries exceeded)"}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(MlflowException) as answered:
            MlflowClient(f"http://127.0.0.1:{server.server_address[1]}").get_experiment_by_name("x")
    finally:
        server.shutdown()
        server.server_close()
    assert "Connection refused" in str(answered.value) and not _unreachable(answered.value)
    with pytest.raises(MlflowException) as refused:
        MlflowClient(f"http://127.0.0.1:{_closed_port()}").get_experiment_by_name("x")
    assert _unreachable(refused.value)


def _refuse_the_header(folder: Path) -> None:
    """Make the disk refuse ``search.json``: its temporary file is a link to ``/dev/full`` (ENOSPC)."""
    from autotune.tracking.spool import HEADER

    folder.mkdir(parents=True, exist_ok=True)
    (folder / (HEADER + ".tmp")).symlink_to("/dev/full")


@pytest.mark.slow  # 9 s at load ~8 (make test-fast leaves it out)
def test_sync_finds_the_search_run_of_a_spool_whose_search_json_the_disk_refused(tmp_path: Path) -> None:
    from autotune.search.sync import sync_search

    folder = tmp_path / "mlruns" / "ray" / "spooled" / "run-1" / "tracking"
    _refuse_the_header(folder)
    said: list[str] = []
    durable = DurableTracker(Tracker("spooled", root=tmp_path).connect(), folder, say=said.append)
    durable.open_search(start={"backend": "sim", "budget": 2, "objective": ["output_tok_s", "maximize"]})
    made = durable.tracker.parent_run_id
    # The driver is killed after it spooled a result and before it sent it to MLflow.
    durable.log_trial("t1", result(eagle(3, 1), 900.0), drain=False)
    durable.spool._lock_file.close()
    assert made and Spool(folder).header() is None and [r.op for r in Spool(folder).pending()] == ["trial"]
    assert any("cannot write the tracking spool header" in line for line in said), said
    (folder / "search.json.tmp").unlink()  # space again

    out = io.StringIO()
    assert sync_search("spooled", root=str(tmp_path), out=out).complete, out.getvalue()
    assert f"the search run {made} rebuilt" in out.getvalue(), out.getvalue()
    assert Spool(folder).header()["parent_run_id"] == made and Spool(folder).pending() == []
    store = Tracker("spooled", root=tmp_path).connect(create=False)
    assert [p.info.run_id for p in store.parent_runs()] == [made]
    runs = store.trial_runs(made)
    assert [(r.trial_id, r.output_tok_s) for r in runs] == [("t1", 900.0)]


@pytest.mark.slow  # 21 s at load ~8 (make test-fast leaves it out)
def test_sync_makes_the_search_run_of_a_spool_that_has_neither_mlflow_nor_search_json(tmp_path: Path) -> None:
    from autotune.search.sync import sync_search
    from autotune.tracking.durable import TAG_SPOOL_ID

    folder = tmp_path / "mlruns" / "ray" / "spooled" / "run-1" / "tracking"
    _refuse_the_header(folder)
    # A store that fails from the first second: sqlite under a path whose folder is a file.
    (tmp_path / "later").write_text("not a folder")
    uri = f"sqlite:///{tmp_path}/later/mlflow.db"
    durable = DurableTracker(Tracker("spooled", root=tmp_path, tracking_uri=uri), folder, say=lambda line: None,
                             retry_after_s=60)
    durable.open_search(start={"backend": "sim", "budget": 1, "objective": ["output_tok_s", "maximize"]})
    durable.log_trial("t1", result(eagle(3, 1), 900.0))
    durable.finish_search(status="FINISHED")
    durable.spool._lock_file.close()
    assert Spool(folder).header() is None and [r.op for r in Spool(folder).pending()] == ["start", "trial", "finish"]
    (folder / "search.json.tmp").unlink()
    (tmp_path / "later").unlink()  # MLflow makes the folder now

    out = io.StringIO()
    # No --tracking-uri: the store comes from the spool's first record.
    assert sync_search("spooled", root=str(tmp_path), out=out).complete, out.getvalue()
    store = Tracker("spooled", root=tmp_path, tracking_uri=uri).connect(create=False)
    parents = store.parent_runs()
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags[TAG_SPOOL_ID] == Spool(folder).records()[0].data["spool_id"]
    assert [r.trial_id for r in store.trial_runs(parents[0].info.run_id)] == ["t1"]
    assert Spool(folder).header()["parent_run_id"] == parents[0].info.run_id


@pytest.mark.slow  # 14 s at load ~8 (make test-fast leaves it out)
def test_sync_of_a_spool_without_search_json_or_its_store_says_what_to_give(tmp_path: Path, capsys) -> None:
    from autotune.cli.sync import main
    from autotune.tracking.store import default_store

    folder = tmp_path / "mlruns" / "ray" / "spooled" / "run-1" / "tracking"
    spool = Spool(folder)
    # A spool from before the first record named its store, whose search.json was never written.
    spool.append("start", "start", {"spool_id": "spool-old", "start": {"backend": "sim", "budget": 1}})
    spool.append("trial", "trial:t1#1", {"trial_id": "t1", "attempt": 1, "kind": "trial", "confirmed": None,
                                          "result": result(eagle(3, 1), 900.0).to_dict()})
    assert main(["--name", "spooled", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'search.json'} is missing" in err and "--tracking-uri" in err, err
    assert Spool(folder).pending() != [] and not (tmp_path / "mlruns" / "mlflow.db").exists()
    # Told which store, it writes them all.
    assert main(["--name", "spooled", "--root", str(tmp_path), "--tracking-uri", default_store(tmp_path)[0]]) == 0
    store = Tracker("spooled", root=tmp_path).connect(create=False)
    assert [r.trial_id for r in store.trial_runs(store.latest_parent_run_id())] == ["t1"]


def test_a_closed_torn_line_is_still_skipped_silently(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append("trial", "a", {"trial_id": "t1", "attempt": 1})
    with open(tmp_path / SPOOL, "ab") as fh:  # killed mid-write, then resumed: the next append closes it
        fh.write(b'{"seq":2,"op":"trial","key":"c","at')
    Spool(tmp_path).append("lost", "b", {"trial_id": "t2", "attempt": 1})
    again = Spool(tmp_path)
    assert [r.op for r in again.records()] == ["trial", "lost"] and again.bad_lines == []


@pytest.mark.parametrize(("garbage", "words"), [
    (b"{not json at all", "Expecting"),
    (b'{"seq":2,"op":"start","key":"s","at_ms":1,"data":"oops"}', "'data' must be dict"),
    (b'{"seq":2,"op":"start","key":"s","at_ms":"1","data":{}}', "'at_ms' must be int"),
    (b'{"seq":true,"op":"start","key":"s","at_ms":1,"data":{}}', "'seq' must be int"),
    (b'[1, 2]', "not a JSON object"),
    (b'{"seq":2,"op":"start","key":"s","at_ms":1,"data":"' + b"x" * 5000 + b'"}', "more characters"),
])
def test_a_bad_middle_line_is_named_with_its_line_and_the_others_are_kept(tmp_path: Path, garbage: bytes,
                                                                         words: str) -> None:
    first = Record(1, "start", "start", 1, {"a": 1}).line().encode()
    third = Record(3, "trial", "trial:t1#1", 2, {"trial_id": "t1"}).line().encode()
    (tmp_path / SPOOL).write_bytes(first + garbage + b"\n" + third)
    (tmp_path / "synced.jsonl").write_bytes(b'{"seq": 1}\n{"seq": "x"}\n')
    spool = Spool(tmp_path)
    assert [r.seq for r in spool.records()] == [1, 3] and [r.seq for r in spool.pending()] == [3]
    assert [(b.path.name, b.line) for b in spool.bad_lines] == [(SPOOL, 2), ("synced.jsonl", 2)]
    assert words in spool.bad_lines[0].why and len(str(spool.bad_lines[0])) < 400, spool.bad_lines[0]
    said: list[str] = []
    DurableTracker(Tracker("spooled", root=tmp_path), tmp_path, say=said.append)
    assert len(said) == 2 and f"{tmp_path / SPOOL}:2" in said[0], said


def test_sync_names_a_bad_line_and_does_not_claim_completeness(tmp_path: Path, capsys) -> None:
    from autotune.cli.sync import main

    folder = tmp_path / "mlruns" / "ray" / "spooled" / "run-1" / "tracking"
    folder.mkdir(parents=True)
    (folder / SPOOL).write_bytes(b"garbled\n")
    assert main(["--name", "spooled", "--root", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"{folder / SPOOL}:1" in captured.err and "MLflow holds every record" not in captured.out
    assert "could not be read" in captured.out, captured


def test_a_full_disk_under_the_spool_is_said_as_disk_full_with_the_path(tmp_path: Path, down: Tracker) -> None:
    durable = DurableTracker(down, tmp_path, say=[].append)
    said: list[str] = []
    durable.say = said.append
    (tmp_path / SPOOL).symlink_to("/dev/full")
    durable.log_trial("t1", result(eagle(3, 1), 900.0), drain=False)
    assert said and "disk full" in said[0] and str(tmp_path / SPOOL) in said[0], said


def test_a_spooled_trial_keeps_its_request_records_on_its_run(tmp_path: Path, tracker: Tracker) -> None:
    """The spool carries a trial's request records, so its run gets requests.jsonl on replay."""
    records = [{"prompt_id": f"p{i}", "kind": "code", "ok": True, "output_tokens": 16 + i} for i in range(3)]
    durable = DurableTracker(tracker, tmp_path / "tracking", say=[].append)
    durable.log_trial("t1", result(eagle(3, 1), 900.0, records=records))
    assert durable.unsynced() == 0
    run = next(r for r in tracker.trial_runs() if r.trial_id == "t1")
    path = tracker.client.download_artifacts(run.run_id, "requests.jsonl", str(tmp_path / "dl"))
    assert [json.loads(line) for line in Path(path).read_text().splitlines()] == records
