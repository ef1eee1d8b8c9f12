"""A multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), for placement tests.

Each node is a real raylet declaring its own logical GPU count. Logical GPU ids are per node
(both an 8-GPU and a 4-GPU node have a GPU "0"), so the emulator's per-GPU lock directory must be
per node too, or two servers on GPU 0 of different nodes would look like one GPU used twice. Each
node is started with its own ``AUTOTUNE_SIM_GPU_LOCK_DIR`` in the raylet's environment
(``env_vars`` of the node's start parameters). Ray starts worker processes with the raylet's
environment, and a trial's server inherits its worker's environment (``trial.measure`` copies
``os.environ``), so every server locks and records its GPUs in the directory of the node that
runs it. The directory therefore also names the node a server ran on, independent of Ray.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.reliability.procs import TOKEN_ENV


@dataclass(frozen=True)
class NodeSpec:
    """One node: a name (its lock directory), GPUs and CPUs it declares."""

    name: str
    gpus: int
    cpus: int


# Head without GPUs (it hosts the driver's actors only), an 8-GPU and a 4-GPU node.
DEFAULT_NODES = (NodeSpec("head", 0, 1), NodeSpec("gpu8", 8, 8), NodeSpec("gpu4", 4, 4))


@dataclass
class LocalCluster:
    """A started cluster: its address, and per node its Ray node id and lock directory."""

    address: str
    lock_root: Path
    token: str
    nodes: dict[str, NodeSpec]
    node_ids: dict[str, str] = field(default_factory=dict)
    _cluster: Any = None
    _handles: dict[str, Any] = field(default_factory=dict)

    def remove_node(self, name: str) -> None:
        """Kill a node's raylet and every process of it at once (a machine lost mid-trial)."""
        self._cluster.remove_node(self._handles.pop(name), allow_graceful=False)

    def lock_dir(self, node: str) -> Path:
        return self.lock_root / node

    def lock_dirs(self) -> list[Path]:
        return [self.lock_dir(n) for n, spec in self.nodes.items() if spec.gpus]

    def node_name(self, node_id: str) -> str | None:
        for name, nid in self.node_ids.items():
            if nid == node_id:
                return name
        return None

    def shutdown(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None


def start_cluster(lock_root: Path, token: str,
                  nodes: tuple[NodeSpec, ...] = DEFAULT_NODES) -> LocalCluster:
    """Start the nodes (head first) and wait until all are up.

    Every node's processes carry ``TOKEN_ENV=token`` so leftovers can be found by pid; GPU nodes
    get the custom resource ``autotune_node: 1`` (what ``exclusive_node: true`` asks for).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from ray.cluster_utils import Cluster

    def args(spec: NodeSpec) -> dict[str, Any]:
        env = {TOKEN_ENV: token}
        out: dict[str, Any] = {"num_cpus": spec.cpus, "num_gpus": spec.gpus,
                               "include_dashboard": False,
                               "object_store_memory": 80 * 1024 * 1024}
        if spec.gpus:
            env["AUTOTUNE_SIM_GPU_LOCK_DIR"] = str(lock_root / spec.name)
            out["resources"] = {"autotune_node": 1}
        out["env_vars"] = env
        return out

    head, *rest = nodes
    cluster = Cluster(initialize_head=True, head_node_args=args(head))
    made = {head.name: cluster.head_node}
    for spec in rest:
        made[spec.name] = cluster.add_node(**args(spec))
    cluster.wait_for_nodes()
    return LocalCluster(address=cluster.address, lock_root=lock_root, token=token,
                        nodes={s.name: s for s in nodes},
                        node_ids={name: node.node_id for name, node in made.items()},
                        _cluster=cluster, _handles=made)
