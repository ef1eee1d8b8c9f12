"""Search spaces: the declarative, validated description of what a search may try.

A space file (``search_spaces/*.yaml``, shipped in the package: :mod:`autotune.space.packaged`;
format in ``docs/search-spaces.md``) names the backend, the model, fixed server arguments and
environment, the searched parameters with their conditions, forbidden settings, the workload,
the objective, constraints and budget. Loading it checks everything up front and fails with a
:class:`~autotune.errors.ConfigError` that names the file, line and field.

From a loaded :class:`SearchSpace`:

- :meth:`SearchSpace.suggest` is Optuna's define-by-run: it only asks for parameters whose
  conditions hold, derives values SGLang would force (topk 1 means draft tokens = steps + 1), and
  narrows the draft-token range to ``steps * topk + 1``, so it never proposes an invalid config;
- :meth:`SearchSpace.enumerate` yields every valid config of a gridded space;
- :meth:`SearchSpace.validate_config` re-checks any config (rules and forbidden settings);
- :meth:`SearchSpace.trial_config` turns a config into a
  :class:`~autotune.space.trial_config.TrialConfig` (server args and environment), and
  :meth:`SearchSpace.baseline_params` gives the matching no-speculation config.

The rules of the walk (what each parameter does given the others, the checks of a complete
config) live in :mod:`autotune.space._walk`, whose :class:`SpaceWalk` this class inherits.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune._yaml_lines import load_yaml_text
from autotune.backend import get_backend
from autotune.errors import ConfigError
from autotune.space._build import build_space
from autotune.space._schema import join
from autotune.space._schema_measure import Measure
from autotune.space._schema_names import Forbidden, is_speculation_only
from autotune.space._schema_params import Parameter
from autotune.space._schema_prescreen import NcclPrescreen
from autotune.space._schema_sections import (
    Budget,
    Constraints,
    Objective,
    Resources,
    SearchSettings,
)
from autotune.space._walk import INVALID, SET, SKIP, SpaceWalk
from autotune.space.packaged import resolve_space
from autotune.space.prompts import _Entry
from autotune.space.rules import ALGO
from autotune.space.synthetic import ENV as SYNTHETIC_ENV
from autotune.space.synthetic import SyntheticAcceptance
from autotune.space.trial_config import TrialConfig

__all__ = ["SearchSpace", "load_space"]

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+\Z")


@dataclass(eq=False)
class SearchSpace(SpaceWalk):
    """A loaded, validated search space. Build it with :func:`load_space` or :meth:`from_dict`.

    Attributes:
        name: Space name (the file stem unless given).
        file: Source file, for messages.
        backend: ``sglang`` or ``sim``.
        profile: Sim profile: built-in name or absolute path; None for sglang.
        model_path: Target model (path or hub id).
        draft_model_path: Draft model, or None.
        fixed_args: Server args applied to every trial (underscore names).
        fixed_env: Environment for every trial; None values mean "unset".
        parameters: Searched parameters by name, in file order.
        rules: Built-in rule name -> on/off.
        forbidden: Flags and env values no trial may use.
        workload: The ``workload:`` section as given (relative path made absolute), checked
            by ``autotune.space.workload.Workload.from_spec``, which owns its defaults.
        production_sample: ``workload.production_sample``'s prompts, parsed when the space loaded
            (read once: the search's start and end compare with these, never the file again);
            None when the space declares none.
        measure, objective, constraints, budget, resources, search: Their sections.
        exclusive_node: Whether a trial takes a whole node.
        description: Free text.
        raw: The file's content as plain data.
        nccl_prescreen: The ``nccl_prescreen:`` section, or None.
        synthetic_acceptance: The ``synthetic_acceptance:`` model, or None: every speculative
            config then gets ``SGLANG_SIMULATE_ACC_LEN`` from it (:mod:`autotune.space.synthetic`).
        nccl_bundle: With ``nccl_prescreen.kept``: kept candidate name -> its NCCL_* values;
            the NCCL_* parameters are then derived from the ``nccl_candidate`` parameter.
    """

    name: str
    file: str | None
    backend: str
    profile: str | None
    model_path: str
    draft_model_path: str | None
    fixed_args: dict[str, Any]
    fixed_env: dict[str, Any]
    parameters: dict[str, Parameter]
    rules: dict[str, bool]
    forbidden: Forbidden
    workload: dict[str, Any]
    measure: Measure
    objective: Objective
    constraints: Constraints
    budget: Budget
    resources: Resources
    search: SearchSettings
    exclusive_node: bool = False
    description: str = ""
    nccl_prescreen: NcclPrescreen | None = None
    nccl_bundle: dict[str, dict[str, Any]] | None = field(default=None, repr=False)
    synthetic_acceptance: SyntheticAcceptance | None = None
    production_sample: tuple[_Entry, ...] | None = field(default=None, repr=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    lines: dict[str, int | None] = field(default_factory=dict, repr=False)
    _order: tuple[Parameter, ...] = field(default=(), repr=False)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_dict(cls, data: Any, *, file: str | os.PathLike[str] | None = None,
                  production_sample: bool = True) -> SearchSpace:
        """Build and validate a space from parsed YAML (or any plain dict).

        Args:
            data: The file's content.
            file: Where it came from; relative paths in the space resolve against its folder.
            production_sample: Read ``workload.production_sample`` (False: its path is checked,
                the file is not parsed and ``production_sample`` stays None).

        Raises:
            ConfigError: With file, line, field, what is wrong and what is allowed.
        """
        return build_space(cls, data, None if file is None else str(file), production_sample=production_sample)

    # ------------------------------------------------------------------ public API

    def validate_config(self, params: Mapping[str, Any]) -> str | None:
        """Check a config against conditions, rules and forbidden lists.

        Args:
            params: Parameter values (as :meth:`suggest` returns; derived values may be left
                out). ``{"speculative_algorithm": None, ...}`` is the baseline.

        Returns:
            None when valid, else why not.
        """
        return self._resolve(params)[1]

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Optuna define-by-run: ask ``trial`` for each active parameter.

        Parameters whose ``when`` fails, or speculative ones with speculation off, are not
        asked; values SGLang forces are set without asking; the draft-token range is narrowed
        to ``steps * topk + 1``.

        Args:
            trial: An ``optuna.Trial`` (anything with ``suggest_int/float/categorical``).

        Returns:
            The config, derived values included.
        """
        params: dict[str, Any] = {}
        for p in self._order:
            kind, info = self._step(p, self._context(params))
            if kind == SKIP:
                continue
            if kind == SET:
                params[p.name] = info
            elif kind == INVALID:
                # Loading checked the space, so only a sampled (very large) space gets here.
                raise ConfigError(f"the space produced an invalid configuration {params}: {info}",
                                  file=self.file, line=p.line, field=join("parameters", p.name))
            elif p.type == "categorical":
                params[p.name] = trial.suggest_categorical(p.name, list(p.choices or ()))
            elif p.type == "int":
                low, high = info if info is not None else tuple(int(b) for b in p.bounds())
                params[p.name] = trial.suggest_int(p.name, low, high, step=int(p.step or 1),
                                                   log=p.log)
            else:
                f_low, f_high = p.bounds()
                params[p.name] = trial.suggest_float(p.name, float(f_low), float(f_high),
                                                     step=p.step, log=p.log)
        return self._finish(params)

    def enumerate(self) -> Iterator[dict[str, Any]]:
        """Every valid config, depth-first in parameter order.

        Raises:
            ConfigError: When a float parameter has no step (no grid).
        """
        for p in self.parameters.values():
            if p.type == "float" and p.step is None:
                raise ConfigError("a float parameter needs a step to be enumerated",
                                  file=self.file, line=p.line,
                                  field=join("parameters", p.name) + ".step")
        for config, reason in self._walk(0, {}, None):
            if reason is None:
                yield config

    def count(self) -> int:
        """Number of valid configs (enumerates them)."""
        return sum(1 for _ in self.enumerate())

    def is_speculative(self, params: Mapping[str, Any]) -> bool:
        """Whether speculation is on in this config."""
        return self._context(params).get(ALGO) is not None

    def baseline_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The same non-speculative settings with speculation off."""
        out = {k: v for k, v in params.items() if not is_speculation_only(k)}
        out[ALGO] = None
        return out

    def trial_config(self, params: Mapping[str, Any]) -> TrialConfig:
        """Resolve a config into launchable server args and environment.

        Raises:
            ConfigError: When the config is invalid (the reason is the message).
        """
        resolved, reason = self._resolve(params)
        if reason is not None:
            raise ConfigError(f"invalid configuration: {reason}", file=self.file,
                              field="parameters")
        args, env, unset = self._build(resolved)
        speculative = self.is_speculative(resolved)
        return TrialConfig(
            params=resolved, server_args=args, env=env, unset_env=tuple(unset),
            tp_size=int(args["tp_size"]), backend=self.backend, profile=self.profile,
            model_path=self.model_path,
            draft_model_path=self.draft_model_path if speculative else None,
            is_baseline=not speculative)

    def varying_env(self) -> frozenset[str]:
        """The environment variables whose value may differ from one of this space's configs to
        another: its environment parameters, and the forced accept length where synthetic
        acceptance sets one per config."""
        names = {name for name, p in self.parameters.items() if p.is_env}
        if self.synthetic_acceptance is not None:
            names.add(SYNTHETIC_ENV)
        return frozenset(names)

    def tp_sizes(self) -> tuple[int, ...]:
        """Every tp_size a trial of this space may use (sorted)."""
        p = self.parameters.get("tp_size")
        if p is None:
            return (int(self.fixed_args.get("tp_size") or 1),)
        return tuple(sorted({int(v) if v is not None else 1 for v in p.values()}))

    def check_paths(self) -> None:
        """Check that the files a run needs exist; call it before starting any server.

        The sglang backend needs local model and draft weights (hub ids like ``org/name``
        pass). The emulator needs none; workload files are checked when the space loads.

        Raises:
            ConfigError: Naming the missing path, its field and line.
        """
        if not get_backend(self.backend).emulated:  # the emulator reads no model files
            checks = [("model_path", self.model_path)]
            if self.draft_model_path and self._can_speculate():
                checks.append(("draft_model_path", self.draft_model_path))
            for key, path in checks:
                looks_local = (path.startswith(("/", "./", "../", "~")) or "CHANGE-ME" in path
                               or not _HUB_ID.match(path))
                if looks_local and not Path(path).expanduser().exists():
                    raise ConfigError(
                        f"{key} {path} does not exist; point it at the model weights on this "
                        "machine (or use backend: sim for a dry run)", file=self.file,
                        line=self.lines.get(key), field=key)

    def _can_speculate(self) -> bool:
        p = self.parameters.get(ALGO)
        if p is not None:
            return any(c is not None for c in p.choices or ())
        return self.fixed_args.get(ALGO) is not None

    def coerce_params(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Turn command-line strings (``"3"``, ``"null"``, ``"true"``) into typed values.

        Strings are read as YAML scalars, except for parameters whose choices are strings
        (``"1"`` stays a string for an env var with string choices).
        """
        out: dict[str, Any] = {}
        for name, value in raw.items():
            p = self.parameters.get(name)
            if isinstance(value, str) and not (p is not None and p.type == "categorical"
                                               and value in (p.choices or ())):
                try:
                    value = load_yaml_text(value)
                except ConfigError:
                    pass
            out[name] = value
        return out


def load_space(path: str | os.PathLike[str], *, production_sample: bool = True) -> SearchSpace:
    """Load and validate a search-space YAML file.

    Args:
        path: The file, or the name of a packaged space (``demo``: :mod:`autotune.space.packaged`).
        production_sample: Parse ``workload.production_sample``; a trial process, which never
            compares with it, passes False (the driver parsed it once).

    Returns:
        The space.

    Raises:
        ConfigError: When the file cannot be read, is not valid YAML, or is not a valid space;
            the error names the file, line and field.
    """
    path = resolve_space(path)
    name = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the search space: {exc.strerror or exc}",
                          file=name) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                          file=name) from None
    return SearchSpace.from_dict(load_yaml_text(text, file=name), file=name, production_sample=production_sample)
