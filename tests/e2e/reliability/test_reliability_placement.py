"""Multi-node placement on a real local Ray cluster: three raylets on this machine declaring 0, 8
and 4 logical GPUs, and searches run through the CLI with ``--address``.

What is checked, from records independent of the tuner:

- every server saw exactly ``tp_size`` GPUs, all of one node, with ids that node has (the
  emulator records the ``CUDA_VISIBLE_DEVICES`` it got, in the usage file of its node);
- the node a server recorded its GPUs on is the node Ray ran the trial's actor on (the server log
  names the worker pid; the GCS actor table gives that worker's node);
- no GPU of a node was ever held by two servers at once (per-GPU ``flock`` in the emulator: no
  "already in use" failure, and the usage intervals per node and GPU id never overlap);
- trials were packed: servers ran side by side on free GPUs;
- with ``exclusive_node: true``, never two servers on one node at a time, finalists included;
- afterwards no server, watchdog, port or GPU lock is left.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.reliability import record
from tests.e2e.reliability.cluster import LocalCluster, start_cluster
from tests.e2e.reliability.procs import leftovers, new_token
from tests.e2e.reliability.searchrun import SearchDir, run_cli
from tests.e2e.reliability.spaces import base_space, merged, write_space
from tests.e2e.reliability.usage import (
    Use,
    log_of,
    max_concurrent,
    overlaps_per_gpu,
    overlaps_per_node,
    read_logs,
    read_usage,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("cluster")
    cl = start_cluster(root / "locks", new_token("placement"))
    try:
        yield cl
    finally:
        cl.shutdown()


def _uses_since(cl: LocalCluster, since: float) -> list[Use]:
    lock_dirs = {name: cl.lock_dir(name) for name, spec in cl.nodes.items() if spec.gpus}
    return [u for u in read_usage(lock_dirs) if u.start >= since]


def _actor_nodes(cl: LocalCluster) -> dict[int, str]:
    """Worker pid -> node name of every actor the GCS knows (dead ones included)."""
    table = cl._cluster.global_state.actor_table(None)
    out = {}
    for info in table.values():
        pid = info.get("Pid")
        node = cl.node_name(info.get("Address", {}).get("NodeID", ""))
        if pid and node:
            out[int(pid)] = node
    return out


def _check_uses(cl: LocalCluster, uses: list[Use], search: SearchDir) -> dict[str, Any]:
    """Per-server facts: GPU count, ids valid on its node, its node == Ray's node for the trial."""
    logs = read_logs(search.ray_root)
    results = search.trial_results()
    actors = _actor_nodes(cl)
    problems: list[str] = []
    ray_checked = 0
    servers_per_trial: dict[str, int] = {}
    for u in uses:
        node_gpus = cl.nodes[u.node].gpus
        if len(u.gpus) != u.tp_size:
            problems.append(f"server {u.pid} on {u.node} saw GPUs {u.gpus} for tp_size {u.tp_size}")
        if len(set(u.gpus)) != len(u.gpus) or not all(g.isdigit() and int(g) < node_gpus for g in u.gpus):
            problems.append(f"server {u.pid} on {u.node} ({node_gpus} GPUs) got ids {u.gpus}")
        log = log_of(u, logs)
        if log is None:
            problems.append(f"no server log for the usage line of pid {u.pid} port {u.port}")
            continue
        if log.trial_id is None:
            continue  # a finalist task, not a Tune trial actor
        servers_per_trial[log.trial_id] = servers_per_trial.get(log.trial_id, 0) + 1
        result = results.get(log.trial_id)
        if result is None:
            problems.append(f"trial {log.trial_id} ran a server but reported nothing")
            continue
        if result.get("pid") != log.worker_pid:
            problems.append(f"trial {log.trial_id}: log names worker {log.worker_pid}, "
                            f"Tune reported pid {result.get('pid')}")
        ray_node = actors.get(log.worker_pid)
        if ray_node != u.node:
            problems.append(f"trial {log.trial_id}: server on {u.node}, Ray actor on {ray_node}")
        else:
            ray_checked += 1
        if int(result["config"].get("tp_size") or 1) != u.tp_size:
            problems.append(f"trial {log.trial_id}: config tp {result['config'].get('tp_size')}, "
                            f"server tp {u.tp_size}")
    missing = sorted(set(results) - set(servers_per_trial))
    if missing:
        problems.append(f"trials with no recorded server: {missing}")
    return {"problems": problems, "ray_checked": ray_checked, "trials": len(results),
            "packed": _packed_pairs(uses, logs)}


def _packed_pairs(uses: list[Use], logs: list) -> list[tuple[str, str, str]]:
    """Trials that held GPUs of one node at the same time: (node, trial, trial).

    A trial's span runs from the start of its first measurement (the log name's timestamp,
    taken inside the trial's actor, after Ray granted its GPUs) to the exit of its last server.
    """
    spans: dict[str, list] = {}
    for u in uses:
        log = log_of(u, logs)
        if log is None or log.trial_id is None:
            continue
        node, start, end = spans.get(log.trial_id, [u.node, log.began, u.end])
        spans[log.trial_id] = [node, min(start, log.began), max(end, u.end)]
    items = sorted(spans.items(), key=lambda kv: kv[1][1])
    pairs = []
    for i, (a, (node_a, _, end_a)) in enumerate(items):
        for b, (node_b, start_b, _) in items[i + 1:]:
            if node_a == node_b and start_b < end_a:
                pairs.append((node_a, a, b))
    return pairs


def _already_in_use(search: SearchDir) -> list[str]:
    return [str(p) for p in search.ray_root.rglob("*.log")
            if "already in use" in p.read_text(errors="replace")]


