"""The server backends a trial can launch: real SGLang, or the emulator that stands in for it.

A :class:`Backend` says what ``python -m`` runs and the few facts the rest of autotune acts on
(whether timings are modelled, whether trials need physical GPUs, whether concurrent servers
compete for this machine's cores); :data:`BACKENDS` is the one list of valid names, read by the
space schema, :class:`~autotune.launch.spec.LaunchSpec`, the search, trials and exports. It lives
in ``sglang/``, the lowest package, because ``nccl/`` (a sim space's hidden size) and ``space/``
(which names a space may give) need it and both come before ``launch/`` and ``server/``; it names
the emulator's module as text only, so ``sglang/`` still imports nothing from ``sim/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from autotune.errors import ConfigError

__all__ = ["BACKENDS", "Backend", "get_backend"]


@dataclass(frozen=True)
class Backend:
    """One server backend.

    Attributes:
        name: What a space's ``backend:`` and the ``autotune.backend`` tag say.
        module: The module run with ``python -m``.
        emulated: The emulator models the timings from a profile (which the space must name, and
            which gives the hidden size, the seed and the NCCL probe's ``sim`` backend); it reads
            no model files, and its figures must be re-measured on real GPUs.
        needs_gpus: Trials take physical GPUs; otherwise an embedded Ray gets logical ones.
        shares_cores: Its servers compute on this machine's CPU cores, so concurrent ones slow
            each other down (finalists are confirmed one at a time).
    """

    name: str
    module: str
    emulated: bool
    needs_gpus: bool
    shares_cores: bool


BACKENDS: Mapping[str, Backend] = MappingProxyType({
    "sglang": Backend("sglang", "sglang.launch_server", emulated=False, needs_gpus=True,
                      shares_cores=False),
    "sim": Backend("sim", "autotune.sim.server", emulated=True, needs_gpus=False, shares_cores=True),
})
"""Backend name -> :class:`Backend`."""


def get_backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises:
        ConfigError: For a name not in :data:`BACKENDS`.
    """
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}",
                          field="backend") from None
