"""The check's HTTP/1.1 server: a bare asyncio ``Protocol`` on httptools (llhttp), no framework.

A cached check costs a few microseconds; aiohttp's request and response objects cost ten times
that, on the same two cores as nginx and the model. This server keeps only what the check
reads (``Authorization``, ``X-Original-URL``, ``Host``) and answers with precomputed bytes.

- Keep-alive (HTTP/1.1 unless ``Connection: close``; HTTP/1.0 only when it asks), pipelined
  requests answered in order (a per-connection queue), any method, bodies drained unread.
- Routes (routes.py, ``check_route``): ``/internal/v1/inference-auth/<tenant>/<model>/
  <environment>`` (the deployment the route names; Envoy appends the client's path after it),
  ``/internal/v1/inference-auth`` itself (names none: 403), anything else 404.
- Not auth decisions, and never a 5xx: an unparsable request is a 400, a target over
  MAX_URL_BYTES a 414, a header section over MAX_HEADER_BYTES a 431, each then closed.
  Two ``Authorization`` headers are a malformed token (401).
- A token seen before is decided synchronously (``Checker.check_now``); others (first sight,
  rate limits) run ``Checker.check`` in a task while later answers wait their turn.
- A request must arrive whole within READ_TIMEOUT of its first byte (a slow drip, slowloris,
  is answered 408 and closed: every byte would otherwise restart the idle timer). A request
  that arrives in one read (nginx and Envoy write each in one) never arms the timer.
- Idle connections close after IDLE_TIMEOUT; reading pauses while the write buffer is full or
  too many answers are pending; ``CheckServer.stop`` closes idle connections and lets pending
  answers finish.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Final, cast

import httptools

from inference_auth.check import UNAUTHORIZED, Checker, Decision
from inference_auth.metrics import STATS
from inference_auth.routes import check_route, decide
from shared.inference_routes import DEPLOYMENT_HEADER, ENVOY_HEADERS_TO_REMOVE, HEADERS_TO_REMOVE
from shared.logging import get_logger

log = get_logger(__name__)

MAX_URL_BYTES: Final = 8 * 1024
MAX_HEADER_BYTES: Final = 16 * 1024
IDLE_TIMEOUT: Final = 75.0  # nginx's keepalive_timeout default
READ_TIMEOUT: Final = 10.0  # from a request's first byte to its last (nginx: 60 s per read)
MAX_PENDING: Final = 64  # answers queued on one connection before reading pauses
LINGER: Final = 2.0  # seconds a closing connection still reads (and drops) what the client sent

_REASONS: Final = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    408: b"Request Timeout",
    414: b"URI Too Long",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
}
_EXTRA: Final = {401: b"WWW-Authenticate: Bearer\r\n", 429: b"Retry-After: 1\r\n"}
_MAX_DEPLOYMENT_ANSWERS: Final = 10_000


def _response(status: int, *, keep_alive: bool, extra: bytes = b"") -> bytes:
    connection = b"keep-alive" if keep_alive else b"close"
    return b"HTTP/1.1 %d %s\r\n%sContent-Length: 0\r\nConnection: %s\r\n\r\n" % (
        status,
        _REASONS[status],
        extra or _EXTRA.get(status, b""),
        connection,
    )


# (status, keep_alive) -> bytes, for every answer but a 200 (which names its deployment).
_FIXED: Final = {
    (status, keep): _response(status, keep_alive=keep)
    for status in _REASONS
    if status != 200
    for keep in (True, False)
}
_ALLOWED: dict[tuple[str, bool], bytes] = {}


def _answer(decision: Decision, keep_alive: bool) -> bytes:
    if decision.status != 200:
        return _FIXED[decision.status, keep_alive]
    key = (decision.deployment, keep_alive)
    answer = _ALLOWED.get(key)
    if answer is None:
        if len(_ALLOWED) >= _MAX_DEPLOYMENT_ANSWERS:
            _ALLOWED.clear()
        # A deployment name is a DNS label path; a byte that could end the header is dropped.
        name = decision.deployment.encode("latin-1", "replace").translate(None, b"\r\n")
        answer = _ALLOWED[key] = _response(200, keep_alive=keep_alive, extra=_allowed_extra(name))
    return answer


def _allowed_extra(name: bytes) -> bytes:
    """A 200's headers: the deployment, and for Envoy the headers to remove from the request
    it forwards (the bearer token never reaches the model; nginx ignores this one)."""
    remove = ", ".join(HEADERS_TO_REMOVE).encode()
    return b"%s: %s\r\n%s: %s\r\n" % (
        DEPLOYMENT_HEADER.encode(),
        name,
        ENVOY_HEADERS_TO_REMOVE.encode(),
        remove,
    )


class _Reject(Exception):
    """Raised from a parser callback: the request breaks a limit (status), then close."""

    def __init__(self, status: int) -> None:
        self.status = status


class _Pending:
    """One answer in a connection's queue: its bytes once decided."""

    __slots__ = ("answer", "close", "linger")

    def __init__(self, *, close: bool, linger: bool = False) -> None:
        self.answer: bytes | None = None
        self.close = close
        self.linger = linger  # a refused request: the client may still be sending it