def test_mixed_tp_search_packs_trials_on_single_nodes(cluster: LocalCluster, tmp_path: Path) -> None:
    """tp 1, 2, 4 and 8 trials on an 8-GPU and a 4-GPU node, six at a time."""
    trials = 8
    space = merged(base_space("placement-mixed", token=cluster.token),
                   parameters={"tp_size": {"type": "categorical", "choices": [1, 2, 4, 8]}},
                   # The random sampler with this seed proposes tp 1, 2, 4, 2, 8, 1, 2, 2.
                   budget={"trials": trials}, search={"sampler": "random", "seed": 15})
    path = write_space(tmp_path, space)
    since = time.time()
    proc = run_cli(path, "--address", cluster.address, "--concurrency", "6", "--summary-json",
                   str(tmp_path / "summary.json"), root=tmp_path, token=cluster.token, timeout_s=480)
    search = SearchDir(tmp_path, space["name"])
    uses = _uses_since(cluster, since)
    facts = _check_uses(cluster, uses, search) if proc.returncode == 0 else {"problems": ["CLI failed"]}
    gpu_overlaps = overlaps_per_gpu(uses)
    node_overlaps = overlaps_per_node(uses)
    in_use = _already_in_use(search)
    left = leftovers(cluster.token, log_dir=search.ray_root, lock_dirs=cluster.lock_dirs())
    summary = json.loads((tmp_path / "summary.json").read_text()) if proc.returncode == 0 else {}
    counts = summary.get("trials", {})
    tps = sorted({u.tp_size for u in uses})
    rec = record.record(
        "placement", "mixed tp 1/2/4/8, concurrency 6",
        ok=(proc.returncode == 0 and not facts["problems"] and not gpu_overlaps and not in_use
            and bool(facts.get("packed")) and left.count == 0),
        nodes={n: s.gpus for n, s in cluster.nodes.items()}, servers=len(uses), tp_sizes=tps,
        servers_checked_against_ray=facts.get("ray_checked"), problems=facts["problems"][:10],
        gpu_overlaps=len(gpu_overlaps), already_in_use=len(in_use),
        max_servers_at_once=max_concurrent(uses), servers_side_by_side_on_a_node=len(node_overlaps),
        trials_side_by_side_on_a_node=len(facts.get("packed") or []),
        tp8_nodes=sorted({u.node for u in uses if u.tp_size == 8}))
    record.search_outcome("placement-mixed", planned=trials, completed=counts.get("total", 0),
                          failed=counts.get("failed", 0), orphans=left.count)

    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert counts.get("total") == trials and counts.get("failed") == 0, counts
    assert not facts["problems"], "\n".join(facts["problems"])
    assert facts["ray_checked"] >= trials, facts
    assert tps == [1, 2, 4, 8], f"precondition: seed 15 should run every TP size, got {tps}"
    assert rec["tp8_nodes"] in ([], ["gpu8"]), "a tp 8 server can only run on the 8-GPU node"
    assert not gpu_overlaps, [(a.pid, b.pid, where) for a, b, where in gpu_overlaps]
    assert not in_use, in_use
    assert facts["packed"], "no two trials ever held GPUs of one node at once: not packed"
    assert left.count == 0, left.describe()


def test_exclusive_node_runs_one_benchmark_per_node(cluster: LocalCluster, tmp_path: Path) -> None:
    """``exclusive_node: true``: trials and finalists alike, one server per node at a time."""
    trials = 5
    space = merged(base_space("placement-exclusive", token=cluster.token),
                   parameters={"tp_size": {"type": "categorical", "choices": [1, 2, 4]}},
                   budget={"trials": trials}, exclusive_node=True,
                   search={"seed": 1, "finalists": 2, "finalist_repeats": 1})
    path = write_space(tmp_path, space)
    since = time.time()
    proc = run_cli(path, "--address", cluster.address, "--concurrency", "4", "--summary-json",
                   str(tmp_path / "summary.json"), root=tmp_path, token=cluster.token, timeout_s=480)
    search = SearchDir(tmp_path, space["name"])
    uses = _uses_since(cluster, since)
    node_overlaps = overlaps_per_node(uses)
    facts = _check_uses(cluster, uses, search) if proc.returncode == 0 else {"problems": ["CLI failed"]}
    left = leftovers(cluster.token, log_dir=search.ray_root, lock_dirs=cluster.lock_dirs())
    summary = json.loads((tmp_path / "summary.json").read_text()) if proc.returncode == 0 else {}
    counts = summary.get("trials", {})
    finalist_servers = sum(1 for u in uses if (g := log_of(u, read_logs(search.ray_root)))
                           and g.trial_id is None)
    record.record(
        "placement", "exclusive_node: one benchmark per node",
        ok=proc.returncode == 0 and not node_overlaps and not facts["problems"] and left.count == 0,
        servers=len(uses), finalist_servers=finalist_servers, nodes_used=sorted({u.node for u in uses}),
        same_node_overlaps=[(a.node, a.pid, b.pid) for a, b in node_overlaps][:10],
        problems=facts["problems"][:10])
    record.search_outcome("placement-exclusive", planned=trials, completed=counts.get("total", 0),
                          failed=counts.get("failed", 0), orphans=left.count)

    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert counts.get("total") == trials, counts
    assert not facts["problems"], "\n".join(facts["problems"])
    assert not node_overlaps, [(a.node, a.pid, b.pid, a.end - b.start) for a, b in node_overlaps]
    assert len({u.node for u in uses}) == 2, "both GPU nodes should have been used"
    assert left.count == 0, left.describe()
