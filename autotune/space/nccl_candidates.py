"""A space's NCCL probe candidates: its NCCL_* parameters, their allowed combinations, its hidden size.

These read a :class:`~autotune.space.search_space.SearchSpace`, so they live in ``space/``, above
``nccl/`` (which names and runs candidates and knows nothing of spaces); the search's pre-screen,
the probe command and the ``nccl_prescreen`` section (``space._nccl``) use them.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.backend import get_backend
from autotune.errors import ConfigError
from autotune.nccl.candidates import NcclCandidate, env_text, name_of

if TYPE_CHECKING:
    from autotune.space._schema_params import Parameter
    from autotune.space.search_space import SearchSpace


def nccl_dims(space: SearchSpace) -> list[Parameter]:
    """The space's searched NCCL_* parameters (categorical or int), in file order."""
    return [p for p in space.parameters.values() if p.name.startswith("NCCL_")]


def candidates_from_space(space: SearchSpace) -> list[NcclCandidate]:
    """Every combination of the space's NCCL_* parameters that its ``forbidden`` allows.

    The space's ``fixed_env`` NCCL_* settings are the base of every candidate. A ``null`` choice
    means unset.

    Raises:
        ConfigError: When the space searches no NCCL_* parameter, or one has no finite grid.
    """
    dims = nccl_dims(space)
    if not dims:
        raise ConfigError("the space searches no NCCL_* parameter: nothing to probe",
                          file=space.file, field="parameters")
    grids = []
    for p in dims:
        if p.type == "float":
            raise ConfigError(f"{p.name} is a float range; the NCCL probe needs categorical or "
                              "int parameters", file=space.file, line=p.line,
                              field=f"parameters.{p.name}")
        grids.append(list(p.values()))
    base = {k: env_text(v) for k, v in space.fixed_env.items() if k.startswith("NCCL_")}
    out = []
    for combo in itertools.product(*grids):
        env = {p.name: env_text(v) for p, v in zip(dims, combo, strict=True)}
        full = {**base, **env}
        if space.forbidden_reason({}, {k: v for k, v in full.items() if v is not None}):
            continue
        out.append(NcclCandidate(name_of(env), env, base_env=base))
    if not out:
        raise ConfigError("every NCCL_* combination of the space is forbidden",
                          file=space.file, field="parameters")
    return out


def hidden_of_space(space: SearchSpace) -> int:
    """The model's hidden size: ``nccl_prescreen.hidden``, the sim profile's, or config.json's.

    Raises:
        ConfigError: When none of them is available.
    """
    settings = getattr(space, "nccl_prescreen", None)
    if settings is not None and settings.hidden is not None:
        return int(settings.hidden)
    backend = get_backend(space.backend)
    if backend.emulated and space.profile:
        return int(backend.emulator.load_profile(space.profile).hidden_size)
    config = Path(space.model_path).expanduser() / "config.json"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    text_config = data.get("text_config")
    for source in (data, text_config if isinstance(text_config, dict) else {}):
        if isinstance(source.get("hidden_size"), int):
            return int(source["hidden_size"])
    raise ConfigError(f"cannot tell the model's hidden size: {config} has no hidden_size; set "
                      "nccl_prescreen.hidden in the space (or pass --hidden)", file=space.file,
                      field="nccl_prescreen.hidden")
