"""``GET /workflows``, ``/workflows/summary`` and ``/workflows/{cluster}/{ns}/{name}``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp import web

from apiserver.auth import Identity, Permission, identity_of
from apiserver.params import query_params
from apiserver.routing import API_PREFIX, PAGE, Param, RouteSpec
from apiserver.runs.pg_runs import Row, action_item, notification_item
from apiserver.runs.query import (
    AFTER_PARAM,
    BEFORE_PARAM,
    FILTER_PARAMS,
    MAX_TEXT_LENGTH,
    PAGE_PARAMS,
    TEXT_PARAM,
    Cursor,
    iso,
    next_cursor,
    parse_filters,
    parse_page,
    run_item,
)
from apiserver.scope import Scope
from apiserver.services import SERVICES, Services
from shared.errors import NotFound
from shared.runs import RunPhase

FILTER_DOCS: tuple[Param, ...] = (
    Param("cluster", "Cluster ids (comma-separated or repeated)."),
    Param("region", "Regions of the clusters."),
    Param("provider", "Providers of the clusters."),
    Param("phase", "Phases: Pending, Running, Succeeded, Failed, Error, Unknown."),
    Param(
        "source",
        "Sources: pipeline, ml_pipeline, schedule, event_trigger, template_submit, cicd, manual.",
    ),
    Param("template", "WorkflowTemplate names."),
    Param("pipeline", "Pipeline ids."),
    Param("namespace", "Namespaces."),
    Param(
        TEXT_PARAM,
        "Free text: a substring of the name, namespace, template or pipeline id.",
        max_length=MAX_TEXT_LENGTH,
    ),
    Param(
        AFTER_PARAM,
        "Runs started (or, pending, created) at or after this RFC 3339 time.",
        format="date-time",
    ),
    Param(
        BEFORE_PARAM,
        "Runs started (or, pending, created) before this RFC 3339 time.",
        format="date-time",
    ),
    Param("acting_tenant", "An administrator acting for this tenant."),
)
PAGE_DOCS: tuple[Param, ...] = (
    *PAGE,
    Param("order", "By start time: desc (default, newest first) or asc.", enum=("asc", "desc")),
)


async def _scope(services: Services, identity: Identity) -> Scope:
    return await services.runs.scope_of(identity)


async def list_runs(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    params = query_params(request, FILTER_PARAMS | PAGE_PARAMS)
    filters = parse_filters(params)
    page = parse_page(params, filters, codec=services.cursors, tenant=identity.tenant)
    scope = await _scope(services, identity)
    result = await services.runs.page(filters, scope, page)
    rows = list(result.rows[: page.limit])
    cursor = None
    if len(result.rows) > page.limit:
        last = rows[-1]
        cursor = next_cursor(
            Cursor(sort_at=last["sort_at"], id=last["id"]),
            filters,
            page,
            codec=services.cursors,
            tenant=identity.tenant,
        )
    return web.json_response(
        {
            "items": [run_item(row) for row in rows],
            "next_cursor": cursor,
            "total": result.total,
            "total_capped": result.capped,
        }
    )


async def summary(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    params = query_params(request, FILTER_PARAMS)
    filters = parse_filters(params)
    scope = await _scope(services, identity_of(request))
    since = services.clock() - timedelta(hours=24)
    rows = await services.runs.summary(filters, scope, since=since)
    phases = {phase.value: 0 for phase in RunPhase}
    failures = 0
    for row in rows:
        phases[row["phase"]] = phases.get(row["phase"], 0) + int(row["runs"])
        failures += int(row["failures"])
    return web.json_response(
        {
            "phases": phases,
            "total": sum(phases.values()),
            "failures_last_24h": failures,
            "since": iso(since),
        }
    )


async def visible_run(request: web.Request) -> tuple[Services, Identity, Row]:
    """The run the path names, if the caller may see it; NotFound otherwise (never 403)."""
    services = request.app[SERVICES]
    identity = identity_of(request)
    cluster_id = request.match_info["cluster"]
    namespace = request.match_info["ns"]
    name = request.match_info["name"]
    if await services.clusters.get(cluster_id) is None:
        raise NotFound(f"no cluster {cluster_id!r}", details={"cluster": cluster_id})
    scope = await _scope(services, identity)
    row = await services.runs.find(scope, cluster_id=cluster_id, namespace=namespace, name=name)
    if row is None:
        raise NotFound(
            f"no run {namespace}/{name} on cluster {cluster_id}",
            details={"cluster": cluster_id, "namespace": namespace, "name": name},
        )
    return services, identity, row


async def detail(request: web.Request) -> web.Response:
    services, _, row = await visible_run(request)
    query_params(request, set())
    actions = await services.runs.actions(
        cluster_id=row["cluster_id"], namespace=row["namespace"], name=row["name"]
    )
    body: dict[str, Any] = run_item(row)
    body["labels"] = row["labels"] or {}
    body["graph"] = row["graph"] or {}
    body["actions"] = [action_item(action) for action in actions]
    deliveries = await services.runs.notifications(cluster_id=row["cluster_id"], run_uid=row["uid"])
    body["notifications"] = [notification_item(delivery) for delivery in deliveries]
    return web.json_response(body)


RUN_PATH = f"{API_PREFIX}/workflows/{{cluster}}/{{ns}}/{{name}}"
ROUTES = (
    RouteSpec(
        "GET",
        f"{API_PREFIX}/workflows",
        list_runs,
        Permission.WORKFLOWS_READ,
        "Runs across clusters, filtered, newest first, keyset-paginated.",
        "workflows",
        query=FILTER_DOCS + PAGE_DOCS,
        responses={200: "RunPage", 400: "Error"},
    ),
    RouteSpec(
        "GET",
        f"{API_PREFIX}/workflows/summary",
        summary,
        Permission.WORKFLOWS_READ,
        "Counts by phase and failures in the last 24 hours (same filters as the list).",
        "workflows",
        query=FILTER_DOCS,
        responses={200: "RunSummary", 400: "Error"},
    ),
    RouteSpec(
        "GET",
        RUN_PATH,
        detail,
        Permission.WORKFLOWS_READ,
        "A run with its graph, action history and notification deliveries.",
        "workflows",
        query=(FILTER_DOCS[-1],),
        responses={200: "RunDetail", 404: "Error"},
    ),
)
