"""``GET /workflow-clusters`` and ``POST /internal/v1/clusters/refresh``."""

from __future__ import annotations

from aiohttp import web

from apiserver.auth import Permission, Special
from apiserver.params import query_params
from apiserver.routing import API_PREFIX, INTERNAL_PREFIX, Param, RouteSpec
from apiserver.runs.query import iso
from apiserver.services import SERVICES


async def list_clusters(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    query_params(request, set())
    rows = await services.clusters.watched()
    return web.json_response(
        {
            "items": [
                {
                    "id": row.id,
                    "name": row.name,
                    "region": row.region,
                    "provider": row.provider,
                    "host": row.is_host,
                    "registered": row.registered,
                    "argo": {
                        "reachable": row.argo_reachable,
                        "version": row.argo_version,
                        "last_event_at": iso(row.last_event_at),
                    },
                }
                for row in rows
            ]
        }
    )


async def refresh(request: web.Request) -> web.Response:
    """Relay to the watcher (NOTIFY) and re-read the registry on this replica's next use."""
    services = request.app[SERVICES]
    await services.clusters.request_refresh()
    await services.connections.invalidate()
    return web.json_response({"refresh": "requested"}, status=202)


ROUTES = (
    RouteSpec(
        "GET",
        f"{API_PREFIX}/workflow-clusters",
        list_clusters,
        Permission.WORKFLOWS_READ,
        "Watched clusters and their Argo status.",
        "clusters",
        query=(Param("acting_tenant", "An administrator acting for this tenant."),),
        responses={200: "ClusterList"},
    ),
    RouteSpec(
        "POST",
        f"{INTERNAL_PREFIX}/clusters/refresh",
        refresh,
        Special.INTERNAL,
        "kubeopera-api's signal that clusters changed: the watcher re-reads the registry.",
        "internal",
        responses={202: "RefreshAccepted", 503: "Error"},
    ),
)
