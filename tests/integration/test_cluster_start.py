"""The embedded Ray cluster is started once more when its first start fails.

Ray gives its raylet a fixed 30 s to register (``ray/_private/node.py``); on a loaded machine the
start failed with "The current node timed out during startup" and took a whole search with it. That
timeout cannot be produced on demand here, so the first ``ray.init`` raises Ray's own exception
(a bare ``Exception`` with Ray's message); the second is the real one, and a real cluster starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from autotune.search.cluster import init_ray
from autotune.search.options import SearchOptions
from autotune.space.search_space import load_space

SPACES = Path(__file__).resolve().parents[1] / "spaces"

_RAY_MESSAGE = ("The current node timed out during startup. This could happen because some of the "
                "raylet failed to startup or the GCS has become overloaded.")


@pytest.mark.slow  # 18 s at load ~8 (make test-fast leaves it out)
def test_an_embedded_start_that_times_out_is_tried_once_more(monkeypatch, capsys) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    space = load_space(str(SPACES / "baseline-wins.yaml"))
    real_init, calls = ray.init, []

    def init(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise Exception(_RAY_MESSAGE)  # noqa: TRY002 - what Ray raises
        return real_init(*args, **kwargs)

    monkeypatch.setattr(ray, "init", init)
    try:
        assert init_ray(space, SearchOptions(space="x"), 1) == "embedded"
        assert ray.is_initialized() and ray.cluster_resources().get("GPU", 0) >= 1
    finally:
        ray.shutdown()
    assert len(calls) == 2 and calls[0] == calls[1]
    err = capsys.readouterr().err
    assert "ray: the embedded cluster did not start (The current node timed out during startup." in err
    assert "starting it once more" in err


def test_a_second_failure_is_not_hidden(monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    space = load_space(str(SPACES / "baseline-wins.yaml"))

    def init(*args, **kwargs):
        raise Exception(_RAY_MESSAGE)  # noqa: TRY002

    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(Exception, match="timed out during startup"):
        init_ray(space, SearchOptions(space="x"), 1)
    assert not ray.is_initialized()
