"""``/data-pipelines`` and ``/ml-pipelines``: the same routes for both kinds.

Reads (list, read, versions) go through the pipelines repository the compiler writes with
(``shared.db.pipelines``), scoped to the caller's tenant (an administrator not acting for a
tenant sees every tenant's); another tenant's pipeline is indistinguishable from a missing one.
Everything that renders, checks or applies (validate, create, update, delete, rollback, run,
a Git sync) goes to the compiler's internal API with the effective tenant and the actor; a body
is first checked here with the compiler's own model (``shared.pipelines``), so a malformed one
never leaves the apiserver. Writing needs a tenant, so an administrator writes through
``acting_tenant``. A webhook trigger's token is read and rotated through the compiler too, with
``pipelines.write``: it is a credential that starts runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from apiserver.auth import Identity, Permission, identity_of
from apiserver.paging import parse_cursor, parse_limit
from apiserver.params import query_params
from apiserver.pipelines.release_schema import RELEASE_SCHEMA
from apiserver.routing import API_PREFIX, PAGE, Param, RouteSpec
from apiserver.runs.query import iso
from apiserver.services import SERVICES, Services
from shared import cursors
from shared.db.git_sources import GitSourceRow
from shared.db.pipelines import PipelineRow, VersionRow
from shared.errors import DependencyDown, Invalid, NotFound
from shared.identifiers import PIPELINE_ID, TRIGGER_NAME_PATTERN
from shared.logging import get_logger
from shared.pipelines import MAX_TRIGGERS, PipelineKind, Schedule, parse_body
from shared.schedules import ScheduleError, next_fire_times, parse_cron, time_zone
from shared.web import json_body

log = get_logger(__name__)

MAX_BODY: Final = 1024 * 1024
MAX_QUERY: Final = 100
NEXT_RUNS: Final = 5  # fire times a scheduled pipeline shows
_KINDS: Final[Mapping[str, PipelineKind]] = {"data-pipelines": "data", "ml-pipelines": "ml"}


def _kind(request: web.Request) -> PipelineKind:
    return _KINDS[request.path.removeprefix(f"{API_PREFIX}/").split("/", 1)[0]]


def _pipeline_id(request: web.Request) -> str:
    pipeline_id = request.match_info["id"]
    if not PIPELINE_ID.fullmatch(pipeline_id):
        raise NotFound(f"no pipeline {pipeline_id!r}", details={"id": pipeline_id})
    return pipeline_id


def _writer(identity: Identity) -> str:
    if identity.tenant is None:
        raise Invalid(
            "an administrator writes pipelines for one tenant: give acting_tenant",
            details={"parameter": "acting_tenant"},
        )
    return identity.tenant


def _pipeline_item(row: PipelineRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "tenant": row.tenant,
        "kind": row.kind,
        "name": row.name,
        "description": row.description,
        "definition_type": row.definition_type,
        "current_version": row.current_version,
        "latest_version": row.latest_version,
        "created_by": row.created_by,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def _version_item(row: VersionRow) -> dict[str, Any]:
    return {
        "version": row.version,
        "template_name": row.template_name,
        "template_applied": row.template_removed_at is None,
        "parameters": row.parameters,
        "created_by": row.created_by,
        "created_at": iso(row.created_at),
        "definition": row.definition,
        "template": row.template,
        "commit": row.commit,
        # The ML control stages its template contains and the release it was saved with.
        "stages": row.stages,
        "release": row.settings.get("release"),
    }


def _git_item(row: GitSourceRow) -> dict[str, Any]:
    """What Git sync last found: never a credential (the body names a data secret only)."""
    definition = row.definition
    return {
        "repository": definition.get("repository"),
        "branch": definition.get("branch"),
        "path": definition.get("path"),
        "last_good_commit": row.last_good_commit,
        "last_seen_commit": row.last_seen_commit,
        "last_error": (
            None
            if row.last_error is None
            else {
                "reason": row.last_error_reason,
                "message": row.last_error,
                "commit": row.last_error_commit,
                "since": iso(row.last_error_at) if row.last_error_at else None,
            }
        ),
        "checked_at": iso(row.checked_at) if row.checked_at else None,
    }


async def _visible(services: Services, identity: Identity, request: web.Request) -> PipelineRow:
    kind, pipeline_id = _kind(request), _pipeline_id(request)
    row = await services.pipelines.find(kind, pipeline_id, tenant=identity.tenant)
    if row is None:
        raise NotFound(f"no {kind} pipeline {pipeline_id!r}", details={"id": pipeline_id})
    return row


# --- reads -------------------------------------------------------------------------------------
async def list_pipelines(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    params = query_params(request, {"limit", "cursor", "q"})
    limit = parse_limit(params.get("limit"))
    text = (params.get("q") or [""])[0].strip()
    if len(text) > MAX_QUERY:
        raise Invalid(f"q: at most {MAX_QUERY} characters", details={"parameter": "q"})
    bound_to = cursors.binding(request.path, tenant=identity.tenant, filters=text)
    after = parse_cursor(
        services.cursors, params.get("cursor"), bound_to=bound_to, shape=(str, str)
    )
    page = await services.pipelines.page(
        _kind(request),
        tenant=identity.tenant,
        name_contains=text,
        after=(str(after[0]), str(after[1])) if after else None,
        limit=limit,
    )
    rows = page.rows[:limit]
    cursor = None
    if len(page.rows) > limit:
        cursor = services.cursors.encode((rows[-1].name, rows[-1].id), bound_to=bound_to)
    return web.json_response(
        {"items": [_pipeline_item(row) for row in rows], "next_cursor": cursor, "total": page.total}
    )


async def read_pipeline(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    query_params(request, set())
    identity = identity_of(request)
    pipeline = await _visible(services, identity, request)
    version = await services.pipelines.version(pipeline.id, pipeline.current_version)
    item = _pipeline_item(pipeline)
    item["current"] = _version_item(version) if version is not None else None
    recorded = (version.settings if version is not None else {}).get("schedule")
    item["schedule"] = await _schedule(request, pipeline, recorded) if recorded else None
    if pipeline.definition_type == "git":
        source = await services.pipelines.git_source(pipeline.id)
        item["git"] = _git_item(source) if source is not None else None
    return web.json_response(item)


async def _schedule(
    request: web.Request, pipeline: PipelineRow, recorded: dict[str, Any]
) -> dict[str, Any]:
    """The current version's schedule, its CronWorkflow's state as the compiler reads it from
    the cluster (``paused`` null when the compiler cannot say), and the next fire times in the
    schedule's zone while it is neither suspended nor paused."""
    services = request.app[SERVICES]
    schedule = Schedule.model_validate(recorded)
    view: dict[str, Any] = {**schedule.model_dump(mode="json"), "paused": None}
    if services.compiler is not None:
        body = {"tenant": pipeline.tenant, "actor": identity_of(request).actor}
        path = f"{pipeline.kind}/{pipeline.id}/schedule"
        try:
            state = await services.compiler.call("POST", path, body)
        except (DependencyDown, NotFound) as down:
            log.warning("schedule_state_unavailable", pipeline=pipeline.id, reason=down.message)
        else:
            view.update({key: value for key, value in state.items() if key != "id"})
    view["next_runs"] = []
    if not schedule.suspended and not view["paused"]:
        try:
            zone = time_zone(schedule.timezone)
            crons = [parse_cron(text) for text in schedule.cron]
        except ScheduleError:  # checked when saved; a zone the database has since dropped
            return view
        view["next_runs"] = [
            moment.isoformat()
            for moment in next_fire_times(crons, zone, services.clock(), NEXT_RUNS)
        ]
    return view


