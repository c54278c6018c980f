"""Malformed requests to the real deployable, as raw bytes: each is a clear 4xx (the JSON error
shape wherever the application gets to answer) and one log line, never a traceback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.integration.apiserver.conftest import API_KEY, Process

AUTH = f"X-API-Key: {API_KEY}\r\nX-Kubeopera-Admin: true\r\n".encode()
GRANTS = b"POST /api/v1/access-grants HTTP/1.1\r\nContent-Type: application/json\r\n"


def request(head: bytes, *, headers: bytes = AUTH, body: bytes = b"") -> bytes:
    length = f"Content-Length: {len(body)}\r\n".encode() if body else b""
    return head + b"Host: test\r\nConnection: close\r\n" + headers + length + b"\r\n" + body


# (what, raw request, status, whether the application answered it: the JSON error shape)
CASES: list[tuple[str, bytes, int, bool]] = [
    (
        "a NUL byte in a header value",
        request(b"GET /api/v1/workflows HTTP/1.1\r\n", headers=AUTH + b"X-Note: a\x00b\r\n"),
        400,
        False,
    ),
    (
        "a raw non-UTF-8 byte in the path",
        request(b"GET /api/v1/workflows/\xff HTTP/1.1\r\n"),
        400,
        False,
    ),
    (
        "a raw non-UTF-8 byte in the query",
        request(b"GET /api/v1/workflows?q=\xff HTTP/1.1\r\n"),
        400,
        False,
    ),
    (
        "an over-long header",
        request(
            b"GET /api/v1/workflows HTTP/1.1\r\n",
            headers=AUTH + b"X-Long: " + b"a" * 9000 + b"\r\n",
        ),
        400,
        False,
    ),
    (
        "percent-encoded non-UTF-8 in the path",
        request(b"GET /api/v1/workflows/c1/%ff%fe/run-1 HTTP/1.1\r\n"),
        400,
        True,
    ),
    (
        "a percent-encoded NUL in the path",
        request(b"GET /api/v1/workflows/c%001/ns/r HTTP/1.1\r\n"),
        400,
        True,
    ),
    (
        "percent-encoded non-UTF-8 in the query",
        request(b"GET /api/v1/workflows?q=%ff HTTP/1.1\r\n"),
        400,
        True,
    ),
    (
        "a percent-encoded surrogate in the query",
        request(b"GET /api/v1/workflows?cluster=%ED%A0%80 HTTP/1.1\r\n"),
        400,
        True,
    ),
    (
        "malformed percent-encoding in the query",
        request(b"GET /api/v1/workflows?q=%zz HTTP/1.1\r\n"),
        400,
        True,
    ),
    (
        "a percent-encoded NUL in the query",
        request(b"GET /api/v1/access-grants?tenant=a%00 HTTP/1.1\r\n"),
        400,
        True,
    ),
    ("a body that is not UTF-8", request(GRANTS, body=b'{"tenant": "\xff\xfe"}'), 400, True),
    (
        "a lone surrogate in a JSON string",
        request(GRANTS, body=b'{"tenant": "acme", "cluster_id": "\\ud800", "namespace": "n"}'),
        400,
        True,
    ),
    (
        "a NUL in a JSON string",
        request(GRANTS, body=b'{"tenant": "acme", "cluster_id": "c\\u0000", "namespace": "n"}'),
        400,
        True,
    ),
    (
        "identity header bytes that are not UTF-8",
        request(GRANTS, headers=AUTH + b"X-Kubeopera-Actor: \xff\xfe\r\n", body=b"{}"),
        400,
        True,
    ),
    (
        "a method the route does not have",
        request(b"PATCH /api/v1/workflows HTTP/1.1\r\n"),
        405,
        True,
    ),
]


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)  # Connection: close
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


async def marker(process: Process, index: int, *, after: int) -> int:
    """A request known to log exactly one line (an unknown query parameter); the index of that
    line. Everything the previous request logged comes before it."""
    name = f"marker-{index}"
    status, _, _ = await exchange(
        process.port, request(f"GET /api/v1/workflows?{name}=1 HTTP/1.1\r\n".encode())
    )
    assert status == 400
    return await process.line_where(lambda line: line.get("parameter") == name, after=after)


@pytest.mark.timeout(60)
async def test_malformed_requests_are_a_4xx_and_one_log_line(
    apiserver_process: Process,
) -> None:
    process = apiserver_process
    last = await marker(process, 0, after=0)
    for index, (what, raw, status, by_the_app) in enumerate(CASES, start=1):
        got, headers, body = await exchange(process.port, raw)
        assert got == status, (what, body[:200])
        if by_the_app:
            assert headers["content-type"].startswith("application/json"), what
            error: dict[str, Any] = json.loads(body)
            assert set(error) == {"error", "message", "details"}, what
            assert "x-request-id" in headers, what
        if status == 405:
            assert headers["allow"] == "GET", what
        next_marker = await marker(process, index, after=last + 1)
        logged = process.lines[last + 1 : next_marker]
        assert len(logged) == 1, (what, logged)
        assert json.loads(logged[0])["level"] == "info", what
        last = next_marker
    assert not any("Traceback" in line for line in process.lines)
    for line in process.lines:
        json.loads(line)  # every line one JSON object: nothing multi-line


async def test_a_key_that_is_not_utf8_is_a_401(apiserver_process: Process) -> None:
    raw = request(b"GET /api/v1/workflows HTTP/1.1\r\n", headers=b"X-API-Key: \xff\xfe\r\n")
    status, _, body = await exchange(apiserver_process.port, raw)
    assert status == 401, body
    assert json.loads(body)["error"] == "unauthorized"
    assert not any("Traceback" in line for line in apiserver_process.lines)
