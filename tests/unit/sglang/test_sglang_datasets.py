"""``workload.source: sglang:<dataset>``: the cases in ``sglang_datasets_cases.py``, run in the
environment with SGLang's dataset loaders (``.venv-sglang-data``, built by ``make test``)."""

from __future__ import annotations

import pytest

from tests.data_venv import run_cases


@pytest.mark.slow  # 37 s at load ~8 (make test-fast leaves it out)
def test_sglang_dataset_sources_in_an_environment_with_sglangs_loaders() -> None:
    run_cases("tests/unit/sglang/sglang_datasets_cases.py")
