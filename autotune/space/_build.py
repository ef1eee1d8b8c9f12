"""Building a :class:`~autotune.space.search_space.SearchSpace` from parsed YAML.

The builder reads the top-level keys and each section (backend and profile, model paths, fixed
args and env, parameters, rules and the sections :mod:`autotune.space._schema_sections` reads),
makes the space, then runs the checks that span sections, puts the parameters in dependency order
and proves that the space only yields valid configs; those last steps are its
:class:`~autotune.space._cross_checks.CrossChecks` base.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from autotune._yaml_lines import key_line_of, line_of
from autotune.backend import BACKENDS, get_backend
from autotune.errors import ConfigError
from autotune.names import is_env_name
from autotune.space import synthetic
from autotune.space._cross_checks import CrossChecks
from autotune.space._schema import Reader, closest, is_int, items, show, type_name
from autotune.space._schema_measure import read_measure
from autotune.space._schema_names import check_arg_value, check_name, read_forbidden
from autotune.space._schema_params import Parameter, read_parameter
from autotune.space._schema_prescreen import read_nccl_prescreen
from autotune.space._schema_sections import (
    read_budget,
    read_constraints,
    read_objective,
    read_resources,
    read_search,
    read_workload,
)
from autotune.space.rules import ALGO, RESERVED, RULES, SPEC_ALGORITHMS, TRIPLE

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

_TOP_KEYS = ("name", "description", "backend", "profile", "model_path", "draft_model_path",
             "fixed_args", "fixed_env", "parameters", "rules", "forbidden", "workload",
             "measure", "objective", "constraints", "budget", "resources", "search",
             "exclusive_node", "nccl_prescreen", "synthetic_acceptance")


def plain(value: Any) -> Any:
    """Drop the line-tracking containers (for pickling and storing)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def default_sampler(space: SearchSpace) -> tuple[str, str]:
    """The sampler of a space whose file names none, and why: the one place that decides it.

    The phase-model sampler needs 3-6x fewer trials than TPE (``docs/samplers.md``), so it is the
    default wherever it applies: a space it can enumerate (no float parameter without a step) whose
    objective is output tok/s (the quantity it models). Elsewhere TPE.
    """
    if space.objective.metric != "output_tok_s":
        return "tpe", f"default: the objective {space.objective.metric} is not the phase model's output_tok_s"
    free = [p.name for p in space.parameters.values() if p.type == "float" and p.step is None]
    if free:
        return "tpe", f"default: {free[0]} is a float without a step, so the space cannot be enumerated"
    return "phase-model", "default: the space can be enumerated"


def build_space(cls: type, data: Any, file: str | None, *, production_sample: bool = True) -> Any:
    """Validate ``data`` and return ``cls(...)`` (a SearchSpace), its production sample parsed
    unless ``production_sample`` is False.

    Raises:
        ConfigError: With file, line, field, what is wrong and what is allowed.
    """
    return _Builder(cls, data, file, production_sample=production_sample).build()


#: Server args that take an integer >= 1 (a null choice of a parameter: SGLang's own value). Unset,
#: ``max_running_requests`` is SGLang's own cap: 48 with speculation, else sized from KV memory.
_POSITIVE_INTS = ("tp_size", "max_running_requests")

