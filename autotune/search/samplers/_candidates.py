"""Every config of a search space, enumerated once, as arrays the samplers can score at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.errors import AutotuneError
from autotune.space.trial_config import config_key, freeze

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

ALGO = "speculative_algorithm"
STEPS = "speculative_num_steps"
TOPK = "speculative_eagle_topk"
DRAFT = "speculative_num_draft_tokens"
_TRIPLE = (STEPS, TOPK, DRAFT)


@dataclass(frozen=True)
class Dim:
    """One searched parameter as a coordinate: its values in order, and whether order means
    anything (an int or float range) or not (a categorical)."""

    name: str
    values: tuple[Any, ...]
    ordered: bool
    group: bool  # a non-speculative setting: it changes the baseline too
    env: bool = False  # an environment variable (e.g. NCCL_ALGO), not a server argument


class CandidateTable:
    """The enumerated configs of a space, with the settings the performance model reads.

    Attributes:
        configs: Every valid config (derived values included), in enumeration order.
        spec: Whether speculation is on, per config.
        steps, topk, draft: The EAGLE triple as resolved server args (0 when off or unknown).
        physics: Whether the cycle model applies (EAGLE family with a full triple).
        group: Index into ``groups`` of each config's no-speculation group.
        groups: Baseline params of each group.
        dims: The searched parameters as coordinates; ``coords[i, j]`` is config i's value index
            in ``dims[j]`` (-1 when the parameter is not set).
        group_coords: The group dims' coordinates of each group.
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.configs: list[dict[str, Any]] = [dict(c) for c in space.enumerate()]
        if not self.configs:
            raise ValueError("the search space has no valid config")
        self.index: dict[tuple, int] = {}
        n = len(self.configs)
        self.spec = np.zeros(n, dtype=bool)
        self.physics = np.zeros(n, dtype=bool)
        self.steps = np.zeros(n, dtype=int)
        self.topk = np.zeros(n, dtype=int)
        self.draft = np.zeros(n, dtype=int)
        self.group = np.zeros(n, dtype=int)
        self.groups: list[dict[str, Any]] = []
        group_index: dict[tuple, int] = {}
        from autotune.sglang.speculative import EAGLE_FAMILY

        fixed = dict(getattr(space, "fixed_args", {}) or {})
        for i, cfg in enumerate(self.configs):
            # Enumerated configs are resolved already (derived values included): read the
            # speculative settings from them and the fixed args, without building launch args.
            self.index.setdefault(config_key(cfg), i)
            ctx = {**fixed, **cfg}
            algo = ctx.get(ALGO)
            self.spec[i] = algo is not None
            triple = [ctx.get(n_) for n_ in _TRIPLE]
            if self.spec[i] and all(isinstance(v, int) and not isinstance(v, bool) for v in triple):
                self.steps[i], self.topk[i], self.draft[i] = triple
                self.physics[i] = str(algo).upper() in EAGLE_FAMILY
            base = space.baseline_params(cfg)
            gk = config_key(base)
            g = group_index.get(gk)
            if g is None:
                g = group_index[gk] = len(self.groups)
                self.groups.append(base)
            self.group[i] = g
        self.dims: list[Dim] = []
        for name, p in space.parameters.items():
            present = [c for c in self.configs if name in c]
            if not present:
                continue
            seen: list[Any] = []
            for c in present:
                if c[name] not in seen:
                    seen.append(c[name])
            ordered = p.type in ("int", "float")
            if ordered:
                values = sorted(seen)
            else:
                values = [v for v in (p.choices or ()) if v in seen]
                values += [v for v in seen if v not in values]
            if len(values) < 2:
                continue
            self.dims.append(Dim(name=name, values=tuple(values), ordered=ordered,
                                 group=not name.startswith("speculative_"),
                                 env=bool(getattr(p, "is_env", False))))
        self.coords = np.full((n, len(self.dims)), -1, dtype=int)
        for j, d in enumerate(self.dims):
            lookup = {freeze(v): k for k, v in enumerate(d.values)}
            name = d.name
            self.coords[:, j] = [lookup.get(freeze(cfg[name]), -1) if name in cfg else -1
                                 for cfg in self.configs]
        self.group_dims = [j for j, d in enumerate(self.dims) if d.group]
        self.extra_spec_dims = [j for j, d in enumerate(self.dims)
                                if not d.group and d.name not in _TRIPLE]
        self.group_coords = np.full((len(self.groups), len(self.group_dims)), -1, dtype=int)
        for g, base in enumerate(self.groups):
            for col, j in enumerate(self.group_dims):
                d = self.dims[j]
                if d.name in base and base[d.name] in d.values:
                    self.group_coords[g, col] = d.values.index(base[d.name])

    def __len__(self) -> int:
        return len(self.configs)

    def find(self, params: Mapping[str, Any]) -> int | None:
        """Index of a config given its params (derived values may be missing), or None."""
        i = self.index.get(config_key(params))
        if i is not None:
            return i
        try:
            resolved = self.space.trial_config(dict(params)).params
        except (AutotuneError, TypeError, ValueError):  # not a config of this space
            return None
        return self.index.get(config_key(resolved))

    def one_hot(self, coords: np.ndarray, dims: list[int]) -> np.ndarray:
        """One column per (dim, value) of ``dims``, from a coordinate matrix over those dims."""
        cols = []
        for col, j in enumerate(dims):
            for k in range(len(self.dims[j].values)):
                cols.append(coords[:, col] == k)
        if not cols:
            return np.zeros((len(coords), 0))
        return np.stack(cols, axis=1).astype(float)

    def distance(self, i: int) -> np.ndarray:
        """Steps from config ``i`` to every config: an ordered parameter counts its index
        difference, a categorical 1 if it differs; a derived draft-token count is not counted."""
        diff = np.zeros(len(self), dtype=float)
        ci = self.coords[i]
        for j, d in enumerate(self.dims):
            a, b = ci[j], self.coords[:, j]
            if d.name == DRAFT:
                derived = (self.topk == 1) & (self.topk[i] == 1)
                step = np.where(derived, 0, _coord_step(a, b, d.ordered))
            else:
                step = _coord_step(a, b, d.ordered)
            diff += step
        return diff


def _coord_step(a: int, b: np.ndarray, ordered: bool) -> np.ndarray:
    missing = (b < 0) | (a < 0)
    if ordered:
        step = np.abs(b - a).astype(float)
    else:
        step = (b != a).astype(float)
    return np.where(missing, np.where((b < 0) & (a < 0), 0.0, 1.0), step)
