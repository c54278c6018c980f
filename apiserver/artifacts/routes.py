"""``GET /workflows/{cluster}/{ns}/{name}/artifacts/{node}/{artifact}``."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from apiserver.artifacts.locate import artifact_location, checked_location, find_node
from apiserver.artifacts.objects import ObjectStore, StoredObject
from apiserver.auth import Permission
from apiserver.params import query_params
from apiserver.routing import RouteSpec
from apiserver.runs.routes import RUN_PATH, visible_run
from apiserver.services import Services
from shared.errors import DependencyDown


def object_store(services: Services) -> ObjectStore:
    if services.objects is None:
        raise DependencyDown(
            "object storage is not configured (ARTIFACT_BUCKET)",
            details={"dependency": "object_storage"},
        )
    return services.objects


async def send_object(
    request: web.Request, stored: StoredObject, *, headers: dict[str, str]
) -> web.StreamResponse:
    """Stream ``stored`` chunk by chunk with its type and length (never read whole)."""
    response = web.StreamResponse(headers={"Content-Type": stored.content_type, **headers})
    response.content_length = stored.length
    await response.prepare(request)
    async for chunk in stored.chunks:
        await response.write(chunk)
    await response.write_eof()
    return response


async def download(request: web.Request) -> web.StreamResponse:
    services, identity, row = await visible_run(request)
    query_params(request, set())
    name = request.match_info["artifact"]
    node = find_node(row["graph"] or {}, request.match_info["node"])
    ref = checked_location(
        artifact_location(node, name),
        namespace=row["namespace"],
        bucket=services.artifact_bucket,
        admin=identity.admin and identity.tenant is None,
    )
    stored = await object_store(services).open(ref.bucket, ref.key)
    filename = ref.key.rsplit("/", 1)[-1] or name
    return await send_object(
        request,
        stored,
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}"},
    )


ROUTES = (
    RouteSpec(
        "GET",
        f"{RUN_PATH}/artifacts/{{node}}/{{artifact}}",
        download,
        Permission.WORKFLOWS_READ,
        "Download a step's output artifact, streamed from object storage.",
        "workflows",
        responses={200: "Binary", 403: "Error", 404: "Error", 503: "Error"},
        content_type="*/*",  # the object's own Content-Type
    ),
)
