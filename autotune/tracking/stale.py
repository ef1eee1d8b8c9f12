"""Runs left RUNNING by a search driver (or Ray worker) that was killed, and how they are closed.

A killed driver cannot end its runs, so the next search does: a resumed one marks its own
search's leftovers, a new one the earlier search runs whose driver process on this host is gone.
Kept apart from :class:`~autotune.tracking.tracker.Tracker` because it is the one place that
judges whether another process is alive.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from autotune.tracking.runs import TAG_DRIVER_HOST, TAG_DRIVER_PID, TAG_REASON, TAG_STATUS
from autotune.tracking.store import log_batch, retry

if TYPE_CHECKING:
    from mlflow import MlflowClient

STALE_REASON = "the search driver stopped before this run finished"


def driver_tags() -> dict[str, str]:
    """The tags that name this process as a search run's driver."""
    return {TAG_DRIVER_HOST: socket.gethostname(), TAG_DRIVER_PID: str(os.getpid())}


def driver_alive(tags: Mapping[str, str]) -> bool:
    """Whether a search run's driver may still be running (unknown counts as alive)."""
    if tags.get(TAG_DRIVER_HOST) != socket.gethostname():
        return True
    try:
        os.kill(int(tags.get(TAG_DRIVER_PID, "")), 0)
    except ValueError:
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_stale(client: MlflowClient, children: Iterable[Any], parent: str, *,
               include_parent: bool) -> list[str]:
    """Mark FAILED the RUNNING ``children`` runs of ``parent`` (see :meth:`Tracker.mark_stale_runs`)."""
    marked = []
    for run in children:
        if run.info.status == "RUNNING":
            run_id = run.info.run_id
            log_batch(client, run_id, tags={TAG_STATUS: "failed", TAG_REASON: STALE_REASON,
                                            "autotune.stale": "true"})
            retry(partial(client.set_terminated, run_id, status="FAILED"))
            marked.append(run_id)
    if include_parent and retry(lambda: client.get_run(parent)).info.status == "RUNNING":
        log_batch(client, parent, tags={"autotune.stale": "true", TAG_REASON: STALE_REASON})
        retry(lambda: client.set_terminated(parent, status="FAILED"))
        marked.append(parent)
    return marked
