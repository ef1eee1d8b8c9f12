"""The emulator as the ``sim`` backend: what :class:`autotune.backend.Emulator` asks of it.

The backend registry imports :data:`EMULATOR` (lazily); the rest of autotune reaches the emulator
only through the registry, so the emulator's variables, profiles and all-reduce model are named
here and in the modules that read them, nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.sim import profile as _profile
from autotune.sim.config import ModelConfig
from autotune.sim.model import PerformanceModel

ENV_PREFIX = "AUTOTUNE_SIM_"
"""Every variable the emulator reads starts with this (``autotune.sim.server`` lists them)."""
PROFILE_ENV = ENV_PREFIX + "PROFILE"
SEED_ENV = ENV_PREFIX + "SEED"


class SimEmulator:
    """The emulator's side of the backend interface; stateless."""

    def builtin_profiles(self) -> list[str]:
        """The names of the profiles under ``autotune/sim/profiles``."""
        return _profile.builtin_profiles()

    def load_profile(self, name_or_path: str | Path) -> _profile.Profile:
        """A profile by built-in name or YAML path (``autotune.sim.profile.load_profile``)."""
        return _profile.load_profile(name_or_path)

    def launch_env(self, *, profile: str | None = None, seed: int | None = None) -> dict[str, str]:
        """``AUTOTUNE_SIM_PROFILE`` and ``AUTOTUNE_SIM_SEED``, each only when given."""
        env = {}
        if profile is not None:
            env[PROFILE_ENV] = str(profile)
        if seed is not None:
            env[SEED_ENV] = str(seed)
        return env

    def reads_env(self, name: str) -> bool:
        """Whether ``name`` is an ``AUTOTUNE_SIM_*`` variable."""
        return name.startswith(ENV_PREFIX)

    def allreduce_us(self, profile: str, *, tp: int, env: Mapping[str, str],
                     nbytes: Sequence[int]) -> list[float]:
        """The performance model's NCCL term at each message size, custom all-reduce off.

        Raises:
            ValueError: ``env`` holds a value the emulator rejects (as NCCL would at start-up).
        """
        config = ModelConfig.from_server_args({"tp_size": tp, "disable_custom_all_reduce": True}, env)
        if config.invalid_env:
            raise ValueError("the emulator rejects " + ", ".join(config.invalid_env))
        model = PerformanceModel(_profile.load_profile(profile), config)
        # The model's per-call NCCL term; private, as the emulator has no other per-call API.
        return [model._allreduce_us(n) for n in nbytes]


EMULATOR = SimEmulator()
