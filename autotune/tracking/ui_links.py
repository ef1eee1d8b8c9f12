"""Where a person looks at a search in the MLflow UI: the links autotune prints, the view they open.

MLflow 3.17's UI shows either its GenAI screens (traces first, "Evaluation runs", a run page under
the breadcrumb "Evaluations") or its model-training screens (the runs table, "Runs"), and what
decides is the browser, not the experiment: the URL parameter ``workflowType`` (``genai`` or
``machine_learning``), else the "GenAI / Model training" toggle as that browser last left it,
``genai`` when never touched (``WorkflowTypeContext.tsx``). The experiment tag
``mlflow.experimentKind`` is read only when workflow-based navigation is off, and 3.17.2 ships it
on (``useExperimentKind`` in ``ExperimentKindUtils.ts``; ``shouldEnableWorkflowBasedNavigation``
returns true). So every link printed here carries ``workflowType=machine_learning``; the runs link
also opens :data:`VIEW_ID`, a saved view (an experiment tag that MLflow's "Views" menu lists) with
tok/s, speedup, status and the winner marker as columns, ordered by the trial runs' rank:
the winner first, then the other feasible runs best first, the rest after them
(:func:`autotune.tracking.runs.display_order`, logged at the search's end). The links MLflow renders
itself (a run's name in the table) drop the parameter: a click from the table opens the run under
"Evaluations" until the toggle is set to "Model training" once (``docs/architecture.md``).
"""

from __future__ import annotations

import json

#: The URL parameter that opens MLflow 3's model-training screens.
WORKFLOW = "workflowType=machine_learning"
#: The saved view the runs link opens, and the experiment tag that holds it.
VIEW_ID = "autotune-trials"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
VIEW_NAME = "autotune: trials, winner first"
#: The view's columns (``kind.key``), beside the run name, start time and duration MLflow always shows;
#: MLflow puts metrics before tags, each group by name. Few enough to fit beside MLflow's assistant
#: panel, which opens on a first visit: the accept length (on each run's page) gives way to the marker.
COLUMNS = ("metrics.output_tok_s", "metrics.speedup", "tags.autotune.status", "tags.autotune.winner")
#: Ascending: rank 1 is the winner; MLflow puts the runs without a rank (NaN, then none) last.
ORDER_BY = "metrics.rank"


def _column(name: str) -> str:
    kind, key = name.split(".", 1)
    return f"{kind}.`{key}`"  # how MLflow's runs table names a column


def view_tags(*, created_ms: int) -> dict[str, str]:
    """The experiment tag of the saved view :func:`runs_url` opens.

    Its value is MLflow's saved-view envelope (``savedViewEnvelope.ts``): a name and time the
    "Views" menu shows, and the view's state as JSON (search facets and the runs table's UI state),
    which MLflow reads compressed or, as here, plain.

    Args:
        created_ms: When the view was made (the menu sorts by it).
    """
    return {VIEW_TAG: json.dumps({"name": VIEW_NAME, "createdAt": created_ms, "state": json.dumps(_state())})}


def _state() -> dict[str, object]:
    return {"orderByKey": _column(ORDER_BY), "orderByAsc": True, "selectedColumns": [_column(c) for c in COLUMNS]}


def view_outdated(tag: str | None) -> bool:
    """Whether an experiment's view tag (None: it has none) is missing or not this version's view."""
    try:
        return tag is None or json.loads(json.loads(tag)["state"]) != _state()
    except (ValueError, KeyError, TypeError):
        return True


def runs_url(base: str, experiment_id: str) -> str:
    """The search's runs table: the training-runs screens, the trials' figures as columns."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{WORKFLOW}&viewStateShareKey={VIEW_ID}"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """One run's page (the search's or a trial's) under "Runs", not "Evaluations"."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{WORKFLOW}"


__all__ = ["COLUMNS", "VIEW_ID", "VIEW_NAME", "VIEW_TAG", "WORKFLOW", "run_url", "runs_url", "view_outdated",
           "view_tags"]
