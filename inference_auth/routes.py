"""The routes of ``/internal/v1/inference-auth/<tenant>/<model>/<environment>`` and the
decision behind them (docs/inference-auth.md); served by http_server.py.

The deployment is the one the route names in the check's path (``shared.inference_routes``):
the platform writes it into each Ingress's ``auth-url`` and each SecurityPolicy's
``extAuth.http.path``; the client cannot change it. Two forms of the same check:

- ingress-nginx ``auth-url`` / nginx ``auth_request``: the path is the ``auth-url``'s, as
  written. The original host, a second opinion only, is the one in ``X-Original-URL``
  (ingress-nginx sets it from the client's ``Host`` and overwrites any the client sent; the
  subrequest's own ``Host`` is ours). ``X-Forwarded-Host`` is never read.
- Envoy HTTP ext_authz (Gateway API data planes): the configured path followed by the original
  path and query (ignored), with the original request's headers, so the original host is
  ``Host`` (``:authority``). Any method: Envoy checks with the original one.

``/internal/v1/inference-auth`` itself (or any path under it naming no deployment) is a 403
without a look-up. It never answers 5xx: anything unexpected is a 401 (nginx would turn a 5xx
into a 500 for the client). Bodies are empty, so nothing tells which part of a request was
wrong; no token is ever logged.
"""

from __future__ import annotations

from typing import Final

from inference_auth.check import UNAUTHORIZED, Checker, Decision
from shared.inference_routes import AUTH_PATH, deployment_of_path
from shared.logging import get_logger

log = get_logger(__name__)

__all__ = ["AUTH_PATH", "check_route", "decide", "url_host"]

_UNDER: Final = AUTH_PATH + "/"
_MAX_ROUTES: Final = 10_000
_MAX_ROUTE_KEY: Final = 200  # a longer one names no deployment anyway: not remembered
# The deployment segments of a check's target -> the deployment they name (None: none).
_ROUTES: dict[str, str | None] = {}


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


def _route_key(target: str) -> str:
    """The target up to the end of its third segment under AUTH_PATH (what names the
    deployment); Envoy's appended client path and any query are left out."""
    end = len(_UNDER)
    for _ in range(2):
        end = target.find("/", end) + 1
        if end == 0:
            return target
    for stop in "/?":
        index = target.find(stop, end)
        if index >= 0:
            return target[:index]
    return target


def check_route(
    target: str, *, original_url: str | None, host: str | None
) -> tuple[str | None, str | None] | None:
    """For a request to ``target`` (path and query as received): the deployment its route
    names (``tenant/model/environment``, None when none) and the original host to ask for a
    second opinion (``X-Original-URL``'s when sent, else ``Host``); None when ``target`` is
    not the check's (404)."""
    path = target.partition("?")[0]
    if path != AUTH_PATH and not path.startswith(_UNDER):
        return None
    original = url_host(original_url) if original_url is not None else host
    if path == AUTH_PATH:
        return None, original
    key = _route_key(target)
    try:
        deployment = _ROUTES[key]
    except KeyError:
        ref = deployment_of_path(key)
        deployment = None if ref is None else ref.name
        if len(key) <= _MAX_ROUTE_KEY:
            if len(_ROUTES) >= _MAX_ROUTES:
                _ROUTES.clear()
            _ROUTES[key] = deployment
    return deployment, original


async def decide(
    checker: Checker, authorization: str | None, *, deployment: str | None, host: str | None
) -> Decision:
    """``Checker.check``, never failing: anything unexpected is a 401 (fail closed)."""
    try:
        return await checker.check(authorization, deployment=deployment, host=host)
    except Exception as exc:  # fail closed, never a 5xx
        log.warning("inference_auth_check_crashed", error=type(exc).__name__, exc_info=exc)
        return UNAUTHORIZED
