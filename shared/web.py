"""HTTP pieces every served API shares (the apiserver's public API, the compiler's internal one).

- ``error_middleware(service)``: the one middleware that turns errors into the JSON error shape
  (docs/api.md, "Errors"). ``shared.errors`` types keep their status, code, message and details;
  aiohttp's own HTTP errors (unknown path, wrong method with its ``Allow``, oversized body) get
  the same shape; anything else is logged with the request id and answered as a bare 500, never
  a stack trace. A request refused as malformed (400, 405, 413, 415) is one log line.
- ``request_id_header``: the ``on_response_prepare`` signal that puts the request id on every
  answer, streamed ones included (a handler prepares its stream before the middleware sees it).
- ``json_body``: the request's JSON object, size-limited, every failure ``Invalid``.
- ``key_middleware``: a shared key checked in constant time before any handler runs.
"""

from __future__ import annotations

import hmac
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from shared.errors import Invalid, Unauthorized, WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
# A caller's id is echoed only when it is plain visible ASCII (it goes into logs and headers).
_CALLER_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,64}")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 256 * 1024

_HTTP_CODES = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
}
# What PostgreSQL cannot store and no name or value of ours holds: a NUL, or a lone surrogate
# (from a JSON escape such as "\ud800", or a header's non-UTF-8 bytes).
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")
# Answers that say the request itself was malformed: worth a line (other 4xx are routine).
_LOGGED_REFUSALS = frozenset({400, 405, 413, 415})


def error_response(
    status: int, code: str, message: str, details: dict[str, Any] | None = None
) -> web.Response:
    return web.json_response(
        {"error": code, "message": message, "details": details or {}}, status=status
    )


def error_middleware(service: str) -> Middleware:
    """Bind a request id; map every error to ``{"error", "message", "details"}``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = given if _CALLER_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        request[REQUEST_ID] = request_id
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(service=service, request_id=request_id)
        return await _answer(request, handler, request_id)

    return middleware


async def request_id_header(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the request id on every answer the error middleware saw."""
    request_id = request.get(REQUEST_ID)
    if request_id is not None:
        response.headers.setdefault(REQUEST_ID_HEADER, request_id)


def _refused(request: web.Request, status: int, code: str, details: dict[str, Any]) -> None:
    if status in _LOGGED_REFUSALS:
        log.info(
            "request_refused",
            method=request.method,
            path=request.path[:256],
            status=status,
            error=code,
            parameter=details.get("parameter"),
        )


async def _answer(request: web.Request, handler: Handler, request_id: str) -> web.StreamResponse:
    try:
        response = await handler(request)
    except WorkflowManagerError as exc:
        if exc.status >= 500:
            log.warning("request_failed", path=request.path, error=exc.code, reason=exc.message)
        _refused(request, exc.status, exc.code, exc.details)
        response = web.json_response(exc.to_json(), status=exc.status)
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = "X-API-Key"
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        details: dict[str, Any] = {}
        code = _HTTP_CODES.get(exc.status, "http_error")
        if isinstance(exc, web.HTTPMethodNotAllowed):
            details["allowed"] = sorted(exc.allowed_methods)
        _refused(request, exc.status, code, details)
        response = error_response(exc.status, code, exc.reason, details)
        if "allowed" in details:  # RFC 9110: a 405 names the methods the resource has
            response.headers["Allow"] = ", ".join(details["allowed"])
    except Exception as exc:  # the last resort: logged in full, answered without internals
        log.error("request_crashed", path=request.path, exc_info=exc)
        response = error_response(500, "internal", "internal error", {"request_id": request_id})
    return response


def is_text(value: str) -> bool:
    """Whether ``value`` is storable text: no NUL, no lone surrogate. Purely computational."""
    return _NOT_TEXT.search(value) is None


def header_bytes(value: str) -> bytes:
    """A header's bytes as the client sent them (aiohttp decodes them as UTF-8 with
    surrogateescape, so any bytes round-trip; ``str.encode()`` would raise on them)."""
    return value.encode("utf-8", "surrogateescape")


def _check_text(value: Any, where: str) -> None:
    if isinstance(value, str):
        if not is_text(value):
            raise Invalid(
                f"{where}: a string holds a NUL or a lone surrogate",
                details={"parameter": where},
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where)
            _check_text(item, f"{where}.{key}" if is_text(key) else where)
    elif isinstance(value, list):
        for item in value:
            _check_text(item, where)


def key_middleware(*, header: str, key: str | None) -> Middleware:
    """Refuse (401) every request whose ``header`` is not ``key``; with no key, refuse all."""
    expected = key.encode() if key else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = header_bytes(request.headers.get(header, ""))
        if expected is None or not hmac.compare_digest(given, expected):
            raise Unauthorized(f"a valid {header} header is required")
        return await handler(request)

    return middleware


async def json_body(
    request: web.Request, *, required: bool = True, max_body: int = MAX_BODY
) -> dict[str, Any]:
    """The JSON object in the body (an empty body is ``{}`` when not required)."""
    if request.content_length is not None and request.content_length > max_body:
        raise Invalid("the body is too large", details={"limit": max_body})
    raw = await request.content.read(max_body + 1)
    if len(raw) > max_body:
        raise Invalid("the body is too large", details={"limit": max_body})
    if not raw.strip():
        if required:
            raise Invalid("a JSON body is required", details={"parameter": "body"})
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Invalid("the body is not valid JSON", details={"parameter": "body"}) from None
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object", details={"parameter": "body"})
    _check_text(body, "body")
    return body
