"""``check_ray_address``: a Ray address's form, then that something answers there (issue 36)."""

from __future__ import annotations

import socket

import pytest

from autotune.errors import ConfigError
from autotune.search.cluster import check_ray_address


@pytest.mark.parametrize(("address", "words"), [
    ("nohost:notaport", "'notaport' is not a port"),
    ("h:0", "'0' is not a port"),
    ("h:65536", "'65536' is not a port"),
    (":6379", "no host:port"),
    ("justahost", "no host:port"),
    ("http://h:6379", "http:// is no scheme"),
    ("bad host:6379", "'bad host' is not a host name"),
])
def test_a_malformed_address_says_what_is_wrong_and_what_is_right(address: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_ray_address(address, source="--address")
    text = str(info.value)
    assert words in text and f"--address {address!r} is not a Ray address" in text
    assert "ray://host:10001" in text and "host:6379" in text and "\n" not in text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_address_where_nothing_listens_is_refused_with_its_source() -> None:
    port = _closed_port()
    with pytest.raises(ConfigError, match=rf"'ray://127\.0\.0\.1:{port}': nothing answers on 127\.0\.0\.1:{port}"):
        check_ray_address(f"ray://127.0.0.1:{port}", source="RAY_ADDRESS")


def test_an_address_that_answers_passes() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        check_ray_address(f"127.0.0.1:{port}")
        check_ray_address(f"ray://127.0.0.1:{port}")


@pytest.mark.parametrize("address", [None, "", "local"])
def test_no_address_or_local_is_an_embedded_ray(address: str | None) -> None:
    check_ray_address(address)  # nothing to join: returns without a connection
