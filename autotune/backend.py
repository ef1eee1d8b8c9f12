"""The server backends a trial can launch: real SGLang, or the emulator that stands in for it.

A :class:`Backend` says what ``python -m`` runs and the few facts the rest of autotune acts on
(whether timings are modelled, whether trials need physical GPUs, whether concurrent servers
compete for this machine's cores); :data:`BACKENDS` is the one list of valid names, read by the
space schema, :class:`~autotune.launch.spec.LaunchSpec`, the search, trials and exports.

What differs between real SGLang and the emulator beyond those facts is the :class:`Emulator`
interface: the profile a space names and what it says (hidden size, GPUs per node), the launch
environment that tells the emulator its profile and seed, the variables only the emulator reads,
and the all-reduce model the NCCL probe's ``sim`` mode ranks by. This registry is the only module
outside ``sim/`` (and the emulator tools, ``simtools/``) that imports the emulator, and it does so
lazily: a search on real SGLang never loads it. It sits right after ``sim/`` in the package order,
before ``nccl/`` and ``space/``, which need it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from autotune.errors import ConfigError

__all__ = ["BACKENDS", "Backend", "Emulator", "EmulatedProfile", "get_backend", "is_emulator_env"]


class EmulatedProfile(Protocol):
    """What the rest of autotune reads from an emulator profile."""

    @property
    def hidden_size(self) -> int: ...

    @property
    def gpus_per_node(self) -> int: ...


class Emulator(Protocol):
    """What an emulated backend does that real SGLang does not (``autotune.sim.emulator``)."""

    def builtin_profiles(self) -> list[str]:
        """The names of the profiles shipped with the emulator."""
        ...

    def load_profile(self, name_or_path: str | Path) -> EmulatedProfile:
        """A profile by built-in name or YAML path.

        Raises:
            ConfigError: A file that is not a valid profile (``ValueError``/``TypeError`` for
                values of the wrong kind).
        """
        ...

    def launch_env(self, *, profile: str | None = None, seed: int | None = None) -> dict[str, str]:
        """The environment that makes a launched emulator use ``profile`` and ``seed`` (each
        only when given)."""
        ...

    def reads_env(self, name: str) -> bool:
        """Whether ``name`` is one of the emulator's own variables (dropped from a real launch)."""
        ...

    def allreduce_us(self, profile: str, *, tp: int, env: Mapping[str, str],
                     nbytes: Sequence[int]) -> list[float]:
        """The modelled NCCL all-reduce latency (µs) of each message size, SGLang's custom
        all-reduce off.

        Raises:
            ValueError: The emulator rejects a variable of ``env``; the message names them.
        """
        ...


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
        load_emulator: Returns the :class:`Emulator` of an emulated backend; None for real SGLang.
        preimport: What ``python -m module`` imports before the first statement of its main
            block: what a standby launcher imports ahead (:mod:`autotune.server.standby`).
        main_block: What the main block imports later, before it starts any process: imported ahead
            by a standby too, each module checked where the launcher first asks for it
            (``autotune/server/_prefork/autotune_main_block.py``: what its import read from the
            environment must still hold there, or the launcher re-executes itself as a fresh launch).
        plugin_groups: Entry-point groups of the plugins the main block loads before those imports:
            where one is installed, nothing is imported ahead from the main block.
        late_env: Patterns of the environment variables that only the server's child processes
            (or its main block, not its imports) read, so a standby started with other values may
            still run the server, given the new ones.
        standby_by_default: ``measure.standby`` when a space does not set it: on where the
            launcher's imports are long next to what a standby costs (docs/startup.md).
        prefork: What the server's child processes import first (SGLang's scheduler and
            detokenizer), imported ahead by the standby's fork server with ``measure.prefork``
            (``autotune/server/_prefork/autotune_prefork.py``); empty where the server starts none.
        prefork_scans: The modules among those (and ``main_block``'s) that iterate the environment
            while imported, with the prefixes of the names each keeps; a scan by any other non-stdlib
            module stops forks (and counts as reading the whole environment for ``main_block``).
        prefork_by_default: ``measure.prefork`` when a space does not set it (and has a standby),
            unless the space's configs differ in a variable of ``prefork_import_reads``.
        prefork_import_reads: Variables the ``prefork`` modules read at import that a space's
            configs may set differently (:meth:`autotune.space.SearchSpace.varying_env`), and
            that are not in ``prefork_rebind``: a child is forked only where the fork server read
            the value it would read itself, so in such a space every child is spawned, and the fork
            server is not started by default.
        prefork_rebind: Variables a ``prefork`` module binds at import (a module global, function
            defaults) and nothing else reads then, by name: ``module``, the ``global`` it binds,
            the ``reader`` that parses it (``"module:attr.attr"``, called with no arguments) and a
            ``probe`` value the fork server imports with. A forked child binds its own value in
            every place the probe's object was found (``autotune/server/_prefork/autotune_prefork_rebind.py``).
    """

    name: str
    module: str
    emulated: bool
    needs_gpus: bool
    shares_cores: bool
    load_emulator: Callable[[], Emulator] | None = None
    preimport: tuple[str, ...] = ()
    main_block: tuple[str, ...] = ()
    plugin_groups: tuple[str, ...] = ()
    late_env: tuple[str, ...] = ()
    standby_by_default: bool = False
    prefork: tuple[str, ...] = ()
    prefork_scans: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    prefork_by_default: bool = False
    prefork_import_reads: tuple[str, ...] = ()
    prefork_rebind: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.emulated != (self.load_emulator is not None):
            raise ValueError(f"backend {self.name!r}: an emulated backend, and only one, has an emulator")

    @property
    def emulator(self) -> Emulator:
        """The emulator's hooks.

        Raises:
            ValueError: For a backend that is not emulated.
        """
        if self.load_emulator is None:
            raise ValueError(f"backend {self.name!r} is not an emulator")
        return self.load_emulator()


def _sim() -> Emulator:
    # Imported here, not at the top: only a space on the emulator loads it.
    from autotune.sim.emulator import EMULATOR

    return EMULATOR


BACKENDS: Mapping[str, Backend] = MappingProxyType({
    # SGLang 0.5.17's sglang/launch_server.py imports these at its top and in its main block before
    # it parses its arguments (the 15-20 s "launcher" stage of docs/startup.md). NCCL reads its
    # variables when the scheduler process (a fresh spawn) creates its communicators, and the
    # forced accept length is read by the speculative worker there (sglang.srt.speculative.spec_utils).
    "sglang": Backend("sglang", "sglang.launch_server", emulated=False, needs_gpus=True,
                      shares_cores=False,
                      preimport=("sglang.srt.server_args", "sglang.srt.utils", "sglang.srt.utils.common",
                                 "sglang.srt.plugins"),
                      # Imported by the main block after load_plugins(): the model config while the
                      # arguments are handled (ServerArgs.get_model_config: torch's compiler, 3.7-4.1 s
                      # of a warm launch on an H100), then the HTTP server (1.4 s); nothing else of the
                      # 5.5-6.1 s to the scheduler's start took over 0.5 s (scripts/gpu/launcher_profile.py,
                      # docs/measurements/README.md, 2026-12-06).
                      main_block=("sglang.srt.configs.model_config", "sglang.srt.entrypoints.http_server"),
                      plugin_groups=("sglang.srt.plugins",),
                      late_env=("NCCL_*", "TORCH_NCCL_*", "SGLANG_SIMULATE_ACC_LEN"),
                      # Measured on an H200 search (4 of 4 later servers launched by their standby) and
                      # an H100 A/B (docs/measurements/README.md, 2026-12-05): the launcher stage 3-5 s
                      # instead of 16-23 s, with the same tok/s and KV pool, and 0 CPU s, 0 MiB waiting.
                      standby_by_default=True,
                      # What the spawned scheduler and detokenizer import: their parent's main module
                      # again (as __mp_main__: sglang/launch_server.py's top-level imports), then the
                      # modules of run_scheduler_process and run_detokenizer_process
                      # (sglang.srt.entrypoints.engine starts both with mp.Process). The fork server
                      # answers the device questions these ask at import without CUDA
                      # (autotune_prefork_cuda); on an H100 (docs/measurements/README.md, 2026-12-06) it
                      # held all of them, both children were forked, and the start-up fell from 33 to 18 s
                      # with the same KV pool and tok/s within the verdict's bound.
                      prefork=("sglang.srt.server_args", "sglang.srt.utils", "sglang.srt.utils.common",
                               "sglang.srt.managers.scheduler", "sglang.srt.managers.detokenizer_manager"),
                      # Modules that iterate os.environ on import, and what they keep: sglang.srt.environ
                      # copies SGL_* to SGLANG_* (_convert_SGL_to_SGLANG), tqdm reads TQDM_* (utils.envwrap),
                      # fsspec FSSPEC_* (config.set_conf_env), networkx NETWORKX_* (utils.backends).
                      prefork_scans=MappingProxyType({"sglang.srt.environ": ("SGL_",), "tqdm.utils": ("TQDM_",),
                                                      "fsspec.config": ("FSSPEC_",),
                                                      "networkx.utils.backends": ("NETWORKX_",)}),
                      prefork_by_default=True,
                      # With synthetic acceptance every config sets its own SGLANG_SIMULATE_ACC_LEN (on the
                      # H100 search of 2026-12-06 every child was spawned for it). In 0.5.17 the only
                      # import-time read is spec_utils' `SIMULATE_ACC_LEN = envs...get()`, bound again
                      # only as generate_simulated_accept_index's default (dflash_worker_v2 imports the
                      # name too; eagle_utils imports it inside its verify function, at each call),
                      # and no module-level expression derives from it. The probe is above 0, as every
                      # speculative config's value is: the imports take the same branches.
                      prefork_rebind=MappingProxyType({"SGLANG_SIMULATE_ACC_LEN": MappingProxyType({
                          "module": "sglang.srt.speculative.spec_utils", "global": "SIMULATE_ACC_LEN",
                          "reader": "sglang.srt.environ:envs.SGLANG_SIMULATE_ACC_LEN.get",
                          "probe": "1.0009765625"})})),
    # The emulator reads its own variables in its main block (autotune.sim.server.main). Its launcher
    # imports take about a second, so by default no standby: one would compete with the servers for
    # this machine's cores and seldom be ready in time.
    "sim": Backend("sim", "autotune.sim.server", emulated=True, needs_gpus=False, shares_cores=True,
                   load_emulator=_sim,
                   preimport=("uvicorn", "autotune.sglang.args", "autotune.sim.app", "autotune.sim.engine",
                              "autotune.sim.model", "autotune.sim.profile"),
                   late_env=("AUTOTUNE_SIM_*", "NCCL_*", "TORCH_NCCL_*", "SGLANG_SIMULATE_ACC_LEN")),
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


def is_emulator_env(name: str) -> bool:
    """Whether ``name`` is a variable only an emulated backend reads: a measuring device, never
    part of a launch on real SGLang."""
    return any(b.emulator.reads_env(name) for b in BACKENDS.values() if b.emulated)
