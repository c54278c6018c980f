"""The apiserver application: an app factory taking its dependencies as arguments."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from aiohttp import web

from apiserver import openapi
from apiserver.actions.routes import ROUTES as ACTION_ROUTES
from apiserver.artifacts.routes import ROUTES as ARTIFACT_ROUTES
from apiserver.auth import auth_middleware
from apiserver.clusters.routes import ROUTES as CLUSTER_ROUTES
from apiserver.grants.routes import ROUTES as GRANT_ROUTES
from apiserver.logs.routes import ROUTES as LOG_ROUTES
from apiserver.metrics import metrics_middleware
from apiserver.models.routes import ROUTES as MODEL_ROUTES
from apiserver.pipelines.routes import ROUTES as PIPELINE_ROUTES
from apiserver.routing import RouteSpec, access_of, add_routes
from apiserver.runs.routes import ROUTES as RUN_ROUTES
from apiserver.secrets.routes import ROUTES as SECRET_ROUTES
from apiserver.services import SERVICES, Services
from apiserver.stream.hub import StreamHub
from apiserver.stream.routes import HUB
from apiserver.stream.routes import ROUTES as STREAM_ROUTES
from apiserver.tracking.routes import ROUTES as TRACKING_ROUTES
from shared.web import error_middleware, request_id_header


def route_specs() -> list[RouteSpec]:
    """Every route, in the order the router tries them (static paths before templates)."""
    return [
        *STREAM_ROUTES,
        *RUN_ROUTES,
        *LOG_ROUTES,
        *ARTIFACT_ROUTES,
        *ACTION_ROUTES,
        *CLUSTER_ROUTES,
        *GRANT_ROUTES,
        *PIPELINE_ROUTES,
        *SECRET_ROUTES,
        *MODEL_ROUTES,
        *TRACKING_ROUTES,
        openapi.ROUTE,
    ]


def create_app(
    services: Services,
    hub: StreamHub,
    *,
    api_key: str | None,
    specs: Iterable[RouteSpec] | None = None,
) -> web.Application:
    """The application over ``services``; ``hub`` runs (LISTEN and fan-out) while it serves."""
    app = web.Application(
        middlewares=[
            metrics_middleware,
            error_middleware("apiserver"),
            auth_middleware(api_key=api_key, access_of=access_of),
        ],
        client_max_size=1024 * 1024,  # pipelines carry YAML; json_body limits others
    )
    app.on_response_prepare.append(request_id_header)
    app[SERVICES] = services
    app[HUB] = hub
    add_routes(app, route_specs() if specs is None else specs)

    async def hub_running(_: web.Application) -> AsyncIterator[None]:
        await hub.start()
        yield
        await hub.stop()

    async def close_streams(_: web.Application) -> None:
        # Before handlers are waited for: every SSE response ends now, not at the timeout.
        hub.close_subscribers()

    app.cleanup_ctx.append(hub_running)
    app.on_shutdown.append(close_streams)
    return app
