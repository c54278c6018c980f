"""The one middleware that turns errors into the JSON error shape (docs/api.md, "Errors").

``shared.errors`` types keep their status, code, message and details; aiohttp's own HTTP
errors (unknown path, wrong method, oversized body) get the same shape; anything else is logged
with the request id and answered as a bare 500 — never a stack trace.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from shared.errors import WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bind a request id; map every error to ``{"error", "message", "details"}``."""
    request_id = request.headers.get(REQUEST_ID_HEADER) or uuid.uuid4().hex
    request_id = request_id[:64]
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service="apiserver", request_id=request_id)
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
    if not response.prepared:
        response.headers[REQUEST_ID_HEADER] = request_id
    return response
