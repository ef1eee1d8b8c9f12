"""autotune.bench._net: the client's connections over asyncio's protocol API, against real sockets on
127.0.0.1 (a raw asyncio server per case, so that each can misbehave exactly one way)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable

import httpx
import pytest

from autotune.bench._net import slot_transport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _request_head(reader: asyncio.StreamReader) -> bool:
    """Read one request's head and its (Content-Length) body; False at the end of the connection."""
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return False
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return True


def _response(body: bytes, *, close: bool = False) -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: " + str(len(body)).encode()
            + (b"\r\nconnection: close" if close else b"") + b"\r\n\r\n" + body)


async def _serve(handler: Handler, body: Callable[[httpx.AsyncClient, str], Awaitable[None]],
                 *, read_timeout: float = 5.0) -> None:
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(guarded, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ssl_context = httpx.create_ssl_context()
    client = httpx.AsyncClient(transport=slot_transport(ssl_context=ssl_context),
                               timeout=httpx.Timeout(5.0, read=read_timeout))
    try:
        await body(client, f"http://127.0.0.1:{port}/")
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


def test_keep_alive_reuses_one_connection_and_a_closed_idle_one_is_replaced() -> None:
    connections: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        served = 0
        while await _request_head(reader):
            served += 1
            writer.write(_response(f"reply {served} on connection {len(connections)}".encode()))
            await writer.drain()
            if served == 2:  # the server drops the idle connection after its second reply
                return

    async def body(client: httpx.AsyncClient, url: str) -> None:
        texts = [(await client.post(url, content=b"x" * 10)).text for _ in range(3)]
        assert texts == ["reply 1 on connection 1", "reply 2 on connection 1", "reply 1 on connection 2"]

    asyncio.run(_serve(handler, body))
    assert len(connections) == 2


def test_a_body_past_the_buffer_limit_arrives_whole() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: reading pauses and resumes many times

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.write(_response(payload))
        await writer.drain()

    async def body(client: httpx.AsyncClient, url: str) -> None:
        async with client.stream("GET", url) as resp:
            await asyncio.sleep(0.2)  # let the socket fill the buffer before anything is read
            got = b"".join([chunk async for chunk in resp.aiter_raw()])
        assert got == payload

    asyncio.run(_serve(handler, body))


def test_a_stalled_stream_times_out_as_a_read_timeout() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"6\r\ndata:1\r\n")
        await writer.drain()
        await release.wait()

    async def body(client: httpx.AsyncClient, url: str) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(httpx.ReadTimeout, match="read timed out after 0.3 s"):
            async with client.stream("GET", url) as resp:
                async for _ in resp.aiter_raw():
                    pass
        assert loop.time() - t0 >= 0.3
        release.set()

    asyncio.run(_serve(handler, body, read_timeout=0.3))


def test_a_reset_mid_body_is_a_read_error_and_a_refused_connect_a_connect_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST

    async def body(client: httpx.AsyncClient, url: str) -> None:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await client.get(url)

    asyncio.run(_serve(handler, body))

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def refused() -> None:
        async with httpx.AsyncClient(transport=slot_transport(ssl_context=httpx.create_ssl_context())) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/")

    asyncio.run(refused())
