"""The check server's connection life cycle over real sockets, on fake loop time (looptime):
idle connections are closed after IDLE_TIMEOUT, a request dripping in is cut off after
READ_TIMEOUT, and a stop closes idle connections at once while an answer in flight still gets
out."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from inference_auth.cache import TokenCache
from inference_auth.check import Checker
from inference_auth.http_server import IDLE_TIMEOUT, CheckServer

UNKNOWN_PATH = b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n"


async def _server() -> tuple[CheckServer, int]:
    cache = TokenCache(stale_for=1.0, negative_ttl=1.0)
    # No store: these requests never reach a token (an unknown path is answered 404).
    checker = Checker(store=None, cache=cache, guard=None)  # type: ignore[arg-type]
    server = CheckServer(checker, asyncio.get_running_loop())
    await server.start("127.0.0.1", 0)
    return server, server.port


@pytest.mark.looptime
async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    server, port = await _server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(UNKNOWN_PATH)
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 404")
        started = asyncio.get_running_loop().time()
        assert await reader.read() == b""  # closed by the server, not by us
        waited = asyncio.get_running_loop().time() - started
        assert IDLE_TIMEOUT - 1 <= waited <= IDLE_TIMEOUT + 2
        writer.close()
    finally:
        await server.stop(1.0)


@pytest.mark.looptime
async def test_a_stop_closes_idle_connections_at_once() -> None:
    server, port = await _server()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(UNKNOWN_PATH)
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 404")
    started = asyncio.get_running_loop().time()
    await server.stop(30.0)
    assert await reader.read() == b""
    assert asyncio.get_running_loop().time() - started < 5
    writer.close()


@pytest.mark.looptime
@pytest.mark.parametrize(
    "head",
    [
        b"GET /internal/v1/inference-auth HTTP/1.1\r\n",  # a header section that never ends
        b"POST /internal/v1/inference-auth/x HTTP/1.1\r\nHost: h\r\nContent-Length: 999\r\n\r\n",
    ],
    ids=["headers", "body"],
)
async def test_a_request_dripping_in_a_byte_at_a_time_is_cut_off(head: bytes) -> None:
    """Slowloris: every byte resets an idle timer, so only a bound on the whole request's
    reading closes it. The connection must be closed by the server well within a minute
    (looptime: the minute is fake, nothing waits for it)."""
    server, port = await _server()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def drip() -> None:
        writer.write(head)
        with contextlib.suppress(ConnectionError):
            while True:  # one byte a second
                await asyncio.sleep(1.0)
                writer.write(b"X")
                await writer.drain()

    dripping = asyncio.create_task(drip())
    try:
        started = asyncio.get_running_loop().time()
        received = b""
        async with asyncio.timeout(60):
            while chunk := await reader.read(1024):
                received += chunk
        assert received.startswith(b"HTTP/1.1 408 ")
        assert asyncio.get_running_loop().time() - started < 60
    finally:
        dripping.cancel()
        writer.close()
        await server.stop(1.0)
