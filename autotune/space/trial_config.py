"""What one trial launches: :class:`TrialConfig`, and the hashable identity of a config.

:meth:`autotune.space.search_space.SearchSpace.trial_config` builds a :class:`TrialConfig`; the
trial, the search and the exporters only read it. :func:`config_key` and :func:`freeze` sit here
with it because samplers, warm starts and landscapes key configs by them without needing a space.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from autotune.space._schema import show
from autotune.space._schema_names import is_speculation_only


def freeze(value: Any) -> Any:
    """A hashable copy of a parameter value (lists and mappings become sorted tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


def config_key(params: Mapping[str, Any]) -> tuple:
    """Hashable identity of a config; a parameter set to None counts as unset."""
    return tuple(sorted((k, freeze(v)) for k, v in params.items() if v is not None))


@dataclass(frozen=True)
class TrialConfig:
    """Everything needed to launch one trial's server.

    Attributes:
        params: The searched values (derived ones included), keyed by parameter name.
        server_args: Full server arguments in ServerArgs underscore names: ``model_path``,
            fixed args, searched args, ``speculative_draft_model_path`` and ``tp_size``. With
            speculation off there is no ``speculative_*`` key at all.
        env: Environment variables to set (fixed_env plus searched env vars).
        unset_env: Environment variables that must be absent (a ``null`` choice or value).
        tp_size: GPUs the trial needs.
        backend: ``sglang`` or ``sim``.
        profile: Sim profile (a built-in name or an absolute path), None for sglang.
        model_path: Target model.
        draft_model_path: Draft model, None when speculation is off.
        is_baseline: True when speculation is off.
    """

    params: Mapping[str, Any]
    server_args: Mapping[str, Any]
    env: Mapping[str, str]
    unset_env: tuple[str, ...]
    tp_size: int
    backend: str
    profile: str | None
    model_path: str
    draft_model_path: str | None
    is_baseline: bool

    @property
    def is_speculative(self) -> bool:
        """True when speculation is on."""
        return not self.is_baseline

    def group_key(self) -> tuple:
        """Hashable key of everything but the speculative settings.

        Two configs with the same key share one no-speculation baseline.
        """
        args = tuple(sorted((k, freeze(v)) for k, v in self.server_args.items()
                            if not is_speculation_only(k)))
        env = tuple(sorted((k, v) for k, v in self.env.items() if not is_speculation_only(k)))
        return (self.backend, self.profile, args, env,
                tuple(sorted(self.unset_env)))

    def describe(self) -> str:
        """Short ``name=value`` text of the searched values, for run names and logs."""
        if not self.params:
            return "baseline" if self.is_baseline else "fixed"
        return " ".join(f"{k}={show(v)}" for k, v in self.params.items())

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly copy."""
        out = asdict(self)
        out["unset_env"] = list(self.unset_env)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialConfig:
        """Inverse of :meth:`to_dict`."""
        values = dict(data)
        values["unset_env"] = tuple(values.get("unset_env", ()))
        return cls(**values)