class CheckProtocol(asyncio.Protocol):
    """One client connection (nginx or Envoy keeps a few open and reuses them)."""

    def __init__(self, server: CheckServer) -> None:
        self._server = server
        self._checker = server.checker
        self._loop = server.loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._queue: deque[_Pending] = deque()
        self._closing = False  # no more requests are read; close once the queue is written
        self._lingering = False  # the last answer is written and our side shut: reading to drop
        self._write_paused = False
        self._read_paused = False
        self._in_head = False  # between a request's first byte and the end of its headers
        self._in_message = False
        self._last_active = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._read_timer: asyncio.TimerHandle | None = None  # a request split over reads
        # The request being parsed.
        self._url = b""
        self._head_bytes = 0
        self._authorization: bytes | None = None
        self._authorizations = 0
        self._original_url: bytes | None = None
        self._host: bytes | None = None
        self._started = 0.0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not a subclass of asyncio.Transport, only shaped like one.
        self._transport = cast(asyncio.Transport, transport)
        self._server.connections.add(self)
        self._last_active = self._loop.time()
        self._idle_timer = self._loop.call_later(IDLE_TIMEOUT, self._idle_check)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._closing = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._stop_read_timer()
        self._queue.clear()
        self._transport = None
        self._server.connection_gone()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_active = self._loop.time()
        was_in_head = self._in_head
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            context = exc.__context__
            self._reject(context.status if isinstance(context, _Reject) else 400)
            return
        except httptools.HttpParserUpgrade:
            # No protocol switch here: the request is answered (queued), then the connection ends.
            self._closing = True
            self._flush()
            return
        except httptools.HttpParserError:
            self._reject(400)
            return
        # A header section streamed over many reads: count what the callbacks have not seen yet.
        if was_in_head and self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEADER_BYTES:
                self._reject(431)
                return
        if self._in_message and self._read_timer is None and not self._closing:
            self._read_timer = self._loop.call_later(READ_TIMEOUT, self._read_overdue)

    def eof_received(self) -> bool | None:
        if self._lingering:
            return None  # the transport closes
        # The client is done sending: answer what is pending (a partial request is dropped),
        # then close.
        self._closing = True
        self._in_message = self._in_head = False
        self._flush()
        return True

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._in_head = self._in_message = True
        self._url = b""
        self._head_bytes = 0
        self._authorization = self._original_url = self._host = None
        self._authorizations = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_URL_BYTES:
            raise _Reject(414)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEADER_BYTES:
            raise _Reject(431)
        if len(name) == 13 and name.lower() == b"authorization":
            self._authorization = value
            self._authorizations += 1
        elif len(name) == 4 and name.lower() == b"host":
            self._host = value
        elif len(name) == 14 and name.lower() == b"x-original-url":
            self._original_url = value

    def on_headers_complete(self) -> None:
        self._in_head = False

    def on_message_complete(self) -> None:
        self._in_message = False
        if self._read_timer is not None:
            self._stop_read_timer()
        if self._closing:
            return
        started = time.perf_counter()
        keep_alive = self._parser.should_keep_alive() and not self._server.stopping
        original_url, raw_host = self._original_url, self._host
        route = check_route(
            self._url.decode("latin-1"),
            original_url=None if original_url is None else original_url.decode("latin-1"),
            host=None if raw_host is None else raw_host.decode("latin-1"),
        )
        if route is None:
            self._respond(_FIXED[404, keep_alive], keep_alive=keep_alive)
            return
        deployment, host = route
        authorization: str | None = None
        if self._authorizations > 1:
            decision: Decision | None = UNAUTHORIZED  # two tokens: which one is meant?
        else:
            if self._authorization is not None:
                authorization = self._authorization.decode("latin-1")
            try:
                decision = self._checker.check_now(authorization, deployment=deployment, host=host)
            except Exception as exc:  # fail closed, never a 5xx
                log.warning("inference_auth_check_crashed", error=type(exc).__name__, exc_info=exc)
                decision = UNAUTHORIZED
        if decision is not None:
            STATS.record(decision.outcome, decision.deployment, time.perf_counter() - started)
            self._respond(_answer(decision, keep_alive), keep_alive=keep_alive)
            return
        pending = _Pending(close=not keep_alive)
        self._queue.append(pending)
        if not keep_alive:
            self._closing = True
        task = self._loop.create_task(
            self._decide(pending, authorization, deployment, host, started)
        )
        self._server.tasks.add(task)
        task.add_done_callback(self._server.tasks.discard)
        self._update_reading()

    # answers

    async def _decide(
        self,
        pending: _Pending,
        authorization: str | None,
        deployment: str | None,
        host: str | None,
        started: float,
    ) -> None:
        decision = await decide(self._checker, authorization, deployment=deployment, host=host)
        STATS.record(decision.outcome, decision.deployment, time.perf_counter() - started)
        pending.answer = _answer(decision, not pending.close)
        self._flush()

    def _respond(self, answer: bytes, *, keep_alive: bool) -> None:
        if not keep_alive:
            self._closing = True
        if self._queue:
            pending = _Pending(close=not keep_alive)
            pending.answer = answer
            self._queue.append(pending)
            self._update_reading()
            return
        transport = self._transport
        if transport is None:
            return
        transport.write(answer)
        if not keep_alive:
            self._finish(linger=False)

    def _flush(self) -> None:
        """Write the queue's decided head, in order; close after a closing answer."""
        transport = self._transport
        if transport is None:
            return
        queue = self._queue
        while queue and queue[0].answer is not None:
            pending = queue.popleft()
            assert pending.answer is not None
            transport.write(pending.answer)
            if pending.close:
                self._finish(linger=pending.linger)
                return
        if not queue and self._closing and not self._in_message:
            transport.close()
            return
        self._update_reading()

    def _finish(self, *, linger: bool) -> None:
        """After the last answer. A whole request that asked to close: close now (the client
        has sent all it may; this is nginx's `auth_request` on every check, so it costs one
        close). A refused one (``linger``): shut our side, and read (dropping it) what the
        client still sends for LINGER seconds. Closing with unread bytes would reset the
        connection, and a reset can destroy the answer before the client reads it (a 431 after
        a large header)."""
        transport = self._transport
        self._queue.clear()
        self._closing = True
        if transport is None or self._lingering:
            return
        if not linger or not transport.can_write_eof():
            transport.close()
            return
        self._lingering = True
        transport.write_eof()
        self._update_reading()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = self._loop.call_later(LINGER, transport.close)

    def _stop_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_overdue(self) -> None:
        self._read_timer = None
        if self._in_message:
            log.info("inference_auth_request_read_timeout")
            self._reject(408)

    def _reject(self, status: int) -> None:
        """A request that is not one (unparsable, too large): answer after those before it,
        then close; nothing more is read."""
        if self._closing:  # a request asked to close and data followed it: nothing to say
            return
        self._in_head = self._in_message = False
        self._stop_read_timer()
        self._closing = True
        pending = _Pending(close=True, linger=True)
        pending.answer = _FIXED[status, False]
        self._queue.append(pending)
        self._flush()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None:
            return
        pause = not self._lingering and (
            self._write_paused or self._closing or len(self._queue) >= MAX_PENDING
        )
        if pause and not self._read_paused:
            self._read_paused = True
            transport.pause_reading()
        elif not pause and self._read_paused:
            self._read_paused = False
            transport.resume_reading()

    # idleness and stop

    def _idle_check(self) -> None:
        idle_for = self._loop.time() - self._last_active
        if idle_for >= IDLE_TIMEOUT and not self._queue:  # a stalled partial request too
            self._idle_timer = None
            if self._transport is not None:
                self._transport.close()
            return
        self._idle_timer = self._loop.call_later(
            max(IDLE_TIMEOUT - idle_for, 1.0), self._idle_check
        )

    def close_if_idle(self) -> None:
        """On stop: close now unless a request is being read (its answer will say close, as
        the server is stopping) or answers are pending (close after them)."""
        if self._in_message or self._transport is None:
            return
        self._closing = True
        if self._queue:
            self._update_reading()
        else:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class CheckServer:
    """The listening socket and its connections, for ``runner.run``."""

    def __init__(self, checker: Checker, loop: asyncio.AbstractEventLoop) -> None:
        self.checker = checker
        self.loop = loop
        self.connections: set[CheckProtocol] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self._server: asyncio.Server | None = None
        self._all_gone: asyncio.Event | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await self.loop.create_server(
            lambda: CheckProtocol(self), host, port, reuse_address=True, backlog=1024
        )

    @property
    def port(self) -> int:
        """The bound port (``start`` with port 0 picks a free one)."""
        assert self._server is not None, "not started"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def stop(self, grace: float) -> None:
        """Stop accepting, close idle connections, give pending answers ``grace`` seconds,
        then drop what is left."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close_if_idle()
        if self.connections:
            self._all_gone = asyncio.Event()
            try:
                async with asyncio.timeout(grace):
                    await self._all_gone.wait()
            except TimeoutError:
                log.warning("inference_auth_stop_overran", connections=len(self.connections))
        for connection in list(self.connections):
            connection.abort()
        for task in list(self.tasks):
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()

    def connection_gone(self) -> None:
        if self._all_gone is not None and not self.connections:
            self._all_gone.set()
