"""The values NCCL documents for the environment variables a space can set, checked at load.

NCCL reads its variables when a communicator starts and, for most of them, ignores a value it does
not understand (a warning in a log nobody reads, then its default). A misspelt ``NCCL_ALGO: Rnig``
would therefore run every trial of a search with NCCL's own choice while the results say "Rnig".
:func:`value_problem` is the one check: the space loader and the NCCL candidates file call it, and
the emulator reads the algorithm and protocol names from here.

The table holds what NCCL's environment-variable documentation lists (NCCL 2.2x); a variable it
does not list is not checked.
"""

from __future__ import annotations

import difflib
from typing import Sequence

__all__ = ["ALGORITHMS", "PROTOCOLS", "value_problem"]

#: ``NCCL_ALGO`` names (matched without regard to case).
ALGORITHMS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
#: ``NCCL_PROTO`` names (matched without regard to case).
PROTOCOLS = ("LL", "LL128", "Simple")
#: Topology levels of ``NCCL_P2P_LEVEL`` and ``NCCL_NET_GDR_LEVEL``.
_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")

_LISTS = {"NCCL_ALGO": ALGORITHMS, "NCCL_PROTO": PROTOCOLS}
_CHOICES: dict[str, tuple[str, ...]] = {
    "NCCL_P2P_LEVEL": _LEVELS,
    "NCCL_NET_GDR_LEVEL": _LEVELS,
    "NCCL_DEBUG": ("VERSION", "WARN", "INFO", "TRACE"),
    "NCCL_NTHREADS": ("64", "128", "256", "512"),
    "NCCL_CROSS_NIC": ("0", "1", "2"),
}
_FLAGS = ("NCCL_NVLS_ENABLE", "NCCL_CUMEM_ENABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
          "NCCL_IB_DISABLE", "NCCL_COLLNET_ENABLE", "NCCL_NET_GDR_READ", "NCCL_CUMEM_HOST_ENABLE")
_POSITIVE = ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
             "NCCL_BUFFSIZE", "NCCL_NCHANNELS_PER_NET_PEER")


def _hint(word: str, options: Sequence[str]) -> str:
    lowered = {o.lower(): o for o in options}
    match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[match[0]]!r}?)" if match else ""


def _list_problem(name: str, text: str, allowed: Sequence[str]) -> str | None:
    """``[^]a[,b...]``, or per collective ``allreduce:a,b;broadcast:c`` (NCCL 2.24 and later)."""
    known = {a.lower() for a in allowed}
    for section in text.split(";"):
        items = section.split(":", 1)[-1].strip()
        for item in items.lstrip("^").split(","):
            word = item.strip()
            if word.lower() not in known:
                return (f"{word or '(empty)'!r} is not a value {name} takes{_hint(word, allowed)}; "
                        f"allowed: {', '.join(allowed)}, as a comma list, '^' first to exclude them")
    return None


def value_problem(name: str, value: object) -> str | None:
    """What is wrong with ``value`` for the NCCL variable ``name``, or None (also for a variable
    this table does not list, and for None, which means unset)."""
    if value is None:
        return None
    text = str(value).strip()
    if name in _LISTS:
        return _list_problem(name, text, _LISTS[name])
    if name in _CHOICES:
        options = _CHOICES[name]
        if text.upper() in options or (name.endswith("_LEVEL") and text.isdigit()):
            return None
        return f"{text!r} is not a value {name} takes{_hint(text, options)}; allowed: {', '.join(options)}"
    if name in _FLAGS:
        return None if text in ("0", "1") else f"{name} takes 0 or 1, got {text!r}"
    if name in _POSITIVE:
        return None if text.isdigit() and int(text) > 0 else f"{name} takes a positive integer, got {text!r}"
    return None
