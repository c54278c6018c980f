"""HTTP pieces every served API shares (the apiserver's public API, the compiler's internal one).

- ``error_middleware(service)``: the one middleware that turns errors into the JSON error shape
  (docs/api.md, "Errors"). ``shared.errors`` types keep their status, code, message and details;
  aiohttp's own HTTP errors (unknown path, wrong method, oversized body) get the same shape;
  anything else is logged with the request id and answered as a bare 500, never a stack trace.
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


async def _answer(request: web.Request, handler: Handler, request_id: str) -> web.StreamResponse:
    try:
        response = await handler(request)
    except WorkflowManagerError as exc:
        if exc.status >= 500:
            log.warning("request_failed", path=request.path, error=exc.code, reason=exc.message)
        response = web.json_response(exc.to_json(), status=exc.status)
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = "X-API-Key"
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        details: dict[str, Any] = {}
        if isinstance(exc, web.HTTPMethodNotAllowed):
            details["allowed"] = sorted(exc.allowed_methods)
        response = error_response(
            exc.status, _HTTP_CODES.get(exc.status, "http_error"), exc.reason, details
        )
    except Exception as exc:  # the last resort: logged in full, answered without internals
        log.error("request_crashed", path=request.path, exc_info=exc)
        response = error_response(500, "internal", "internal error", {"request_id": request_id})
    return response


def key_middleware(*, header: str, key: str | None) -> Middleware:
    """Refuse (401) every request whose ``header`` is not ``key``; with no key, refuse all."""
    expected = key.encode() if key else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get(header, "").encode()
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
    return body
