"""A small launcher package written for a test, standing in for SGLang's (``measure.standby`` and
``measure.prefork`` tests), and the helpers those tests share around it."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from pathlib import Path

from autotune.server.group import release_watchdog
from autotune.server.standby import Standby


def write_package(root: Path, package: str, modules: Mapping[str, str]) -> Path:
    """``root/package/NAME.py`` for each of ``modules`` (their text dedented); returns ``root``."""
    (root / package).mkdir(parents=True)
    for name, text in modules.items():
        (root / package / f"{name}.py").write_text(textwrap.dedent(text))
    return root


def env_for(pkg: Path, *, drop: str, **extra: str) -> dict[str, str]:
    """This process's environment less the variables starting with ``drop``, with ``pkg`` as the
    whole PYTHONPATH and ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(pkg)
    env.update(extra)
    return env


def dispose(standby: Standby) -> None:
    """The standby ended (if it was not handed over) and its reaper sidecar released."""
    standby.discard()
    reaper = standby.take_watchdog()
    if reaper is not None:
        release_watchdog(reaper)
