"""Names used everywhere: how a parameter named for an environment variable is told apart.

Space files, ``--params``, NCCL candidates, launches, MLflow params and exports use one spelling
per parameter: a ``ServerArgs`` field (``speculative_num_steps``) or an environment variable
(``NCCL_ALGO``). :func:`is_env_name` is the one rule that tells them apart.
"""

from __future__ import annotations

import re

__all__ = ["is_env_name"]

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def is_env_name(name: str) -> bool:
    """Whether a parameter name is an environment variable (all upper case with a letter:
    ``NCCL_ALGO``). The one rule: space files, NCCL candidates and launches all use it."""
    return bool(_ENV_NAME.fullmatch(name)) and any(c.isalpha() for c in name)