class _Builder(CrossChecks):
    """Reads a whole file and runs the cross-section checks."""

    def __init__(self, cls: type, data: Any, file: str | None, *, production_sample: bool = True) -> None:
        self.production_sample = production_sample
        self.cls = cls
        self.data = data
        self.file = file
        self.reader = Reader(file)
        self.base = Path(file).resolve().parent if file else Path.cwd()

    def fail(self, message: str, *, field: str | None, line: int | None) -> NoReturn:
        self.reader.fail(message, field=field, line=line)

    def resolve(self, path: str) -> str:
        expanded = Path(path).expanduser()
        return str(expanded if expanded.is_absolute() else (self.base / expanded).resolve())

    def build(self) -> Any:
        data = self.data
        if data is None:
            self.fail("the file is empty; a search space needs at least model_path and "
                      "parameters", field=None, line=None)
        r = self.reader
        r.mapping(data, "", 1 if hasattr(data, "key_lines") else None, allowed=_TOP_KEYS)
        # Section-level errors point at the section's key, not at its first entry.
        lines = {key: key_line_of(data, key) for key in data}

        backend = r.string(data.get("backend", "sglang"), "backend", lines.get("backend"),
                           choices=tuple(BACKENDS))
        profile = self._profile(backend, data.get("profile"), lines.get("profile"))
        if "model_path" not in data:
            self.fail("missing required key 'model_path' (the target model)",
                      field="model_path", line=None)
        model_path = self._model_path(r.string(data["model_path"], "model_path",
                                               lines.get("model_path")))
        draft = r.string(data.get("draft_model_path"), "draft_model_path",
                         lines.get("draft_model_path"), allow_none=True)
        draft = None if draft is None else self._model_path(draft)

        fixed_args = self._fixed_args(data.get("fixed_args"), lines.get("fixed_args"))
        fixed_env = self._fixed_env(data.get("fixed_env"), lines.get("fixed_env"))
        parameters = self._parameters(data.get("parameters"), lines.get("parameters"),
                                      fixed_args)
        rules = self._rules(data.get("rules"), lines.get("rules"))
        forbidden = read_forbidden(r, data.get("forbidden"), lines.get("forbidden"))
        workload, production_sample = read_workload(r, data.get("workload"), lines.get("workload"),
                                                    base_dir=str(self.base), model_path=model_path,
                                                    read_sample=self.production_sample)
        name = data.get("name", Path(self.file).stem if self.file else "space")
        description = data.get("description", "")
        r.string(name, "name", lines.get("name"))
        if not isinstance(description, str):
            self.fail(f"must be a string, got {type_name(description)}", field="description",
                      line=lines.get("description"))

        space = self.cls(
            name=name, file=self.file, backend=backend, profile=profile,
            model_path=model_path, draft_model_path=draft, fixed_args=fixed_args,
            fixed_env=fixed_env, parameters=parameters, rules=rules, forbidden=forbidden,
            workload=workload, production_sample=production_sample,
            measure=read_measure(r, data.get("measure"), lines.get("measure")),
            objective=read_objective(r, data.get("objective"), lines.get("objective")),
            constraints=read_constraints(r, data.get("constraints"), lines.get("constraints")),
            budget=read_budget(r, data.get("budget"), lines.get("budget")),
            resources=read_resources(r, data.get("resources"), lines.get("resources")),
            search=read_search(r, data.get("search"), lines.get("search")),
            exclusive_node=r.boolean(data.get("exclusive_node", False), "exclusive_node",
                                     lines.get("exclusive_node")),
            description=description, raw=plain(data), lines=lines,
            nccl_prescreen=read_nccl_prescreen(r, data.get("nccl_prescreen"),
                                               lines.get("nccl_prescreen")),
            synthetic_acceptance=self._synthetic(data, lines))
        self._nccl_prescreen(space, data, lines.get("nccl_prescreen"))
        self._check_forbidden_static(space, data)
        self._check_conditions(space)
        self._check_speculation(space, data, lines)
        self._check_fast_start(space, data)
        self._check_synthetic(space, lines.get("synthetic_acceptance"))
        search = data.get("search")
        if not (isinstance(search, Mapping) and search.get("sampler") is not None):
            sampler, why = default_sampler(space)
            space.search = replace(space.search, sampler=sampler, sampler_why=why)
        self._check_sampler_objective(space, data, lines)
        self._check_scheduler(space, data, lines)
        space._order = self._order(space)
        self._verify(space, lines.get("parameters"))
        return space

    # -- sections

    def _profile(self, backend: str, value: Any, line: int | None) -> str | None:
        if not get_backend(backend).emulated:
            if value is not None:
                self.fail("profile is only for backend: sim", field="profile", line=line)
            return None
        emulator = get_backend(backend).emulator
        builtins = emulator.builtin_profiles()
        if value is None:
            self.fail("backend sim needs a profile: a built-in name (" + ", ".join(builtins)
                      + ") or a path to a profile YAML", field="profile", line=line)
        name = self.reader.string(value, "profile", line)
        if "/" in name or name.endswith((".yaml", ".yml")):
            path = self.resolve(name)
            if not Path(path).is_file():
                self.fail(f"profile file {path} does not exist", field="profile", line=line)
            try:
                emulator.load_profile(path)  # a bad profile fails now, not in the first trial
            except ConfigError as exc:
                self.fail(f"invalid profile: {exc}", field="profile", line=line)
            except (ValueError, TypeError) as exc:
                self.fail(f"invalid profile {path}: {exc}", field="profile", line=line)
            return path
        if name not in builtins:
            self.fail(f"unknown built-in profile {name!r}{closest(name, builtins)}; allowed: "
                      + ", ".join(builtins) + ", or a path to a profile YAML",
                      field="profile", line=line)
        return name

    def _model_path(self, value: str) -> str:
        if value.startswith(("./", "../", "~")):
            return self.resolve(value)
        return value

    def _fixed_args(self, value: Any, line: int | None) -> dict[str, Any]:
        if value is None:
            return {}
        self.reader.mapping(value, "fixed_args", line)
        out: dict[str, Any] = {}
        for name, item, fld, iline in items(value, "fixed_args"):
            check_name(self.reader, name, fld, key_line_of(value, name))
            if is_env_name(name):
                self.fail(f"{name} is an environment variable; put it under fixed_env",
                          field=fld, line=key_line_of(value, name))
            if name in RESERVED:
                self.fail(f"{name} cannot be a fixed arg: {RESERVED[name]}", field=fld,
                          line=key_line_of(value, name))
            check_arg_value(self.reader, name, item, fld, iline)
            out[name] = plain(item)
        for name in TRIPLE + _POSITIVE_INTS:
            item = out.get(name)
            if item is not None and item < 1:
                self.fail(f"must be >= 1, got {item}", field=f"fixed_args.{name}",
                          line=line_of(value, name))
        if ALGO in out:
            self._check_algorithm(out[ALGO], f"fixed_args.{ALGO}", line_of(value, ALGO))
        return out

    def _fixed_env(self, value: Any, line: int | None) -> dict[str, Any]:
        if value is None:
            return {}
        self.reader.mapping(value, "fixed_env", line)
        out: dict[str, Any] = {}
        for name, item, fld, iline in items(value, "fixed_env"):
            if not is_env_name(name):
                self.fail(f"environment variable names are UPPER_CASE, got {name!r}; server "
                          "arguments go under fixed_args", field=fld,
                          line=key_line_of(value, name))
            check_arg_value(self.reader, name, item, fld, iline)
            out[name] = item
        return out

    def _parameters(self, value: Any, line: int | None,
                    fixed_args: Mapping[str, Any]) -> dict[str, Parameter]:
        if value is None:
            return {}
        self.reader.mapping(value, "parameters", line)
        out: dict[str, Parameter] = {}
        for name, spec, fld, _pline in items(value, "parameters"):
            kline = key_line_of(value, name)
            if isinstance(name, str) and name in RESERVED:
                self.fail(f"{name} cannot be searched: {RESERVED[name]}", field=fld,
                          line=kline)
            param = read_parameter(self.reader, name, spec, fld, kline)
            if name in fixed_args:
                self.fail(f"{name} is both a parameter and in fixed_args; keep one",
                          field=fld, line=kline)
            self._check_param_values(param, spec, fld)
            out[name] = param
        return out

    def _check_param_values(self, p: Parameter, spec: Mapping[str, Any], fld: str) -> None:
        if p.name in TRIPLE or p.name in _POSITIVE_INTS:
            if p.type == "float":
                self.fail(f"{p.name} takes integers; use type: int", field=f"{fld}.type",
                          line=line_of(spec, "type"))
            if p.type == "int" and p.bounds()[0] < 1:
                self.fail(f"must be >= 1, got {p.low}", field=f"{fld}.low",
                          line=line_of(spec, "low"))
            for index, choice in enumerate(p.choices or ()):
                bad = (not is_int(choice) or choice < 1) if p.name in TRIPLE else \
                    (choice is not None and (not is_int(choice) or choice < 1))
                if bad:
                    wanted = "an integer >= 1" + ("" if p.name in TRIPLE else " or null")
                    why = (f"; SGLang needs {', '.join(TRIPLE)} all set or all unset"
                           if choice is None else "")
                    self.fail(f"each choice must be {wanted}, got {show(choice)}{why}",
                              field=f"{fld}.choices[{index}]",
                              line=line_of(spec["choices"], index))
        if p.name == ALGO:
            for index, choice in enumerate(p.choices or ()):
                if choice is not None:
                    self._check_algorithm(choice, f"{fld}.choices[{index}]",
                                          line_of(spec["choices"], index))

    def _check_algorithm(self, value: Any, fld: str, line: int | None) -> None:
        if value not in SPEC_ALGORITHMS:
            self.fail(f"unknown speculative algorithm {show(value)}"
                      f"{closest(str(value).upper(), SPEC_ALGORITHMS)}; allowed: "
                      + ", ".join(SPEC_ALGORITHMS) + " (or null for off, in choices)",
                      field=fld, line=line)

    def _rules(self, value: Any, line: int | None) -> dict[str, bool]:
        rules = {name: True for name in RULES}
        if value is None:
            return rules
        self.reader.mapping(value, "rules", line, allowed=RULES)
        for name, item, fld, iline in items(value, "rules"):
            rules[name] = self.reader.boolean(item, fld, iline)
        return rules

    def _synthetic(self, data: Mapping[str, Any],
                   lines: Mapping[str, int | None]) -> synthetic.SyntheticAcceptance | None:
        if data.get("synthetic_acceptance") is None:
            return None
        value = data["synthetic_acceptance"]
        line = lines.get("synthetic_acceptance")
        if isinstance(value, Mapping) and "rates" in value:
            line = line_of(value, "rates") or line
        try:
            return synthetic.model_from_section(value)
        except ValueError as exc:
            self.fail(f"{exc}; e.g. synthetic_acceptance: {{rates: [0.8, 0.7, 0.6]}}",
                      field="synthetic_acceptance", line=line)
