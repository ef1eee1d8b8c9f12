"""A baseline store that several trial processes open and write at the same moment.

``tests/integration/test_landscape.py`` starts two ``python -m autotune.trial --baseline-store DIR`` at once;
on a clean clone one of them died with ``FileNotFoundError`` and printed nothing: both had written
the store's ``measured-on.txt`` through the same temporary name, and the first ``os.replace`` took
the second's file away. Threads meet at a barrier here, so the calls overlap on every round.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from autotune.errors import ConfigError
from autotune.trial.baselines import MEASURED_ON, FileBaselineStore, shared_store
from autotune.trial.result import TrialResult

CALLS = 8
ROUNDS = 25
SETTINGS = SimpleNamespace(fast_start=True, device_timer=True)


def _at_once(fns: list[Callable[[], Any]]) -> list[BaseException | None]:
    """Run every ``fn`` in its own thread, released together; each one's exception or None."""
    barrier = threading.Barrier(len(fns))
    outcomes: list[BaseException | None] = [None] * len(fns)

    def run(i: int) -> None:
        barrier.wait()
        try:
            fns[i]()
        except BaseException as exc:  # noqa: BLE001 - the outcome is what is checked
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return outcomes


def test_calls_that_open_a_new_store_together_all_succeed(tmp_path: Path) -> None:
    for r in range(ROUNDS):
        folder = tmp_path / str(r)
        outcomes = _at_once([lambda folder=folder: shared_store(folder, workload={"prompts": 4},
                                                                settings=SETTINGS)] * CALLS)
        assert outcomes == [None] * CALLS, outcomes
        assert json.loads((folder / MEASURED_ON).read_text())["workload"] == repr({"prompts": 4})
        assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*.tmp"))


def test_two_workloads_at_once_the_first_wins_and_the_other_is_refused(tmp_path: Path) -> None:
    for r in range(ROUNDS):
        folder = tmp_path / str(r)
        workloads = [{"prompts": 4 if i % 2 else 8} for i in range(CALLS)]
        outcomes = _at_once([lambda w=w, folder=folder: shared_store(folder, workload=w, settings=SETTINGS)
                             for w in workloads])
        marker = json.loads((folder / MEASURED_ON).read_text())
        for w, outcome in zip(workloads, outcomes, strict=True):
            if marker["workload"] == repr(w):
                assert outcome is None, outcome
            else:  # never accepted beside the other workload's baselines
                assert isinstance(outcome, ConfigError), outcome
                assert "measured with another workload" in str(outcome)


def test_the_same_baseline_put_together_is_stored_whole(tmp_path: Path) -> None:
    store = FileBaselineStore(tmp_path)
    result = TrialResult(status="ok", reason=None, params={"tp_size": 1}, is_baseline=True, output_tok_s=90.0)
    for _ in range(ROUNDS):
        assert _at_once([lambda: store.put("group", result)] * CALLS) == [None] * CALLS
        assert store.get("group").output_tok_s == 90.0
    assert [p.name for p in tmp_path.iterdir()] == [p.name for p in tmp_path.glob("*.json")]
