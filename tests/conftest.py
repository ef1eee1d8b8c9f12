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

Fixtures every layer shares
---------------------------

The suite is layered (README, "Tests"): ``tests/unit/<package>/`` mirrors ``autotune/``,
``tests/integration/`` tests several packages together, ``tests/e2e/`` whole searches and commands as
a user runs them. What their modules share is here:

- ``sim_env``: the emulator's environment, for any test that starts emulator servers (itself, through
  a trial, or through a search on a local Ray): no ``AUTOTUNE_SIM_*``, ``RAY_ADDRESS`` or NCCL probe
  fault inherited from the shell, a 0.2 s start-up, and a GPU lock directory of the test's own
  (``AUTOTUNE_SIM_GPU_LOCK_DIR``, inherited by Ray's workers and every server) that it returns: the
  emulator refuses a second server on a GPU a live one holds, and its ``usage.jsonl`` and the
  processes' environments show what the test started.
- ``space_factory``: writes a small emulator space into ``tmp_path`` from keyword overrides and loads
  it (:class:`SpaceFactory`).
- ``store`` and ``tracker``: a real MLflow sqlite store (one per module: MLflow's migrations take
  seconds) and a real :class:`~autotune.tracking.tracker.Tracker` with a search started in it, an
  experiment of its own per test.
"""

from __future__ import annotations

import copy
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from autotune.sglang import flags as sglang_flags
from autotune.space.search_space import SearchSpace, load_space

if TYPE_CHECKING:
    from autotune.tracking.tracker import Tracker

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
# tests and undo this order. A serial run keeps the alphabetical order. Modules are named by their
# path below tests/ (tests/unit/test_layout.py checks that each one is there).
TESTS = Path(__file__).resolve().parent
HEAVY_FIRST = (
    "e2e/reliability/test_reliability_tracking.py",  # 509 s
    "e2e/test_search.py",  # 273 s
    "e2e/reliability/test_reliability_interrupts.py",  # 164 s
    "e2e/reliability/test_reliability_placement.py",  # 128 s
    "gpu_kit/test_gpu_resume.py",  # 116 s
    "unit/nccl/test_nccl_probe.py",  # 108 s
    "unit/tracking/test_tracking.py",  # 97 s
    "e2e/reliability/test_reliability_faults.py",  # 89 s
    "e2e/test_prescreen.py",  # 89 s
    "gpu_kit/test_gpu_plan.py",  # 80 s
    "e2e/reliability/test_reliability_tracking_back.py",  # 74 s
    "e2e/reliability/test_reliability_load.py",  # 67 s
    "e2e/test_rate_levels.py",  # 53 s
    "e2e/test_winner.py",  # 47 s
    "integration/test_mlflow_screenshot.py",  # 45 s
    "e2e/reliability/test_reliability_input.py",  # 44 s
    "integration/test_fast_start.py",  # 41 s
    "integration/test_trial_integration.py",  # 39 s
    "integration/test_mlflow_ui.py",  # 38 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    # A stable sort: tests keep their order within a module, other modules their order after.
    items.sort(key=lambda item: rank.get(_under_tests(item.path), len(HEAVY_FIRST)))


def _under_tests(path: Path) -> str:
    """A test module's path below tests/ (``e2e/test_search.py``), as HEAVY_FIRST names it."""
    try:
        return path.relative_to(TESTS).as_posix()
    except ValueError:
        return path.name


# ---- the emulator's environment ------------------------------------------------------------------

SIM_LOCK_ENV = "AUTOTUNE_SIM_GPU_LOCK_DIR"


@pytest.fixture
def sim_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fast emulator start-up and a per-test GPU lock directory (inherited by Ray's workers); returns it.

    Nothing the emulator, Ray or the NCCL probe read is inherited from the shell: every
    ``AUTOTUNE_SIM_*`` variable, ``RAY_ADDRESS`` and ``AUTOTUNE_NCCL_PROBE_FAULT`` are removed first.
    """
    return set_sim_env(monkeypatch, tmp_path)


def set_sim_env(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Path:
    """What :func:`sim_env` sets, through ``monkeypatch``, with the lock directory in ``folder``;
    returns it. For a module-scoped search (``pytest.MonkeyPatch.context()``) that several tests read."""
    for name in list(os.environ):
        if name.startswith("AUTOTUNE_SIM_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("AUTOTUNE_NCCL_PROBE_FAULT", raising=False)
    locks = folder / "gpu-locks"
    locks.mkdir()
    monkeypatch.setenv("AUTOTUNE_SIM_STARTUP_S", "0.2")
    monkeypatch.setenv(SIM_LOCK_ENV, str(locks))
    return locks


# ---- spaces ----------------------------------------------------------------------------------------

# A small emulator space: two configs (the baseline and EAGLE3 at 3 steps, top-k 1), two prompts.
SMALL_SPACE: dict[str, Any] = {
    "name": "small", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
    "model_path": "sim/Llama-3.1-8B-Instruct", "draft_model_path": "sim/EAGLE3-LLaMA3.1-Instruct-8B",
    "fixed_args": {"tp_size": 1, "speculative_eagle_topk": 1},
    "parameters": {
        "speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]},
        "speculative_num_steps": {"type": "categorical", "choices": [3]},
    },
    "workload": {"source": "builtin", "num_prompts": 2, "warmup_prompts": 1, "output_len": 16,
                 "concurrency": 1, "seed": 0},
    "measure": {"repeats": 1, "startup_timeout_s": 60},
    "objective": {"metric": "output_tok_s"},
}


class SpaceFactory:
    """Spaces written as YAML into one folder (a test's ``tmp_path``) and loaded by ``load_space``.

    ``base`` is the space as data (:data:`SMALL_SPACE` unless given); each keyword replaces that
    top-level key, except that a dict given for a section that is a dict updates the section (so
    ``measure={"repeats": 2}`` keeps the section's other keys). A base is never changed.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, base: dict[str, Any] | None = None, *, file: str = "space.yaml", **changes: Any) -> Path:
        """The space's file (``folder/file``, written again on every call), not loaded."""
        data = copy.deepcopy(SMALL_SPACE if base is None else base)
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key].update(copy.deepcopy(value))
            else:
                data[key] = copy.deepcopy(value)
        path = self.folder / file
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def __call__(self, base: dict[str, Any] | None = None, *, file: str = "space.yaml",
                 **changes: Any) -> SearchSpace:
        """The space written (as :meth:`write`) and loaded; its file is ``.file``."""
        return load_space(self.write(base, file=file, **changes))


@pytest.fixture
def space_factory(tmp_path: Path) -> SpaceFactory:
    """Writes small spaces into ``tmp_path`` and loads them: ``space_factory(measure={...})``."""
    return SpaceFactory(tmp_path)


# ---- tracking ---------------------------------------------------------------------------------------

_searches = itertools.count()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project folder per module whose sqlite store is created once (MLflow's migrations take seconds)."""
    from autotune.tracking.tracker import Tracker  # MLflow: imported by the tests that track only

    root = tmp_path_factory.mktemp("project")
    Tracker("warm-up", root=root).connect()
    return root


@pytest.fixture
def tracker(store: Path) -> Tracker:
    """A real Tracker on the module's store: a fresh search (its own experiment), started."""
    from autotune.tracking.tracker import Tracker

    tr = Tracker(f"search-{next(_searches)}", root=store).connect()
    tr.start_search(backend="sim", budget=8, seed=3, sampler="tpe", ray_address="local")
    return tr
