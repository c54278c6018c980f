"""Prometheus metrics of the apiserver (served on the side server's /metrics).

Labelled by the route's template (``/api/v1/workflows/{cluster}/{ns}/{name}``), never by the
concrete path, so cardinality stays bounded whatever callers send; unmatched paths count as
``unmatched``. Streams (SSE, followed logs) are counted, not timed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("wm_api_requests_total", "API requests answered", ["method", "route", "status"])
LATENCY = Histogram(
    "wm_api_request_seconds",
    "Time to answer an API request (streams excluded)",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)

STREAM_CAUGHT_UP = Gauge(
    "wm_api_stream_caught_up_timestamp_seconds",
    "When the SSE hub last read the change log to its end (Unix time; a pass runs on every "
    "change notification and every poll, 5 s by default): it falls behind the clock while the "
    "hub cannot read PostgreSQL or lags behind the changes",
)
STREAM_OVERFLOWS = Counter(
    "wm_api_stream_overflows_total",
    "SSE streams disconnected for falling a whole queue behind (their clients resume with "
    "Last-Event-ID)",
)
STREAM_SUBSCRIBERS = Gauge("wm_api_stream_subscribers", "SSE streams open on this replica")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: sees the final status, including the error middleware's answers."""
    started = time.perf_counter()
    status = 500
    streaming = False
    try:
        response = await handler(request)
        status = response.status
        streaming = not isinstance(response, web.Response)
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        route = _route(request)
        REQUESTS.labels(request.method, route, str(status)).inc()
        if not streaming:
            LATENCY.labels(request.method, route).observe(time.perf_counter() - started)
