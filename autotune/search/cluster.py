"""The Ray cluster a search runs on: joining or starting it, and checking its nodes fit the trials.

Both fail fast with a :class:`~autotune.errors.ConfigError` that says why, where Ray would wait
or retry for minutes. :data:`EXCLUSIVE_RESOURCE` is the custom resource of ``exclusive_node``,
asked for by trials and finalists alike.
"""

from __future__ import annotations

import math
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import command_line as cli
from autotune.backend import get_backend
from autotune.errors import ConfigError
from autotune.search.options import SearchOptions
from autotune.sglang.flags import share_installed_flags

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

# Custom resource a node declares once; a trial of an exclusive_node space asks for all of it.
EXCLUSIVE_RESOURCE = "autotune_node"


def _sim_logical_gpus(space: SearchSpace, concurrency: int | None) -> int:
    """Logical GPUs for a sim search on a GPU-less machine: whole nodes of the profile's size,
    enough for ``concurrency`` trials of the largest TP at once."""
    if space.profile is None:  # a sim space always names its profile
        raise ValueError(f"space {space.name} names no sim profile")
    per_node = get_backend(space.backend).emulator.load_profile(space.profile).gpus_per_node
    tp = max(space.tp_sizes())
    want = tp * max(1, concurrency or 1)
    nodes = max(1, math.ceil(want / per_node))
    return per_node * nodes


def _probe_ray_address(address: str, *, timeout_s: float = 5.0) -> None:
    """Fail fast when nothing listens at a ``host:port`` Ray address.

    ``ray.init`` retries an unreachable GCS 20 times for about 40 s each, printing warnings, so a
    mistyped address would take some 14 minutes to fail. Forms without a port (``auto``,
    ``local``) are left to Ray.
    """
    import socket

    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot join the Ray cluster at {address!r}: nothing answers on "
                          f"{host}:{port} ({exc.strerror or type(exc).__name__}). Check the "
                          "address (ray status on the head node prints it), or leave --address "
                          "and RAY_ADDRESS unset for an embedded Ray.") from None


def start_ray(space: SearchSpace, opts: SearchOptions, concurrency: int | None, *,
              flag_table_dir: Path | None = None) -> str:
    """:func:`init_ray`, stoppable: a stop signal while Ray starts leaves nothing behind.

    ``ray.init`` puts its own SIGTERM handler in place (``sys.exit(15)``) and, once its core
    worker is up, a native one that dumps a stack trace and aborts (exit 134). Both are replaced
    by the command's own (:func:`~autotune.command_line.interruptible`) as soon as it returns; a
    SIGINT or SIGTERM before that stops the half-started Ray (its raylet, GCS and agents would
    linger for a minute) and goes on up as the same ``KeyboardInterrupt``.

    Returns:
        Where Ray runs, as :func:`init_ray` says.
    """
    import ray

    try:
        return init_ray(space, opts, concurrency, flag_table_dir=flag_table_dir)
    except (KeyboardInterrupt, SystemExit) as exc:
        if isinstance(exc, SystemExit) and exc.code != signal.SIGTERM:
            raise
        if isinstance(exc, SystemExit):  # Ray's handler of the moment: the same stop as ours
            cli.note_stop(signal.SIGTERM)
        ray.shutdown()
        raise KeyboardInterrupt from None
    finally:
        cli.interruptible()


def init_ray(space: SearchSpace, opts: SearchOptions, concurrency: int | None, *,
             flag_table_dir: Path | None = None) -> str:
    """Join ``--address``/``RAY_ADDRESS`` or start an embedded Ray; returns a description.

    An embedded Ray's trial processes get the installed SGLang's flags as a table written under
    ``flag_table_dir`` (:func:`autotune.sglang.flags.share_installed_flags`), so the first trial of
    a session does not import SGLang's parser before its server starts. Not on a joined cluster:
    the file would not be on its other nodes.
    """
    import ray

    address = opts.address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return "already initialised"
    if address:
        _probe_ray_address(address)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"cannot join the Ray cluster at {address!r}: {exc}. Check the "
                              "address (ray status on the head node prints it), or leave "
                              "--address and RAY_ADDRESS unset for an embedded Ray.") from None
        return address
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if flag_table_dir is not None:
        share_installed_flags(flag_table_dir)  # before ray.init: its workers inherit the variable
    # address="local": with no address, ray.init() joins the cluster last started on this machine
    # (/tmp/ray/ray_current_cluster) instead of starting the embedded one it was asked for.
    kwargs: dict[str, Any] = {"address": "local", "include_dashboard": False,
                              "log_to_driver": False, "configure_logging": False}
    if not get_backend(space.backend).needs_gpus:
        kwargs["num_gpus"] = _sim_logical_gpus(space, concurrency)
        kwargs["num_cpus"] = max(os.cpu_count() or 1, int(kwargs["num_gpus"]))
    if space.exclusive_node:
        kwargs["resources"] = {EXCLUSIVE_RESOURCE: 1}  # this machine is one node
    try:
        ray.init(**kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
        # Ray gives its own raylet a fixed 30 s to register with the GCS (ray/_private/node.py; no
        # setting changes it), and a loaded machine can miss that: "The current node timed out
        # during startup". One more start, after the first is cleaned up, is cheap next to a search.
        ray.shutdown()
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"ray: the embedded cluster did not start ({first}); starting it once more",
              file=sys.stderr, flush=True)
        ray.init(**kwargs)
    return "embedded"


def check_cluster_fits(space: SearchSpace, where: str) -> None:
    """Fail before any trial starts if no node can ever run the largest trial.

    Ray Tune waits forever for a resource request that no node can meet, so a tp_size larger
    than every node, or ``exclusive_node`` on a cluster whose nodes do not declare the resource,
    would hang the search instead of saying why.
    """
    import ray

    tp = max(space.tp_sizes())
    cpus = space.resources.cpus_per_trial
    nodes = [n.get("Resources") or {} for n in ray.nodes() if n.get("Alive")]
    if space.exclusive_node:
        nodes = [r for r in nodes if r.get(EXCLUSIVE_RESOURCE, 0) >= 1]
        if not nodes:
            raise ConfigError(
                f"exclusive_node: true needs GPU nodes that declare the custom resource "
                f"{EXCLUSIVE_RESOURCE}: 1, and no node of the Ray cluster ({where}) does; start "
                f"them with ray start ... --resources '{{\"{EXCLUSIVE_RESOURCE}\": 1}}' or set "
                "exclusive_node: false", field="exclusive_node")
    if not any(r.get("GPU", 0) >= tp and r.get("CPU", 0) >= cpus for r in nodes):
        most = max((int(r.get("GPU", 0)) for r in nodes), default=0)
        raise ConfigError(
            f"a trial with tp_size {tp} needs {tp} GPUs and {cpus:g} CPU(s) on one node, but the "
            f"largest node of the Ray cluster ({where}) has {most} GPU(s); narrow the tp_size "
            "choices or add a larger node", field="tp_size")