async def list_versions(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    params = query_params(request, {"limit", "cursor"})
    limit = parse_limit(params.get("limit"))
    pipeline = await _visible(services, identity, request)
    bound_to = cursors.binding(request.path, tenant=identity.tenant)
    after = parse_cursor(services.cursors, params.get("cursor"), bound_to=bound_to, shape=(int,))
    rows = await services.pipelines.versions(
        pipeline.id, before=int(after[0]) if after else None, limit=limit
    )
    items = []
    for row in rows[:limit]:
        item = _version_item(row)
        item["current"] = row.version == pipeline.current_version
        items.append(item)
    cursor = None
    if len(rows) > limit:
        cursor = services.cursors.encode((rows[limit - 1].version,), bound_to=bound_to)
    return web.json_response(
        {"items": items, "next_cursor": cursor, "total": pipeline.latest_version}
    )


# --- through the compiler ----------------------------------------------------------------------
async def _compile(
    request: web.Request, method: str, path: str, extra: Mapping[str, Any]
) -> dict[str, Any]:
    services = request.app[SERVICES]
    if services.compiler is None:
        raise DependencyDown("no pipeline compiler is configured (COMPILER_URL)")
    identity = identity_of(request)
    body = {"tenant": _writer(identity), "actor": identity.actor, **extra}
    return await services.compiler.call(method, path, body)


async def _pipeline_body(request: web.Request) -> dict[str, Any]:
    """The body, refused here (400 naming every field) unless the compiler's model takes it."""
    pipeline = await json_body(request, max_body=MAX_BODY)
    parse_body(pipeline, _kind(request))
    return pipeline


async def validate(request: web.Request) -> web.Response:
    query_params(request, set())
    pipeline = await _pipeline_body(request)
    result = await _compile(request, "POST", f"{_kind(request)}/validate", {"pipeline": pipeline})
    return web.json_response(result)


async def create(request: web.Request) -> web.Response:
    query_params(request, set())
    pipeline = await _pipeline_body(request)
    result = await _compile(request, "POST", _kind(request), {"pipeline": pipeline})
    return web.json_response(result, status=201)


async def update(request: web.Request) -> web.Response:
    query_params(request, set())
    path = f"{_kind(request)}/{_pipeline_id(request)}"
    pipeline = await _pipeline_body(request)
    return web.json_response(await _compile(request, "PUT", path, {"pipeline": pipeline}))


async def delete(request: web.Request) -> web.Response:
    query_params(request, set())
    path = f"{_kind(request)}/{_pipeline_id(request)}"
    return web.json_response(await _compile(request, "DELETE", path, {}))


async def rollback(request: web.Request) -> web.Response:
    query_params(request, set())
    body = await json_body(request)
    unknown = sorted(set(body) - {"version"})
    if unknown:
        raise Invalid(f"{unknown[0]}: unknown field", details={"parameter": unknown[0]})
    path = f"{_kind(request)}/{_pipeline_id(request)}/rollback"
    return web.json_response(
        await _compile(request, "POST", path, {"version": body.get("version")})
    )


async def pause(request: web.Request) -> web.Response:
    query_params(request, set())
    await json_body(request, required=False)
    action = request.path.rsplit("/", 1)[1]  # pause | resume
    path = f"{_kind(request)}/{_pipeline_id(request)}/schedule/{action}"
    return web.json_response(await _compile(request, "POST", path, {}))


async def sync(request: web.Request) -> web.Response:
    query_params(request, set())
    body = await json_body(request, required=False)
    if body:
        name = sorted(body)[0]
        raise Invalid(f"{name}: unknown field", details={"parameter": name})
    path = f"{_kind(request)}/{_pipeline_id(request)}/sync"
    return web.json_response(await _compile(request, "POST", path, {}))


async def run(request: web.Request) -> web.Response:
    query_params(request, set())
    body = await json_body(request, required=False)
    unknown = sorted(set(body) - {"parameters"})
    if unknown:
        raise Invalid(f"{unknown[0]}: unknown field", details={"parameter": unknown[0]})
    path = f"{_kind(request)}/{_pipeline_id(request)}/run"
    result = await _compile(request, "POST", path, {"parameters": body.get("parameters") or {}})
    return web.json_response(result, status=201)


def _trigger_path(request: web.Request, suffix: str = "") -> str:
    trigger = request.match_info["trigger"]
    return f"{_kind(request)}/{_pipeline_id(request)}/triggers/{trigger}/webhook{suffix}"


async def webhook(request: web.Request) -> web.Response:
    query_params(request, set())
    return web.json_response(await _compile(request, "POST", _trigger_path(request), {}))


async def rotate_webhook(request: web.Request) -> web.Response:
    query_params(request, set())
    unknown = sorted(await json_body(request, required=False))
    if unknown:
        raise Invalid(f"{unknown[0]}: unknown field", details={"parameter": unknown[0]})
    path = _trigger_path(request, "/rotate")
    return web.json_response(await _compile(request, "POST", path, {}))


_ACTING = Param("acting_tenant", "An administrator acting for this tenant.")
_PIPELINE_BODY = {
    "type": "object",
    "required": ["name", "definition"],
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "parameters": {"type": "object", "description": "Defaults of declared parameters."},
        "definition": {
            "type": "object",
            "description": "{type: wizard, spec}, {type: yaml, template} or {type: git, "
            "repository, branch, path, credentials_secret} (docs/api.md).",
        },
        "schedule": {
            "type": "object",
            "nullable": True,
            "description": "{cron: [...], timezone, concurrency_policy, "
            "starting_deadline_seconds, suspended} (docs/pipeline-spec.md, Schedules).",
        },
        "triggers": {
            "type": "array",
            "nullable": True,
            "maxItems": MAX_TRIGGERS,
            "description": "Webhook triggers (docs/pipeline-spec.md, Triggers).",
            "items": {
                "type": "object",
                "required": ["name", "type"],
                "properties": {
                    "name": {"type": "string", "pattern": TRIGGER_NAME_PATTERN},
                    "type": {"type": "string", "enum": ["webhook"]},
                    "parameters": {
                        "type": "object",
                        "description": "Declared parameter -> selector (body.a.b, header.X-Id).",
                        "additionalProperties": {"type": "string"},
                    },
                },
            },
        },
        "notifications": {
            "type": "array",
            "maxItems": 10,
            "description": "Channels told when a run finishes (docs/pipeline-spec.md).",
            "items": {
                "type": "object",
                "required": ["name", "type", "secret"],
                "properties": {
                    "name": {"type": "string"},
                    "type": {"type": "string", "enum": ["slack", "pagerduty"]},
                    "secret": {"type": "string", "description": "A data secret's name."},
                    "key": {"type": "string", "description": "Default url / routing_key."},
                    "on": {"type": "string", "enum": ["failure", "success", "always"]},
                    "severity": {
                        "type": "string",
                        "enum": ["critical", "error", "warning", "info"],
                        "description": "PagerDuty only.",
                    },
                },
            },
        },
        "release": RELEASE_SCHEMA,
    },
}
_ERRORS = {400: "Error", 403: "Error", 404: "Error", 409: "Error", 422: "Error", 503: "Error"}


