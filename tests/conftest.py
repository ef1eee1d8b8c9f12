"""Session set-up shared by every test module.

The installed SGLang's flags, as a table, for every process the tests start
--------------------------------------------------------------------------

Each trial process (``python -m autotune.trial``, a Ray worker, ``python -m autotune.search``) and
each emulator server resolves its launch flags against :func:`autotune.sglang.flags.active_flags`;
with SGLang installed that imports ``sglang.srt.server_args`` to build SGLang's parser, several
CPU-seconds per process on a 2-core box, and the suite starts hundreds of them. So, once per
session, the installed SGLang's own parser is written as a flag table
(:func:`autotune.sglang.flags.write_flag_table`, the format ``tests/data/make_sglang_flags.py``
writes) and ``AUTOTUNE_SGLANG_FLAG_TABLE`` names it in this process's environment, which every
subprocess and Ray worker inherits: they rebuild the same flags (same release, spellings, dests,
arity, choices, defaults, ``--config`` key rules, value types but for a few JSON-valued flags no
emulator test passes; ``tests/data/README.md`` lists them) without importing SGLang.
``tests/unit/sglang/test_session_flag_table.py`` checks that the table stands for the installed parser.

In this process nothing changes: a :func:`autotune.sglang.flags.using_flags` block keeps the
installed SGLang's own :class:`~autotune.sglang.flags.FlagSet` active for the whole session, so
in-process tests resolve against the real parser exactly as before (``use_sglang=True`` and
``installed_flags()`` always did). A test that wants a subprocess on the real parser removes the
variable from the subprocess's environment (``tests/integration/test_fast_start.py``'s ``sim_env`` does).

Nothing is done when SGLang is not importable (every process then uses the built-in twin anyway) or
when ``AUTOTUNE_SGLANG_FLAG_TABLE`` is already set (a run against another release's table).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.sglang import flags as sglang_flags

# The GPU validation kit's tests (scripts/gpu/, a remote GPU host's plans and state) are not part of
# `make test` or CI: they test tooling for GPU runs, not the product, and take minutes. `make test-gpu-kit`.
GPU_KIT_ENV = "AUTOTUNE_GPU_KIT_TESTS"
collect_ignore_glob = [] if os.environ.get(GPU_KIT_ENV) == "1" else ["gpu_kit/*"]


@pytest.fixture(scope="session")
def installed_flag_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A flag table of the installed SGLang's parser, written once per session.

    Raises:
        AutotuneError: SGLang is not importable (as every installed-parser test does).
    """
    installed = sglang_flags.installed_flags()
    path = tmp_path_factory.mktemp("sglang-flags") / f"sglang-{installed.version}-installed-flags.json"
    sglang_flags.write_flag_table(installed, path, generated_by="tests/conftest.py (the installed SGLang)")
    return path


@pytest.fixture(scope="session", autouse=True)
def subprocesses_use_the_installed_flag_table(request: pytest.FixtureRequest) -> Iterator[Path | None]:
    """Export :func:`installed_flag_table` to every subprocess; keep the real parser in this one.

    Yields the table exported, or None when nothing was done (no SGLang, or a table already set).
    """
    if os.environ.get(sglang_flags.FLAG_TABLE_ENV) or not sglang_flags.sglang_importable():
        yield None
        return
    path: Path = request.getfixturevalue("installed_flag_table")
    os.environ[sglang_flags.FLAG_TABLE_ENV] = str(path)
    try:
        with sglang_flags.using_flags(sglang_flags.installed_flags()):
            yield path
    finally:
        if os.environ.get(sglang_flags.FLAG_TABLE_ENV) == str(path):
            del os.environ[sglang_flags.FLAG_TABLE_ENV]


# Under pytest-xdist (`make test` runs `-n 2 --dist loadfile`: each module stays on one worker, so
# its module-scoped servers and stores start once) the workers take modules in collection order.
# Alphabetical order leaves some of the longest end-to-end modules to the end, where one worker
# runs them while the other idles; so they go first, longest first (seconds from `--durations=80`
# of a two-worker run on a near-idle box, load average 3-5, 2026-12-02; only tests over 4 s summed).
# `make test` passes --no-loadscope-reorder, or pytest-xdist would sort modules by their number of
# tests and undo this order. A serial run keeps the alphabetical order.
HEAVY_FIRST = (
    "test_reliability_tracking.py",  # 509 s
    "test_search.py",  # 273 s
    "test_reliability_interrupts.py",  # 164 s
    "test_reliability_placement.py",  # 128 s
    "test_gpu_resume.py",  # 116 s
    "test_nccl_probe.py",  # 108 s
    "test_tracking.py",  # 97 s
    "test_reliability_faults.py",  # 89 s
    "test_prescreen.py",  # 89 s
    "test_gpu_plan.py",  # 80 s
    "test_reliability_tracking_back.py",  # 74 s
    "test_reliability_load.py",  # 67 s
    "test_rate_levels.py",  # 53 s
    "test_winner.py",  # 47 s
    "test_mlflow_screenshot.py",  # 45 s
    "test_reliability_input.py",  # 44 s
    "test_fast_start.py",  # 41 s
    "test_trial_integration.py",  # 39 s
    "test_mlflow_ui.py",  # 38 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    # A stable sort: tests keep their order within a module, other modules their order after.
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FIRST)))
