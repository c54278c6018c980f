"""The routes of ``GET /internal/v1/inference-auth`` and the decision behind them
(docs/inference-auth.md); served by protocol.py.

Two forms of the same check:

- ingress-nginx ``auth-url`` / nginx ``auth_request``: ``/internal/v1/inference-auth`` exactly.
  The original host is the one in ``X-Original-URL`` (ingress-nginx sets it from the client's
  request and overwrites any the client sent; the subrequest's own ``Host`` is ours).
  ``X-Forwarded-Host`` is never read: ingress-nginx passes a client's through unchanged.
- Envoy HTTP ext_authz (Gateway API data planes): ``/internal/v1/inference-auth/<original
  path>`` with the original request's headers, so the original host is ``Host``
  (``:authority``). Any method: Envoy checks with the original one.

It never answers 5xx: anything unexpected is a 401 (nginx would turn a 5xx into a 500 for the
client). Bodies are empty, so nothing tells which part of a request was wrong; no token is
ever logged.
"""

from __future__ import annotations

from typing import Final

from inference_auth.check import UNAUTHORIZED, Checker, Decision
from shared.logging import get_logger

log = get_logger(__name__)

AUTH_PATH: Final = "/internal/v1/inference-auth"
_ENVOY_PREFIX: Final = AUTH_PATH + "/"


class NoRoute:
    """``route``'s answer for a path that is no check (404)."""


NO_ROUTE: Final = NoRoute()


def route(target: str, *, original_url: str | None, host: str | None) -> str | NoRoute | None:
    """The original host a check at request target ``target`` is decided against (None when
    the request names none), or NO_ROUTE. The path alone is compared (a query is ignored).
    Every server of the check (protocol.py) routes through here."""
    query = target.find("?")
    path = target if query < 0 else target[:query]
    if path == AUTH_PATH:
        return url_host(original_url)
    if path.startswith(_ENVOY_PREFIX):
        return host
    return NO_ROUTE


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


async def decide(checker: Checker, authorization: str | None, host: str | None) -> Decision:
    """``Checker.check``, never failing: anything unexpected is a 401 (fail closed)."""
    try:
        return await checker.check(authorization, host)
    except Exception as exc:  # fail closed, never a 5xx
        log.warning("inference_auth_check_crashed", error=type(exc).__name__, exc_info=exc)
        return UNAUTHORIZED
