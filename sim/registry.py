"""A stand-in for kubeopera-api's cluster registry (the DESIGN.md contract), with control
routes and an in-process API so tests and the demo can add and remove clusters live."""

from __future__ import annotations

import hmac
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class ClusterRecord:
    """One registered cluster, as `GET /internal/v1/clusters` lists it."""

    id: str
    name: str
    region: str
    provider: str
    kubeconfig: str | None
    kube_system_uid: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ClusterRegistry:
    """The registered clusters, in registration order."""

    def __init__(self, records: list[ClusterRecord] | None = None) -> None:
        self._records: dict[str, ClusterRecord] = {r.id: r for r in records or []}

    def add(self, record: ClusterRecord) -> None:
        """Register or replace a cluster."""
        self._records[record.id] = record

    def remove(self, cluster_id: str) -> bool:
        """Unregister; False when it was not registered."""
        return self._records.pop(cluster_id, None) is not None

    def get(self, cluster_id: str) -> ClusterRecord | None:
        return self._records.get(cluster_id)

    def list(self) -> list[ClusterRecord]:
        return list(self._records.values())


REGISTRY = web.AppKey("registry", ClusterRegistry)
INTERNAL_KEY = web.AppKey("internal_key", str)
_FIELDS = ("name", "region", "provider", "kubeconfig", "kube_system_uid")


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message, "details": {}}, status=status)


def _authorised(request: web.Request) -> bool:
    given = request.headers.get("X-Internal-Key", "")
    return hmac.compare_digest(given.encode(), request.app[INTERNAL_KEY].encode())


async def list_clusters(request: web.Request) -> web.StreamResponse:
    if not _authorised(request):
        return _error(401, "unauthorized", "a valid X-Internal-Key header is required")
    return web.json_response([r.to_json() for r in request.app[REGISTRY].list()])


async def put_cluster(request: web.Request) -> web.StreamResponse:
    if not _authorised(request):
        return _error(401, "unauthorized", "a valid X-Internal-Key header is required")
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "invalid", "the body must be JSON")
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return _error(400, "invalid", "a cluster needs at least a name")
    values = {field: body.get(field) for field in _FIELDS}
    record = ClusterRecord(
        id=request.match_info["cluster_id"],
        name=str(values["name"]),
        region=str(values["region"] or ""),
        provider=str(values["provider"] or "sim"),
        kubeconfig=values["kubeconfig"] if isinstance(values["kubeconfig"], str) else None,
        kube_system_uid=(
            values["kube_system_uid"] if isinstance(values["kube_system_uid"], str) else None
        ),
    )
    request.app[REGISTRY].add(record)
    return web.json_response(record.to_json())


async def delete_cluster(request: web.Request) -> web.StreamResponse:
    if not _authorised(request):
        return _error(401, "unauthorized", "a valid X-Internal-Key header is required")
    if not request.app[REGISTRY].remove(request.match_info["cluster_id"]):
        return _error(404, "not_found", "no such cluster")
    return web.Response(status=204)


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


def create_app(registry: ClusterRegistry, *, internal_key: str) -> web.Application:
    """The registry's HTTP API over `registry`, guarded by `internal_key`."""
    app = web.Application()
    app[REGISTRY] = registry
    app[INTERNAL_KEY] = internal_key
    app.router.add_get("/internal/v1/clusters", list_clusters)
    app.router.add_put("/sim/clusters/{cluster_id}", put_cluster)
    app.router.add_delete("/sim/clusters/{cluster_id}", delete_cluster)
    app.router.add_get("/healthz", healthz)
    return app


@dataclass
class RunningRegistry:
    registry: ClusterRegistry
    url: str
    key: str
    runner: web.AppRunner

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_registry(
    registry: ClusterRegistry | None = None,
    *,
    internal_key: str,
    host: str = "127.0.0.1",
    port: int = 0,
) -> RunningRegistry:
    """Serve a registry on `host:port` (0 picks a free port)."""
    registry = registry or ClusterRegistry()
    runner = web.AppRunner(
        create_app(registry, internal_key=internal_key), access_log=None, handle_signals=False
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    return RunningRegistry(registry, f"http://{host}:{bound}", internal_key, runner)
