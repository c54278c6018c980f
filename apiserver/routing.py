"""The route table: every route of the apiserver declared once, with the access it needs and
what the OpenAPI document says about it (``apiserver.openapi`` renders the same table)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from apiserver.auth import Access

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
API_PREFIX = "/api/v1"
INTERNAL_PREFIX = "/internal/v1"


@dataclass(frozen=True, slots=True)
class Param:
    """A query parameter as the OpenAPI document describes it."""

    name: str
    description: str
    type: str = "string"
    required: bool = False
    enum: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteSpec:
    method: str
    path: str  # full path with {placeholders}, e.g. /api/v1/workflows/{cluster}/{ns}/{name}
    handler: Handler
    access: Access
    summary: str
    tag: str
    query: tuple[Param, ...] = ()
    body: Mapping[str, Any] | None = None  # JSON schema of the request body
    responses: Mapping[int, str] = field(default_factory=dict)
    content_type: str = "application/json"  # of the 200/201/202 answer


ROUTE_SPEC = web.AppKey("route_specs", dict[tuple[str, str], RouteSpec])


def add_routes(app: web.Application, specs: Iterable[RouteSpec]) -> None:
    """Register ``specs`` and remember each route's access for the auth middleware."""
    table: dict[tuple[str, str], RouteSpec] = {}
    for spec in specs:
        app.router.add_route(spec.method, spec.path, spec.handler)
        table[(spec.method, spec.path)] = spec
    app[ROUTE_SPEC] = table


def access_of(request: web.Request) -> Access | None:
    """What the matched route needs; None for a path no route matches."""
    route = request.match_info.route
    resource = route.resource
    if resource is None:
        return None
    spec = request.app[ROUTE_SPEC].get((route.method, resource.canonical))
    if spec is None and request.method == "HEAD":
        spec = request.app[ROUTE_SPEC].get(("GET", resource.canonical))
    return None if spec is None else spec.access
