"""The lean HTTP application of ``GET /internal/v1/inference-auth`` (docs/inference-auth.md).

Two forms of the same check:

- ingress-nginx ``auth-url`` / nginx ``auth_request``: ``/internal/v1/inference-auth`` exactly.
  The original host is the one in ``X-Original-URL`` (ingress-nginx sets it from the client's
  request and overwrites any the client sent; the subrequest's own ``Host`` is ours).
  ``X-Forwarded-Host`` is never read: ingress-nginx passes a client's through unchanged.
- Envoy HTTP ext_authz (Gateway API data planes): ``/internal/v1/inference-auth/<original
  path>`` with the original request's headers, so the original host is ``Host``
  (``:authority``). Any method: Envoy checks with the original one.

The application has no middleware and no access log, and never answers 5xx: anything
unexpected is a 401 (nginx would turn a 5xx into a 500 for the client). Bodies are empty, so
nothing tells which part of a request was wrong; no token is ever logged.
"""

from __future__ import annotations

import time
from typing import Any, Final

from aiohttp import hdrs, web

from inference_auth.check import UNAUTHORIZED, Checker, Decision
from inference_auth.metrics import CHECK_SECONDS, DECISIONS
from shared.logging import get_logger

log = get_logger(__name__)

AUTH_PATH: Final = "/internal/v1/inference-auth"
DEPLOYMENT_HEADER: Final = "X-Inference-Deployment"
ORIGINAL_URL: Final = "X-Original-URL"
CHECKER = web.AppKey("checker", Checker)


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


_COUNTERS: dict[tuple[str, str], Any] = {}


def _count(decision: Decision) -> None:
    key = (decision.outcome, decision.deployment)
    counter = _COUNTERS.get(key)
    if counter is None:
        if len(_COUNTERS) > 10_000:
            _COUNTERS.clear()
        counter = _COUNTERS[key] = DECISIONS.labels(*key)
    counter.inc()


def _answer(decision: Decision, started: float) -> web.Response:
    _count(decision)
    status = decision.status
    if status == 200:
        response = web.Response(headers={DEPLOYMENT_HEADER: decision.deployment})
    elif status == 401:
        response = web.Response(status=401, headers={hdrs.WWW_AUTHENTICATE: "Bearer"})
    elif status == 429:
        response = web.Response(status=429, headers={hdrs.RETRY_AFTER: "1"})
    else:
        response = web.Response(status=status)
    CHECK_SECONDS.observe(time.perf_counter() - started)
    return response


async def _decide(checker: Checker, authorization: str | None, host: str | None) -> Decision:
    try:
        return await checker.check(authorization, host)
    except Exception as exc:  # fail closed, never a 5xx
        log.warning("inference_auth_check_crashed", error=type(exc).__name__, exc_info=exc)
        return UNAUTHORIZED


def create_app(checker: Checker) -> web.Application:
    async def ingress_check(request: web.Request) -> web.Response:
        started = time.perf_counter()
        headers = request.headers
        decision = await _decide(
            checker, headers.get(hdrs.AUTHORIZATION), url_host(headers.get(ORIGINAL_URL))
        )
        return _answer(decision, started)

    async def envoy_check(request: web.Request) -> web.Response:
        started = time.perf_counter()
        headers = request.headers
        decision = await _decide(checker, headers.get(hdrs.AUTHORIZATION), headers.get(hdrs.HOST))
        return _answer(decision, started)

    app = web.Application()
    app[CHECKER] = checker
    app.router.add_route("*", AUTH_PATH, ingress_check)
    app.router.add_route("*", AUTH_PATH + "/{original_path:.*}", envoy_check)
    return app
