"""The workload as an MLflow dataset (autotune.tracking.dataset), on a real sqlite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from autotune.space.workload import Workload
from autotune.tracking.dataset import log_workload, source_path, workload_rows


def _run(tmp_path: Path) -> tuple[MlflowClient, str]:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    return client, client.create_run(client.create_experiment("x")).info.run_id


def test_one_row_a_request_and_chats_as_json(tmp_path: Path) -> None:
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]}) + "\n"
                            for i in range(5)))
    w = Workload.from_spec({"source": "jsonl", "path": str(data), "num_prompts": 3, "warmup_prompts": 1,
                            "output_len": 8, "api": "chat"}, file=str(tmp_path / "space.yaml"))
    rows = workload_rows(w)
    assert [r["set"] for r in rows] == ["warmup", "measured", "measured", "measured"]
    assert {r["id"] for r in rows} == {p.id for p in w.warmup() + w.measured()}
    assert all(r["max_tokens"] == 8 and r["ignore_eos"] for r in rows)
    assert json.loads(rows[1]["prompt"])[0]["role"] == "user"
    assert source_path(w) == str(w.path) and Path(source_path(w)).name == "chats.jsonl"


@pytest.mark.slow  # 12 s at load ~8 (make test-fast leaves it out)
def test_logged_once_per_workload_and_tagged_with_its_load_shape(tmp_path: Path) -> None:
    client, run_id = _run(tmp_path)
    w = Workload.from_spec({"num_prompts": 3, "warmup_prompts": 1, "output_len": 8, "concurrency": 2})
    digest = log_workload(client, run_id, w, name="demo")
    assert log_workload(client, run_id, w, name="demo") == digest  # a resumed search adds nothing
    (only,) = client.get_run(run_id).inputs.dataset_inputs
    assert only.dataset.digest == digest and only.dataset.name == "demo"
    assert Path(json.loads(only.dataset.source)["uri"]).name == "prompts.jsonl"  # the built-in set
    tags = {t.key: t.value for t in only.tags}
    assert tags["mlflow.data.context"] == "workload"
    assert tags["autotune.workload.concurrency"] == "2" and tags["autotune.workload.request_rate"] == "null"
    other = Workload.from_spec({"num_prompts": 4, "warmup_prompts": 1, "output_len": 8})
    assert log_workload(client, run_id, other, name="demo") != digest
    assert len(client.get_run(run_id).inputs.dataset_inputs) == 2
