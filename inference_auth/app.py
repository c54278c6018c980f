"""The lean HTTP application of ``GET /internal/v1/inference-auth`` (docs/inference-auth.md).

Two forms of the same check:

- ingress-nginx ``auth-url`` / nginx ``auth_request``: ``/internal/v1/inference-auth`` exactly.
  The original host is the one in ``X-Original-URL`` (ingress-nginx sets it from the client's
  request and overwrites any the client sent; the subrequest's own ``Host`` is ours).
  ``X-Forwarded-Host`` is never read: ingress-nginx passes a client's through unchanged.
- Envoy HTTP ext_authz (Gateway API data planes): ``/internal/v1/inference-auth/<original
  path>`` with the original request's headers, so the original host is ``Host``
  (``:authority``). Any method: Envoy checks with the original one.

It is served by aiohttp's low-level server (no router, middleware or access log) and never
answers 5xx: anything unexpected is a 401 (nginx would turn a 5xx into a 500 for the client).
Bodies are empty, so nothing tells which part of a request was wrong; no token is ever logged.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import hdrs, web

from inference_auth.check import UNAUTHORIZED, Checker, Decision
from inference_auth.metrics import STATS
from shared.logging import get_logger

log = get_logger(__name__)

AUTH_PATH: Final = "/internal/v1/inference-auth"
DEPLOYMENT_HEADER: Final = "X-Inference-Deployment"
ORIGINAL_URL: Final = "X-Original-URL"


def url_host(url: str | None) -> str | None:
    """The authority of ``scheme://authority/...`` (None when absent or with userinfo)."""
    if url is None:
        return None
    start = url.find("://")
    if start < 0:
        return None
    start += 3
    end = len(url)
    for stop in "/?#":
        index = url.find(stop, start, end)
        if index >= 0:
            end = index
    authority = url[start:end]
    if not authority or "@" in authority:
        return None
    return authority


def _answer(decision: Decision, started: float) -> web.Response:
    status = decision.status
    if status == 200:
        response = web.Response(headers={DEPLOYMENT_HEADER: decision.deployment})
    elif status == 401:
        response = web.Response(status=401, headers={hdrs.WWW_AUTHENTICATE: "Bearer"})
    elif status == 429:
        response = web.Response(status=429, headers={hdrs.RETRY_AFTER: "1"})
    else:
        response = web.Response(status=status)
    STATS.record(decision.outcome, decision.deployment, time.perf_counter() - started)
    return response


async def _decide(checker: Checker, authorization: str | None, host: str | None) -> Decision:
    try:
        return await checker.check(authorization, host)
    except Exception as exc:  # fail closed, never a 5xx
        log.warning("inference_auth_check_crashed", error=type(exc).__name__, exc_info=exc)
        return UNAUTHORIZED


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def create_handler(checker: Checker) -> Handler:
    """The check as a handler for aiohttp's low-level server (``web.Server``): this hot path
    takes no router, application or middleware step, only the path comparison below."""
    envoy_prefix = AUTH_PATH + "/"

    async def check(request: web.BaseRequest) -> web.StreamResponse:
        started = time.perf_counter()
        headers = request.headers
        # The raw target, not request.path (which builds and decodes a URL object per request):
        # the exact form of our own route, or our prefix (Envoy appends the original path).
        path = request.raw_path
        if path == AUTH_PATH:
            host = url_host(headers.get(ORIGINAL_URL))
        elif path.startswith(envoy_prefix):
            host = headers.get(hdrs.HOST)
        else:
            return web.Response(status=404)
        decision = await _decide(checker, headers.get(hdrs.AUTHORIZATION), host)
        return _answer(decision, started)

    return check
