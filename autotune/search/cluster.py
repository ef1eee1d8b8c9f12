"""The Ray cluster a search runs on: joining or starting it, and checking its nodes fit the trials.

Both fail fast with a :class:`~autotune.errors.ConfigError` that says why, where Ray would wait
or retry for minutes. :data:`EXCLUSIVE_RESOURCE` is the custom resource of ``exclusive_node``,
asked for by trials and finalists alike.
"""

from __future__ import annotations

import math
import os
import re
import signal
import socket
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


#: What ``--address`` (or ``RAY_ADDRESS``) may be, for every message that refuses one.
ADDRESS_FORMS = ("auto (the cluster `ray start` began on this machine), host:6379 (a head node's GCS) "
                 "or ray://host:10001 (Ray Client); leave --address and RAY_ADDRESS unset for an "
                 "embedded Ray")
_HOST = re.compile(r"\A(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\Z")


def _host_port(address: str, source: str) -> tuple[str, int]:
    """``(host, port)`` of a ``[ray://]host:port`` address, or a ConfigError that says what is off."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        rest = address
    elif scheme != "ray":
        raise ConfigError(f"{source} {address!r} is not a Ray address: {scheme}:// is no scheme Ray "
                          f"joins by; give {ADDRESS_FORMS}")
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{source} {address!r} is not a Ray address: it has no host:port; "
                          f"give {ADDRESS_FORMS}")
    if not _HOST.match(host):
        raise ConfigError(f"{source} {address!r} is not a Ray address: {host!r} is not a host name "
                          f"or IP address; give {ADDRESS_FORMS}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{source} {address!r} is not a Ray address: {port!r} is not a port "
                          f"(1 to 65535); give {ADDRESS_FORMS}")
    return host.strip("[]"), int(port)


def _local_cluster(source: str) -> str | None:
    """The address ``auto`` names: the cluster ``ray start`` began on this machine, as ``ray.init``
    finds it; None when there is none (said as a ConfigError)."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        return canonicalize_bootstrap_address("auto")
    except (ConnectionError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{source} 'auto' finds no Ray cluster on this machine ({first}); start one "
                          f"with ray start --head, or give {ADDRESS_FORMS}") from None


def check_ray_address(address: str | None, *, source: str = "--address", timeout_s: float = 5.0) -> None:
    """Refuse a Ray address that cannot be joined, before the search makes any file or folder.

    The form is checked first (``auto``, ``local``, ``host:port``, ``ray://host:port``), then that
    something answers there: ``ray.init`` retries an unreachable GCS 20 times for about 40 s each,
    printing warnings, so a mistyped address would take some 14 minutes to fail, after the MLflow
    store and the search's folders were made. Whether what answers is Ray stays ``ray.init``'s to
    say (:func:`init_ray`).

    Args:
        address: ``--address`` or ``RAY_ADDRESS``; None (or empty): an embedded Ray, nothing to check.
        source: Where it came from, for the message.
        timeout_s: How long a connection may take to be accepted.

    Raises:
        ConfigError: Malformed, ``auto`` with no cluster here, or nothing answers; one line that
            says which, and the forms that would be right.
    """
    if not address or address == "local":
        return
    where = _local_cluster(source) if address == "auto" else address
    if where is None:
        return
    host, port = _host_port(where, source)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise ConfigError(f"cannot join the Ray cluster at {address!r}: nothing answers on {host}:{port} "
                          f"({why}). Check the address (ray status on the head node prints it); Ray takes "
                          f"{ADDRESS_FORMS}") from None


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
        # check_ray_address ran before the search made anything (run_search).
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