def _routes(prefix: str, what: str) -> tuple[RouteSpec, ...]:
    base = f"{API_PREFIX}/{prefix}"
    item = f"{base}/{{id}}"
    read, write = Permission.PIPELINES_READ, Permission.PIPELINES_WRITE
    return (
        RouteSpec(
            "GET",
            base,
            list_pipelines,
            read,
            f"{what} of the caller's tenant, by name.",
            prefix,
            query=(*PAGE, Param("q", "Only names containing this text."), _ACTING),
            responses={200: "PipelineList", 400: "Error", 403: "Error"},
        ),
        RouteSpec(
            "POST",
            base,
            create,
            write,
            "Create a pipeline: render, check, lint, apply its template, record version 1.",
            prefix,
            query=(_ACTING,),
            body=_PIPELINE_BODY,
            responses={201: "PipelineSaved", **_ERRORS},
        ),
        RouteSpec(
            "POST",
            f"{base}/validate",
            validate,
            write,
            "Render, check and lint a pipeline without saving it.",
            prefix,
            query=(_ACTING,),
            body=_PIPELINE_BODY,
            responses={200: "PipelineValidation", **_ERRORS},
        ),
        RouteSpec(
            "GET",
            item,
            read_pipeline,
            read,
            "A pipeline with its current version.",
            prefix,
            query=(_ACTING,),
            responses={200: "Pipeline", 403: "Error", 404: "Error"},
        ),
        RouteSpec(
            "PUT",
            item,
            update,
            write,
            "Update a pipeline: a new version, which becomes current.",
            prefix,
            query=(_ACTING,),
            body=_PIPELINE_BODY,
            responses={200: "PipelineSaved", **_ERRORS},
        ),
        RouteSpec(
            "DELETE",
            item,
            delete,
            write,
            "Delete a pipeline, its versions and its templates (its runs stay in history).",
            prefix,
            query=(_ACTING,),
            responses={200: "PipelineDeleted", **_ERRORS},
        ),
        RouteSpec(
            "GET",
            f"{item}/versions",
            list_versions,
            read,
            "Version history, newest first.",
            prefix,
            query=(*PAGE, _ACTING),
            responses={200: "PipelineVersionList", 400: "Error", 403: "Error", 404: "Error"},
        ),
        RouteSpec(
            "POST",
            f"{item}/rollback",
            rollback,
            write,
            "Make an earlier version current again.",
            prefix,
            query=(_ACTING,),
            body={
                "type": "object",
                "required": ["version"],
                "properties": {"version": {"type": "integer"}},
            },
            responses={200: "PipelineRollback", **_ERRORS},
        ),
        *(
            RouteSpec(
                "POST",
                f"{item}/schedule/{action}",
                pause,
                write,
                f"{action.capitalize()} the schedule (its CronWorkflow's suspend), audited; "
                "a save keeps a pause. 409 when the current version has no schedule.",
                prefix,
                query=(_ACTING,),
                responses={200: "PipelineSchedule", **_ERRORS},
            )
            for action in ("pause", "resume")
        ),
        RouteSpec(
            "POST",
            f"{item}/run",
            run,
            Permission.PIPELINES_RUN,
            "Run the current version now, with parameter overrides.",
            prefix,
            query=(_ACTING,),
            body={"type": "object", "properties": {"parameters": {"type": "object"}}},
            responses={201: "PipelineRun", **_ERRORS},
        ),
        # A webhook's token is a credential that starts runs: reading it needs pipelines.write.
        RouteSpec(
            "GET",
            f"{item}/triggers/{{trigger}}/webhook",
            webhook,
            write,
            "A webhook trigger's URL, token and an example curl (audited).",
            prefix,
            query=(_ACTING,),
            responses={200: "Webhook", **_ERRORS},
        ),
        RouteSpec(
            "POST",
            f"{item}/triggers/{{trigger}}/webhook/rotate",
            rotate_webhook,
            write,
            "A new token for a webhook trigger; the old one stops working (audited).",
            prefix,
            query=(_ACTING,),
            responses={200: "Webhook", **_ERRORS},
        ),
        RouteSpec(
            "POST",
            f"{item}/sync",
            sync,
            write,
            "Pull the latest commit of a Git-defined pipeline now: a new version when its "
            "document changed and passes.",
            prefix,
            query=(_ACTING,),
            responses={200: "PipelineSync", **_ERRORS},
        ),
    )


ROUTES = (*_routes("data-pipelines", "Data pipelines"), *_routes("ml-pipelines", "ML pipelines"))
