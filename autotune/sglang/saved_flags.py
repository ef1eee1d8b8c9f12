"""A saved SGLang flag table used in place of the installed SGLang, where it is that SGLang's.

A search writes the installed SGLang's flags as a table (:func:`autotune.sglang.flags.share_installed_flags`)
and checks its trials against it. A command that reads the search's records back (``autotune export``)
checks with the same table when the installed SGLang is the version that wrote it: the same flags,
without importing SGLang again (seconds, ``docs/startup.md``).
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.sglang.flags import FlagSet, flags_from_table

__all__ = ["installed_table", "installed_version"]


def installed_version() -> str | None:
    """The installed SGLang's version from its package metadata (no import), None without it."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def installed_table(path: str | os.PathLike[str] | None) -> FlagSet | None:
    """The flag table at ``path`` when it is the installed SGLang's (same version), read without
    importing SGLang; None without a table, without SGLang, or for another version."""
    version = installed_version()
    if not path or version is None or not Path(path).is_file():
        return None
    try:
        flags = flags_from_table(str(path))
    except AutotuneError:
        return None
    return flags if flags.version == version else None
