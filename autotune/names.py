"""Names used everywhere: how a parameter named for an environment variable is told apart.

Space files, ``--params``, NCCL candidates, launches, MLflow params and exports use one spelling
per parameter: a ``ServerArgs`` field (``speculative_num_steps``) or an environment variable
(``NCCL_ALGO``). :func:`is_env_name` is the one rule that tells them apart.

A search's name becomes a folder (``mlruns/ray/<name>``, its artifacts' folder): :func:`check_path_name`
is the one rule of what such a name may be, and :func:`safe_path_name` the name it suggests instead.
"""

from __future__ import annotations

import re

from autotune.errors import ConfigError, cut

__all__ = ["check_path_name", "is_env_name", "safe_path_name"]

#: A name that is one plain folder name anywhere: no separator, no ``..``, no leading dot or dash.
_PATH_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def is_env_name(name: str) -> bool:
    """Whether a parameter name is an environment variable (all upper case with a letter:
    ``NCCL_ALGO``). The one rule: space files, NCCL candidates and launches all use it."""
    return bool(_ENV_NAME.fullmatch(name)) and any(c.isalpha() for c in name)


def safe_path_name(name: str) -> str:
    """``name`` made a plain folder name: every run of other characters one ``_``, no leading
    dot, at most 100 characters (``../../x`` -> ``x``); ``search`` if nothing is left."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:100]
    return safe or "search"


def check_path_name(name: str, *, field: str, file: str | None = None, line: int | None = None) -> str:
    """``name`` if it can become a folder as it is (:data:`_PATH_NAME`), so that nothing named by a
    user is written outside the folder meant for it.

    Args:
        name: The name (a search name).
        field: Where it came from, for the message (``--name``, ``name``).
        file: The file it came from, if any.
        line: Its line in that file, if known.

    Raises:
        ConfigError: It is not a plain folder name; the message suggests :func:`safe_path_name`.
    """
    if _PATH_NAME.fullmatch(name) and ".." not in name:
        return name
    raise ConfigError(f"{cut(repr(name))} is not a plain folder name (it names the search's folders under "
                      f"mlruns/); use letters, digits, '.', '_' and '-', at most 100, e.g. {safe_path_name(name)!r}",
                      field=field, file=file, line=line)
