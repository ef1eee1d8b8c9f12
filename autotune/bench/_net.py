"""An httpcore network backend on asyncio's protocol API, for the benchmark client's connections.

Why: httpcore's default backend on asyncio is anyio's, which wraps every socket read in a
cancel scope (``anyio.fail_after``) and a stream object with its own locks. At concurrency 64 a
streamed ``/generate`` request makes about two reads per chunk, and that wrapping was a third of
the client's CPU per token (profiled on the emulator, docs/benchmarks.md, "The client's CPU"); on
a GPU host the client spent 58-62 us a token against ``sglang.bench_serving``'s 38. This backend
reads from an :class:`asyncio.Protocol`'s buffer, timing a read out with one ``call_later`` only
when it has to wait. httpx, httpcore and h11 still do all the HTTP; only the bytes' path changes.

The client makes one transport per request slot with :func:`slot_transport`; everything else in
autotune (health probes, ``/metrics``) keeps httpx's default.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore
import httpx

__all__ = ["AsyncioBackend", "slot_transport"]

#: Stop reading from the socket while this much is buffered and unread (asyncio's own default).
_HIGH_WATER = 64 * 1024


class _Protocol(asyncio.Protocol):
    """Buffers what the socket delivers and wakes the one reader waiting for it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.write_ready: asyncio.Future[None] | None = None

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        if self.write_ready is not None and not self.write_ready.done():
            self.write_ready.set_result(None)

    def pause_writing(self) -> None:
        self.write_ready = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.write_ready is not None and not self.write_ready.done():
            self.write_ready.set_result(None)
        self.write_ready = None


async def _wait(future: asyncio.Future[None], timeout: float | None, error: type[Exception], what: str) -> None:
    if timeout is None:
        await future
        return
    loop = asyncio.get_running_loop()

    def expire() -> None:
        if not future.done():
            future.set_exception(error(f"{what} timed out after {timeout} s"))

    handle = loop.call_later(timeout, expire)
    try:
        await future
    finally:
        handle.cancel()


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.buffer and not p.eof:
            p.waiter = asyncio.get_running_loop().create_future()
            try:
                await _wait(p.waiter, timeout, httpcore.ReadTimeout, "read")
            finally:
                p.waiter = None
        if p.buffer:
            data = bytes(p.buffer[:max_bytes])
            del p.buffer[:max_bytes]
            if p.paused and len(p.buffer) <= _HIGH_WATER // 4:
                p.paused = False
                self._transport.resume_reading()
            return data
        if p.error is not None:
            raise httpcore.ReadError(f"{type(p.error).__name__}: {p.error}")
        return b""  # the peer closed: h11 decides whether that ended the response or broke it

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if self._transport.is_closing() or p.error is not None:
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        if p.write_ready is not None:
            await _wait(p.write_ready, timeout, httpcore.WriteTimeout, "write")
            if p.error is not None:
                raise httpcore.WriteError(f"{type(p.error).__name__}: {p.error}")

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(self._transport, self._protocol, ssl_context,
                                           server_hostname=server_hostname)
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout(f"TLS handshake timed out after {timeout} s") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(f"{type(exc).__name__}: {exc}") from None
        if tls is None:
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._protocol.transport = tls
        return _Stream(tls, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle keep-alive connection the server closed, or sent to
            return self._protocol.eof or bool(self._protocol.buffer)
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """TCP (and Unix-socket) connections as :class:`asyncio.Protocol` streams."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=None if local_address is None else (local_address, 0))
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out after {timeout} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{type(exc).__name__}: {exc}") from None
        sock = transport.get_extra_info("socket")  # asyncio's TCP transport has set TCP_NODELAY
        if sock is not None:
            for option in socket_options or ():
                sock.setsockopt(*option)
        return _Stream(transport, protocol)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_unix_connection(_Protocol, path)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {path} timed out after {timeout} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{type(exc).__name__}: {exc}") from None
        return _Stream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def slot_transport(*, ssl_context: ssl.SSLContext, keepalive_expiry: float | None = 5.0) -> httpx.AsyncHTTPTransport:
    """An httpx transport of one keep-alive HTTP/1.1 connection over :class:`AsyncioBackend`.

    httpx 0.28 builds its httpcore pool inside ``AsyncHTTPTransport`` without a way to name the
    network backend, so the pool (built here through httpcore's public constructor, with what
    httpx would pass for these limits) replaces the one it made.

    Raises:
        RuntimeError: The httpx in use keeps its pool elsewhere (the client would silently lose
            this backend; pinned httpx 0.28 does not).
    """
    transport = httpx.AsyncHTTPTransport(verify=ssl_context,
                                         limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
    if not isinstance(getattr(transport, "_pool", None), httpcore.AsyncConnectionPool):
        raise RuntimeError(f"httpx {httpx.__version__}: AsyncHTTPTransport has no httpcore pool at ._pool")
    transport._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001 - see above
        ssl_context=ssl_context, max_connections=1, max_keepalive_connections=1,
        keepalive_expiry=keepalive_expiry, http1=True, http2=False, network_backend=AsyncioBackend())
    return transport
