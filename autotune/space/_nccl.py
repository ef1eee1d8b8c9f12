"""``nccl_prescreen`` in a search space: checks, and narrowing the NCCL_* parameters.

The NCCL_* parameters of a space are independent categoricals, so "keep the best K combinations"
cannot be said per parameter. A narrowed space therefore gets one more categorical,
``nccl_candidate``, whose choices are the kept combinations by name (``default``,
``NCCL_ALGO=Ring,NCCL_PROTO=LL``; :mod:`autotune.nccl.candidates` names them). The NCCL_*
parameters stay in the space, but each is derived from the chosen candidate instead of being
asked, so configs, launches and MLflow params still carry the actual NCCL environment. The kept
names live in ``nccl_prescreen.kept``; a search writes them into its narrowed copy of the space.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.nccl.candidates import (
    DEFAULT_NAME,
    env_text,
    name_of,
    parse_name,
)
from autotune.space._schema import Fail, join, show
from autotune.space._schema_params import Parameter
from autotune.space.nccl_candidates import nccl_dims

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

NCCL_BUNDLE = "nccl_candidate"


def check_prescreen(space: SearchSpace, fail: Fail, line: int | None) -> None:
    """Refuse an ``nccl_prescreen`` the search could not carry out.

    Args:
        space: The space being built.
        fail: ``fail(message, field=, line=)`` that raises a located ConfigError.
        line: Line of the ``nccl_prescreen`` key.
    """
    dims = nccl_dims(space)
    if not dims:
        fail("nccl_prescreen narrows the space's NCCL_* parameters, and it has none; add e.g. "
             "NCCL_ALGO: {type: categorical, choices: [null, Ring, Tree]} or remove "
             "nccl_prescreen", field="nccl_prescreen", line=line)
    for p in dims:
        if p.type == "float":
            fail(f"{p.name} is a float range; nccl_prescreen needs categorical or int NCCL_* "
                 "parameters", field=f"parameters.{p.name}", line=p.line)
        if p.when is not None:
            fail(f"{p.name} has a when: condition; nccl_prescreen needs unconditional NCCL_* "
                 "parameters (a candidate is a whole combination)",
                 field=f"parameters.{p.name}.when", line=p.when_line)
    if NCCL_BUNDLE in space.parameters or NCCL_BUNDLE in space.fixed_args:
        fail(f"{NCCL_BUNDLE} is the name nccl_prescreen gives its own parameter",
             field=f"parameters.{NCCL_BUNDLE}", line=line)
    if max(space.tp_sizes()) < 2:
        fail("nccl_prescreen needs tp_size >= 2: with one GPU there is no all-reduce to tune",
             field="nccl_prescreen", line=line)


def apply_kept(space: SearchSpace, kept: tuple[str, ...], fail: Fail,
               lines: Callable[[int], int | None]) -> None:
    """Narrow ``space`` (in place) to the kept candidates.

    Sets ``space.nccl_bundle`` (candidate name -> NCCL_* value, as the parameter's own choice)
    and adds the ``nccl_candidate`` parameter just before the first NCCL_* parameter.

    Args:
        space: The space being built.
        kept: Candidate names.
        fail: ``fail(message, field=, line=)``.
        lines: ``line(index)`` of each kept entry.
    """
    dims = nccl_dims(space)
    names = {p.name: p for p in dims}
    bundle: dict[str, dict[str, Any]] = {}
    for index, text in enumerate(kept):
        fld = join("nccl_prescreen.kept", index)
        try:
            env = parse_name(text)
        except ValueError as exc:
            fail(f"bad candidate name {text!r}: {exc}; names look like 'default' or "
                 "'NCCL_ALGO=Ring,NCCL_PROTO=LL'", field=fld, line=lines(index))
        for key in env:
            if key not in names:
                fail(f"{key} is not an NCCL_* parameter of this space; they are: "
                     + ", ".join(names), field=fld, line=lines(index))
        values: dict[str, Any] = {}
        for p in dims:
            value = _choice(p, env.get(p.name))
            if value is _MISSING:
                wanted = p.describe()
                got = "unset" if env.get(p.name) is None else repr(env[p.name])
                fail(f"{p.name} is {got} in {text!r}, which is not a value of {p.name} "
                     f"({wanted})", field=fld, line=lines(index))
            values[p.name] = value
        # env_text gives None only for None: the walrus keeps the dict's values typed as text.
        full = {k: t for k, v in space.fixed_env.items() if (t := env_text(v)) is not None}
        full.update({k: t for k, v in values.items() if (t := env_text(v)) is not None})
        reason = space.forbidden_reason({}, full)
        if reason is not None:
            fail(f"candidate {text!r} is forbidden: {reason}", field=fld, line=lines(index))
        name = name_of(values)
        if name in bundle:
            fail(f"candidate {text!r} repeats {name!r}", field=fld, line=lines(index))
        bundle[name] = values
    param = Parameter(NCCL_BUNDLE, "categorical", choices=tuple(bundle), line=lines(0))
    ordered: dict[str, Parameter] = {}
    for name, p in space.parameters.items():
        if name == dims[0].name:
            ordered[NCCL_BUNDLE] = param
        ordered[name] = p
    space.parameters = ordered
    space.nccl_bundle = bundle


_MISSING = object()


def _choice(p: Parameter, text: str | None) -> Any:
    """The parameter's own value whose environment text is ``text`` (None for unset)."""
    if text is None:
        if p.type == "categorical" and None in (p.choices or ()):
            return None
        return _MISSING
    if p.type == "categorical":
        return next((c for c in p.choices or () if c is not None and env_text(c) == text),
                    _MISSING)
    try:
        value = int(text)
    except ValueError:
        return _MISSING
    return value if p.contains(value) else _MISSING


def infer_candidate(bundle: Mapping[str, Mapping[str, Any]],
                    given: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(name, None) of the kept candidate whose NCCL values ``given`` has, or (None, why).

    A config written without ``nccl_candidate`` (``--params``, an export) still resolves when
    its NCCL_* values are one of the kept combinations; absent NCCL_* values mean unset.
    """
    dims = list(next(iter(bundle.values())))
    wanted = {d: env_text(given.get(d)) for d in dims}
    for name, values in bundle.items():
        if all(env_text(values[d]) == wanted[d] for d in dims):
            return name, None
    shown = name_of(wanted) if any(v is not None for v in wanted.values()) else DEFAULT_NAME
    return None, (f"NCCL settings {shown} are not among the kept candidates "
                  f"(nccl_prescreen.kept): {', '.join(show(n) for n in bundle)}")
