"""The ``nccl_prescreen:`` section of a search-space file: narrow the NCCL_* parameters with the
NCCL probe before a search (:mod:`autotune.search.prescreen` runs it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune._yaml_lines import line_of
from autotune.space._schema import Reader, join, type_name


@dataclass(frozen=True)
class NcclPrescreen:
    """``nccl_prescreen:``: narrow the NCCL_* parameters with the NCCL probe before a search.

    Attributes:
        keep: How many candidate combinations of the NCCL_* parameters the search keeps.
        tokens: Message sizes of the probe, in tokens (``tokens x hidden`` bf16).
        hidden: Hidden size; None takes the sim profile's or the model's config.json.
        iters, warmup: Timed and untimed all-reduces per size.
        rounds: Passes over all candidates; with 2 or more, a best candidate that is not ahead
            of the default in every round does not push the default out of the kept set.
        backend: Probe backend: ``auto`` (sim for the emulator, nccl otherwise), ``nccl``,
            ``gloo`` or ``sim``.
        timeout_s: Per candidate.
        kept: The kept candidate names; when given, the space is narrowed to them at load and
            the search does not probe (the search writes it into its narrowed copy).
    """

    keep: int
    tokens: tuple[int, ...] = (1, 4, 8, 64)
    hidden: int | None = None
    iters: int = 200
    warmup: int = 20
    backend: str = "auto"
    timeout_s: float = 60.0
    kept: tuple[str, ...] | None = None
    rounds: int = 1


NCCL_PRESCREEN_BACKENDS = ("auto", "nccl", "gloo", "sim")


def read_nccl_prescreen(reader: Reader, value: Any, line: int | None) -> NcclPrescreen | None:
    """Parse ``nccl_prescreen: {keep, tokens, hidden, iters, warmup, rounds, backend, timeout_s, kept}``."""
    if value is None:
        return None
    fld = "nccl_prescreen"
    reader.mapping(value, fld, line, allowed=("keep", "tokens", "hidden", "iters", "warmup",
                                              "rounds", "backend", "timeout_s", "kept"),
                   required=("keep",))
    tokens = value.get("tokens", [1, 4, 8, 64])
    if not isinstance(tokens, list) or not tokens:
        reader.fail(f"must be a non-empty list of token counts, got {type_name(tokens)}",
                    field=f"{fld}.tokens", line=line_of(value, "tokens"))
    for index, item in enumerate(tokens):
        reader.integer(item, join(f"{fld}.tokens", index), line_of(tokens, index), minimum=1)
    kept = value.get("kept")
    if kept is not None:
        if not isinstance(kept, list) or not kept:
            reader.fail(f"must be a non-empty list of candidate names, got {type_name(kept)}",
                        field=f"{fld}.kept", line=line_of(value, "kept"))
        for index, item in enumerate(kept):
            reader.string(item, join(f"{fld}.kept", index), line_of(kept, index))
        kept = tuple(kept)
    return NcclPrescreen(
        keep=reader.integer(value["keep"], f"{fld}.keep", line_of(value, "keep"), minimum=1),
        tokens=tuple(tokens),
        hidden=reader.integer(value.get("hidden"), f"{fld}.hidden", line_of(value, "hidden"),
                              minimum=1, allow_none=True),
        iters=reader.integer(value.get("iters", 200), f"{fld}.iters", line_of(value, "iters"),
                             minimum=1),
        warmup=reader.integer(value.get("warmup", 20), f"{fld}.warmup", line_of(value, "warmup"),
                              minimum=0),
        backend=reader.string(value.get("backend", "auto"), f"{fld}.backend",
                              line_of(value, "backend"), choices=NCCL_PRESCREEN_BACKENDS),
        timeout_s=reader.number(value.get("timeout_s", 60), f"{fld}.timeout_s",
                                line_of(value, "timeout_s"), positive=True),
        kept=kept,
        rounds=reader.integer(value.get("rounds", 1), f"{fld}.rounds", line_of(value, "rounds"),
                              minimum=1))
