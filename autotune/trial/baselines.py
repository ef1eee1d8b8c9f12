"""Where the no-speculation baselines of a search are kept, so each group is measured once.

Every speculative config is judged against the baseline of its group (the same non-speculative
settings with speculation off). A :class:`BaselineStore` keeps them by :func:`group_key`:
:class:`MemoryBaselineStore` for one process, :class:`FileBaselineStore` for the trials of a
search, with a per-group lock so concurrent trials wait for one measurement.
:func:`reusable_baseline` decides whether a stored one that failed is worth measuring again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Protocol

from autotune.trial.outcome import Failure
from autotune.trial.result import TrialResult

if TYPE_CHECKING:
    from autotune.space.trial_config import TrialConfig


class BaselineStore(Protocol):
    """Where baselines of non-speculative groups are kept for reuse."""

    def get(self, key: str) -> TrialResult | None: ...

    def put(self, key: str, result: TrialResult) -> None: ...

    def lock(self, key: str) -> AbstractContextManager[None]: ...


class MemoryBaselineStore:
    """Baselines in process memory (one CLI run)."""

    def __init__(self) -> None:
        self._data: dict[str, TrialResult] = {}

    def get(self, key: str) -> TrialResult | None:
        return self._data.get(key)

    def put(self, key: str, result: TrialResult) -> None:
        self._data[key] = result

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        yield


class FileBaselineStore:
    """Baselines as JSON files in a directory shared by the trials of one search.

    A per-group ``flock`` makes concurrent trials of the same group wait for one measurement
    instead of each measuring the baseline.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str, suffix: str) -> Path:
        return self.dir / (hashlib.sha1(key.encode()).hexdigest()[:16] + suffix)

    def get(self, key: str) -> TrialResult | None:
        path = self._path(key, ".json")
        try:
            return TrialResult.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def put(self, key: str, result: TrialResult) -> None:
        path = self._path(key, ".json")
        tmp = _written(path, json.dumps(result.to_dict()))
        try:
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        with open(self._path(key, ".lock"), "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _written(path: Path, text: str) -> str:
    """``text`` in a new temporary file beside ``path``, named for this call alone.

    Trials of one store run in several processes at once; a temporary name they shared let one
    move or truncate another's file mid-write.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


MEASURED_ON = "measured-on.txt"  # JSON, named so that readers of the baselines (*.json) skip it


def shared_store(directory: str | os.PathLike, *, workload: Mapping[str, Any],
                 settings: object) -> FileBaselineStore:
    """A store that several ``python -m autotune.trial`` calls share, bound to one workload.

    The first call writes what its baselines are measured on (the workload, and the measuring
    switches that change tok/s: fast start, the device timer) into ``measured-on.txt``; a later call
    measuring something else is refused, because a baseline's figures hold only for its own
    workload. A search's own ``baselines/`` folder has no such file until a call first names it.

    Raises:
        ConfigError: The folder's baselines were measured on another workload.
    """
    from autotune.errors import ConfigError

    store = FileBaselineStore(directory)
    mine = {"workload": repr(workload), "fast_start": getattr(settings, "fast_start", None),
            "device_timer": getattr(settings, "device_timer", None)}
    marker = store.dir / MEASURED_ON
    try:
        theirs = json.loads(marker.read_text())
    except FileNotFoundError:
        theirs = _claim(marker, mine)
        if theirs is None:
            return store
    except ValueError as exc:
        raise ConfigError(f"not valid JSON ({exc}); remove it or name another --baseline-store",
                          file=str(marker)) from None
    if theirs != mine:
        what = ", ".join(k for k in sorted(mine) if theirs.get(k) != mine[k])
        raise ConfigError(f"the baselines here were measured with another {what} (theirs: "
                          f"{theirs}); name another --baseline-store for this workload", file=str(marker))
    return store


def _claim(marker: Path, mine: dict[str, Any]) -> dict[str, Any] | None:
    """Write ``mine`` as the marker unless another call got there first; returns theirs if it did.

    Calls that start together (the GPU scripts' lanes, a sweep's parallel trials) all find no
    marker. Each writes its own temporary file, and a hard link publishes it only where no marker
    exists yet, so the first one wins whole and the others compare against it.
    """
    tmp = _written(marker, json.dumps(mine, indent=1, sort_keys=True))
    try:
        try:
            os.link(tmp, marker)
        except FileExistsError:
            return json.loads(marker.read_text())
        return None
    finally:
        os.unlink(tmp)


def group_key(config: TrialConfig) -> str:
    """Stable text key of a config's non-speculative settings."""
    key = config.group_key()
    return json.dumps(key, sort_keys=True, default=str) if not isinstance(key, str) else key


def _deterministic(failure: str | None) -> bool:
    try:
        return Failure(failure).deterministic
    except ValueError:  # no kind recorded (a store older than the field): worth one retry
        return False


def reusable_baseline(store: BaselineStore, key: str) -> TrialResult | None:
    """The stored baseline of a group, unless it failed for a reason that may not recur.

    A baseline that failed transiently (a start-up timeout, a crash mid-measurement) is measured
    once more instead of marking its whole group infeasible for the rest of the search.
    """
    found = store.get(key)
    if found is None or found.ok:
        return found
    retried = key + "#retried"
    # A failure a second start cannot fix is final; re-measuring it would only cost a start.
    if _deterministic(found.failure) or store.get(retried) is not None:
        return found
    store.put(retried, found)  # the first failure stays on record; a second one is final
    return None

