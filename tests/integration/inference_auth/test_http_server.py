"""The check's own HTTP/1.1 server (inference_auth/http_server.py) over raw sockets, served by the
runner on real PostgreSQL and Redis: keep-alive, pipelining in order across the synchronous and
the asynchronous decision, HTTP/1.0, limits, parser errors, routes and bodies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import pytest

from shared.db.inference_tokens import TokenStore
from tests.integration.inference_auth.conftest import Instance, route_of

DOMAIN = "models.example.com"
CHURN_HOST = "churn-production.acme.models.example.com"
FRAUD_HOST = "fraud-production.acme.models.example.com"
PATH = "/internal/v1/inference-auth"
CHURN_ROUTE = f"{PATH}/acme/churn/production"

Start = Callable[..., Awaitable[Instance]]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-cased names


@dataclass
class Tokens:
    service: Instance
    churn: str
    fraud: str


def nginx_request(token: str, host: str, *, version: str = "1.1", extra: str = "") -> bytes:
    """A check as nginx sends it for the Ingress of ``host`` (its auth-url names the
    deployment ``host`` names)."""
    return (
        f"GET {PATH}/{route_of(host)} HTTP/{version}\r\nHost: auth\r\n"
        f"Authorization: Bearer {token}\r\n"
        f"X-Original-URL: https://{host}/v1/models/m:predict\r\n{extra}\r\n"
    ).encode()


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def reply(self) -> Reply:
        async with asyncio.timeout(5):
            head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        assert headers["content-length"] == "0"
        return Reply(int(status_line.split()[1]), headers)

    async def closed(self) -> bool:
        """True when the server closed the connection (nothing more than EOF follows)."""
        async with asyncio.timeout(5):
            return await self.reader.read() == b""


@pytest.fixture
async def tokens(db: asyncpg.Pool, start_instance: Start) -> Tokens:
    store = TokenStore(db)
    for model in ("churn", "fraud"):
        await store.register_deployment(
            tenant="acme", model=model, environment="production", domain=DOMAIN
        )
    churn = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    fraud = await store.issue(tenant="acme", model="fraud", environment="production", actor="t")
    return Tokens(await start_instance(), churn.token, fraud.token)


@pytest.fixture
async def connect(tokens: Tokens) -> AsyncIterator[Callable[[], Awaitable[Connection]]]:
    port = int(tokens.service.base.rsplit(":", 1)[1])
    opened: list[Connection] = []

    async def open_one() -> Connection:
        connection = Connection(*await asyncio.open_connection("127.0.0.1", port))
        opened.append(connection)
        return connection

    yield open_one
    for connection in opened:
        connection.writer.close()


async def test_keep_alive_serves_several_requests_on_one_connection(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    connection = await connect()
    for host, expected in ((CHURN_HOST, 200), (CHURN_HOST, 200), (FRAUD_HOST, 403)):
        await connection.send(nginx_request(tokens.churn, host))
        reply = await connection.reply()
        assert reply.status == expected
        assert reply.headers["connection"] == "keep-alive"
    await connection.send(nginx_request(tokens.churn, CHURN_HOST))
    reply = await connection.reply()
    assert reply.headers["x-inference-deployment"] == "acme/churn/production"


async def test_pipelined_requests_are_answered_in_order(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    """The first request needs PostgreSQL (a token never seen), the second is answered from
    memory at once, the third is a 404: still answered first, second, third."""
    connection = await connect()
    await connection.send(nginx_request(tokens.fraud, FRAUD_HOST))
    assert (await connection.reply()).status == 200  # fraud's token now decided from memory
    await connection.send(
        nginx_request(tokens.churn, CHURN_HOST)
        + nginx_request(tokens.fraud, FRAUD_HOST)
        + b"GET /elsewhere HTTP/1.1\r\nHost: auth\r\n\r\n"
        + nginx_request(tokens.churn, FRAUD_HOST)
    )
    replies = [await connection.reply() for _ in range(4)]
    assert [reply.status for reply in replies] == [200, 200, 404, 403]
    assert replies[0].headers["x-inference-deployment"] == "acme/churn/production"
    assert replies[1].headers["x-inference-deployment"] == "acme/fraud/production"


async def test_http_1_0_closes_unless_keep_alive_is_asked(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    connection = await connect()
    await connection.send(nginx_request(tokens.churn, CHURN_HOST, version="1.0"))
    reply = await connection.reply()
    assert (reply.status, reply.headers["connection"]) == (200, "close")
    assert await connection.closed()

    connection = await connect()
    for _ in range(2):
        await connection.send(
            nginx_request(
                tokens.churn, CHURN_HOST, version="1.0", extra="Connection: keep-alive\r\n"
            )
        )
        reply = await connection.reply()
        assert (reply.status, reply.headers["connection"]) == (200, "keep-alive")


async def test_connection_close_is_honoured_after_pending_answers(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    connection = await connect()
    await connection.send(
        nginx_request(tokens.churn, CHURN_HOST)
        + nginx_request(tokens.fraud, FRAUD_HOST, extra="Connection: close\r\n")
        + nginx_request(tokens.fraud, FRAUD_HOST)  # after a close: never answered
    )
    first, second = await connection.reply(), await connection.reply()
    assert (first.status, first.headers["connection"]) == (200, "keep-alive")
    assert (second.status, second.headers["connection"]) == (200, "close")
    assert await connection.closed()


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        pytest.param(
            f"GET {PATH} HTTP/1.1\r\nHost: auth\r\nX-Filler: {'a' * 20_000}\r\n\r\n".encode(),
            431,
            id="one-large-header",
        ),
        pytest.param(
            f"GET {PATH} HTTP/1.1\r\nHost: auth\r\n"
            + "".join(f"X-{i}: {'c' * 100}\r\n" for i in range(200))
            + "\r\n",
            431,
            id="many-headers",
        ),
        pytest.param(f"GET {PATH}?{'q' * 9000} HTTP/1.1\r\n\r\n".encode(), 414, id="long-url"),
        pytest.param(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400, id="bad-header"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, id="tls-hello"),
        pytest.param(b"GET /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, id="bad-length"),
    ],
)
async def test_bad_requests_are_4xx_and_closed(
    tokens: Tokens,
    connect: Callable[[], Awaitable[Connection]],
    request_bytes: bytes | str,
    expected: int,
) -> None:
    data = request_bytes.encode() if isinstance(request_bytes, str) else request_bytes
    connection = await connect()
    await connection.send(data)
    reply = await connection.reply()
    assert (reply.status, reply.headers["connection"]) == (expected, "close")
    assert await connection.closed()


async def test_a_header_section_sent_in_pieces_is_limited_too(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    connection = await connect()
    await connection.send(f"GET {PATH} HTTP/1.1\r\nX-Filler: ".encode())
    try:
        for _ in range(64):
            await connection.send(b"z" * 1024)
            await asyncio.sleep(0)
    except ConnectionError:
        pass  # closed after its answer: what it has sent is read below
    reply = await connection.reply()
    assert reply.status == 431
    assert await connection.closed()


async def test_routes_query_and_unknown_paths(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    connection = await connect()
    request = nginx_request(tokens.churn, CHURN_HOST).replace(
        CHURN_ROUTE.encode(), CHURN_ROUTE.encode() + b"?anything=1", 1
    )
    await connection.send(request)
    assert (await connection.reply()).status == 200  # the query string is ignored
    for path in (b"/", b"/internal/v1/inference-authx", b"/internal/v1/other"):
        await connection.send(b"GET " + path + b" HTTP/1.1\r\nHost: auth\r\n\r\n")
        reply = await connection.reply()
        assert (reply.status, reply.headers["connection"]) == (404, "keep-alive")


async def test_bodies_are_ignored_and_methods_any(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    connection = await connect()
    body = b'{"instances": [[1.0, 2.0]]}'
    envoy = (
        f"POST {CHURN_ROUTE}/v1/models/churn:predict HTTP/1.1\r\nHost: {CHURN_HOST}\r\n"
        f"Authorization: Bearer {tokens.churn}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    chunked = (
        f"PUT {CHURN_ROUTE}/x HTTP/1.1\r\nHost: {CHURN_HOST}\r\n"
        f"Authorization: Bearer {tokens.churn}\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n0\r\n\r\n"
    ).encode()
    await connection.send(envoy + body + chunked + b"DELETE / HTTP/1.1\r\n\r\n")
    replies = [await connection.reply() for _ in range(3)]
    assert [reply.status for reply in replies] == [200, 200, 404]


async def test_two_authorization_headers_are_refused(
    tokens: Tokens, connect: Callable[[], Awaitable[Connection]]
) -> None:
    connection = await connect()
    await connection.send(
        nginx_request(tokens.churn, CHURN_HOST, extra=f"authorization: Bearer {tokens.churn}\r\n")
    )
    reply = await connection.reply()
    assert (reply.status, reply.headers["www-authenticate"]) == (401, "Bearer")
    await connection.send(nginx_request(tokens.churn, CHURN_HOST))
    assert (await connection.reply()).status == 200
