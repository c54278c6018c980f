"""Fault injection for integration tests: a TCP proxy that can cut a service off, or silence
some of its connections without closing them.

Pointing a deployable at the proxy instead of PostgreSQL lets a test take the database away
(every open connection reset, new ones refused) and give it back, without disturbing the
machine's PostgreSQL that the other tests share. ``freeze`` makes a half-open connection
instead: the chosen connections stop forwarding in both directions but stay open, as when a
peer or a middlebox drops packets silently. Each connection's first bytes from the client are
kept, so a test can choose connections by what they announced (PostgreSQL's startup message
carries ``application_name``), and the bytes each client sent are counted (queries reaching
the server, measured from outside the process).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

_KEPT: int = 4096  # bytes of each connection's opening kept for matching


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    opening: bytearray = field(default_factory=bytearray)
    sent: int = 0  # bytes from the client forwarded to the server
    frozen: bool = False


class CuttableProxy:
    def __init__(self, *, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._closed_sent: list[tuple[bytes, int]] = []  # (opening, sent) of closed links
        self._pumps: set[asyncio.Task[None]] = set()
        self._freezing: bytes | None = None
        self.cut_off = False
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    def cut(self) -> None:
        """Reset every open connection and refuse new ones (the server went away)."""
        self.cut_off = True
        for link in list(self._links):
            self._close(link)

    def restore(self) -> None:
        self.cut_off = False
        self._freezing = None

    def freeze(self, containing: bytes) -> None:
        """Stop forwarding, without closing, every connection whose client has sent
        ``containing`` (now or later, new connections too) until ``restore``: those peers see a
        silent network, the others go on."""
        self._freezing = containing
        for link in self._links:
            if containing in link.opening:
                link.frozen = True

    def reset(self, containing: bytes) -> None:
        """Reset every open connection whose client has sent ``containing``."""
        for link in list(self._links):
            if containing in link.opening:
                self._close(link)

    def sent(self, *, excluding: bytes | None = None) -> int:
        """Bytes clients have sent to the server so far, leaving out the connections whose
        client sent ``excluding``."""
        links = [(bytes(link.opening), link.sent) for link in self._links]
        return sum(
            sent
            for opening, sent in (*self._closed_sent, *links)
            if excluding is None or excluding not in opening
        )

    def _close(self, link: _Link) -> None:
        if link in self._links:
            self._links.discard(link)
            self._closed_sent.append((bytes(link.opening), link.sent))
        for writer in (link.client, link.server):
            writer.transport.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        for src, dst, upstream in ((reader, up_writer, True), (up_reader, writer, False)):
            task = asyncio.create_task(self._pump(link, src, dst, upstream=upstream))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(
        self,
        link: _Link,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        try:
            while data := await src.read(65536):
                if upstream and len(link.opening) < _KEPT:
                    link.opening += data[: _KEPT - len(link.opening)]
                    if self._freezing is not None and self._freezing in link.opening:
                        link.frozen = True
                if link.frozen:
                    continue  # dropped silently: the connection stays open
                if upstream:
                    link.sent += len(data)
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                self._close(link)
