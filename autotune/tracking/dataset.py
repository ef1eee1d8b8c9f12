"""The search's workload as an MLflow dataset on its parent run.

MLflow shows a run's datasets in the runs table ("Dataset" column) and on the run's page, with a
digest: two searches with the same digest sent the same requests. The dataset is the table of
requests the workload samples (warm-up and measured, each prompt with the output tokens it asks
for), its source is the prompt file (the packaged built-in set for ``source: builtin``), and the
load shape (concurrency, request rate, seed) is kept as the input's tags so it shows beside it.
"""

from __future__ import annotations

import json
import warnings
from importlib import resources
from typing import TYPE_CHECKING, Any

from autotune.tracking.store import retry

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from autotune.space.workload import Workload

#: The input tag MLflow's UI reads to label a dataset's role.
CONTEXT_TAG = "mlflow.data.context"
CONTEXT = "workload"


def workload_rows(workload: Workload) -> list[dict[str, Any]]:
    """One row a request: ``set`` (warmup / measured), ``id``, ``max_tokens``, ``ignore_eos``,
    ``prompt`` (the text, or the chat's messages as JSON)."""
    rows = []
    for kind, prompts in (("warmup", workload.warmup()), ("measured", workload.measured())):
        for p in prompts:
            text = p.text if p.text is not None else json.dumps(
                [{"role": r, "content": c} for r, c in (p.messages or ())])
            rows.append({"set": kind, "id": p.id, "max_tokens": p.max_tokens,
                         "ignore_eos": p.ignore_eos, "prompt": text})
    return rows


def source_path(workload: Workload) -> str:
    """The file the prompts came from: the workload's path, or the packaged built-in set."""
    if workload.path:
        return str(workload.path)
    return str(resources.files("autotune") / "data" / "prompts.jsonl")


def log_workload(client: MlflowClient, run_id: str, workload: Workload, *, name: str) -> str:
    """Log ``workload`` as the dataset input of run ``run_id``; return the dataset's digest.

    Args:
        client: The tracking client.
        run_id: The search's parent run.
        workload: The space's workload.
        name: The dataset's name (the space's name is a good one).
    """
    import pandas as pd
    from mlflow.data.pandas_dataset import from_pandas
    from mlflow.entities import DatasetInput, InputTag

    frame = pd.DataFrame(workload_rows(workload),
                         columns=["set", "id", "max_tokens", "ignore_eos", "prompt"])
    with warnings.catch_warnings():
        # MLflow warns that a local file source may not be reachable from elsewhere and that the
        # inferred integer columns cannot hold missing values; neither applies to a label.
        warnings.simplefilter("ignore")
        dataset = from_pandas(frame, source=source_path(workload), name=name)
        entity = dataset._to_mlflow_entity()
    inputs = retry(lambda: client.get_run(run_id)).inputs
    logged = inputs.dataset_inputs if inputs is not None else []
    if any(i.dataset.digest == entity.digest and i.dataset.name == entity.name for i in logged):
        return entity.digest  # a resumed search: the same requests, already there
    shape = {k: v for k, v in workload.to_dict().items() if k != "path"}
    tags = [InputTag(CONTEXT_TAG, CONTEXT)] + [
        InputTag(f"autotune.workload.{k}", "null" if v is None else str(v)) for k, v in shape.items()]
    retry(lambda: client.log_inputs(run_id, datasets=[DatasetInput(entity, tags=tags)]))
    return entity.digest


__all__ = ["CONTEXT", "CONTEXT_TAG", "log_workload", "source_path", "workload_rows"]
