"""``GET /workflows/{cluster}/{ns}/{name}/logs/{node}``: the step's log, from its pod while the
pod exists (``follow=true`` streams until the step ends), else Argo's archived log in object
storage. The ``X-Log-Source`` header says which (``pod`` or ``archive``)."""

from __future__ import annotations

import re

from aiohttp import web

from apiserver.artifacts.locate import archived_log_location, checked_location, find_node
from apiserver.artifacts.routes import object_store, send_object
from apiserver.auth import Permission
from apiserver.logs.k8s_logs import pod_log
from apiserver.params import flag, query_params
from apiserver.routing import Param, RouteSpec
from apiserver.runs.routes import RUN_PATH, visible_run
from shared.errors import DependencyDown, Invalid, NotFound, WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)
_CONTAINER = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
TEXT = "text/plain; charset=utf-8"


async def logs(request: web.Request) -> web.StreamResponse:
    params = query_params(request, {"follow", "container"})
    follow = flag(params, "follow")
    container = (params.get("container") or ["main"])[0]
    if not _CONTAINER.fullmatch(container):
        raise Invalid("container: not a container name", details={"parameter": "container"})
    services, identity, row = await visible_run(request)
    graph = row["graph"] or {}
    node = find_node(graph, request.match_info["node"])
    pod = node.get("podName")
    if not isinstance(pod, str):
        raise NotFound(
            "the node runs no pod and has no log", details={"node": request.match_info["node"]}
        )
    cluster_down: DependencyDown | None = None
    if row["deleted_at"] is None:
        try:
            api = await services.connections.api(row["cluster_id"])
            async with pod_log(
                api, namespace=row["namespace"], pod=pod, container=container, follow=follow
            ) as chunks:
                response = web.StreamResponse(
                    headers={
                        "Content-Type": TEXT,
                        "X-Log-Source": "pod",
                        "Cache-Control": "no-cache",
                    }
                )
                await response.prepare(request)
                try:
                    async for chunk in chunks:
                        await response.write(chunk)
                except WorkflowManagerError as exc:
                    log.info("log_stream_ended", error=exc.code)
                await response.write_eof()
                return response
        except NotFound:
            pass  # the pod is gone: its archived log
        except DependencyDown as exc:
            cluster_down = exc
    try:
        location = archived_log_location(
            graph, node, workflow=row["name"], namespace=row["namespace"]
        )
        ref = checked_location(
            location,
            namespace=row["namespace"],
            bucket=services.artifact_bucket,
            admin=identity.admin and identity.tenant is None,
            what="log",
        )
        stored = await object_store(services).open(ref.bucket, ref.key)
    except NotFound:
        if cluster_down is not None:
            raise cluster_down from None
        raise
    return await send_object(
        request, stored, headers={"X-Log-Source": "archive", "Content-Type": TEXT}
    )


ROUTES = (
    RouteSpec(
        "GET",
        f"{RUN_PATH}/logs/{{node}}",
        logs,
        Permission.WORKFLOWS_READ,
        "A step's log: from its pod while it exists (follow=true streams), else archived.",
        "workflows",
        query=(
            Param("follow", "Stream until the step ends.", type="boolean"),
            Param(
                "container",
                "Container name (default main).",
                pattern=_CONTAINER.pattern,
                max_length=63,
            ),
        ),
        responses={200: "Text", 404: "Error", 503: "Error"},
        content_type="text/plain",
    ),
)
