"""``/models``: registered models, a model with its versions and pending approvals, a
version's scorecard and lineage, archiving a version and deciding a release.

Every read is scoped to the caller's tenant (an administrator not acting for one sees every
tenant's); another tenant's model is a 404 like a missing one. Archive and the decisions are
recorded in the action history of the run that produced the version (``run_actions``), with
the actor and the outcome, failures included. Deployments, promote, rollback and the endpoint:
``apiserver.models.deployments``.

Permissions: ``models.read`` to read; ``models.approve`` to approve or reject a release;
``models.deploy`` to promote, roll back, show an endpoint's token, and archive a version
(archiving decides what may be deployed, as promote and rollback do; the spec's permission list
has no ``models.write``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final
from urllib.parse import quote

from aiohttp import web

from apiserver.actions.routes import Target, audited
from apiserver.artifacts.routes import object_store, send_object
from apiserver.auth import Identity, Permission, identity_of
from apiserver.models.deployments import deployments_of, endpoint, promote, rollback
from apiserver.models.files import SERVED, UNREGISTERED, object_key, served_file
from apiserver.paging import parse_cursor, parse_limit
from apiserver.params import json_body, query_params
from apiserver.routing import API_PREFIX, PAGE, Param, RouteSpec
from apiserver.runs.query import iso
from apiserver.services import SERVICES, Services
from shared import cursors
from shared.db.registry import ApprovalRow, ModelRow, VersionRow
from shared.errors import DependencyDown, Invalid, NotFound

BASE: Final = f"{API_PREFIX}/models"
MODEL_PATH: Final = f"{BASE}/{{model}}"
VERSIONS_SHOWN: Final = 100
MAX_REASON: Final = 1000


def model_item(row: ModelRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "tenant": row.tenant,
        "name": row.name,
        "production_version": row.production_version,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def version_item(row: VersionRow) -> dict[str, Any]:
    return {
        "number": row.number,
        "state": row.state,
        "verdict": row.verdict,
        "reasons": row.reasons,
        "scorecard": row.scorecard,
        "run": {
            "cluster": row.cluster_id,
            "namespace": row.run_namespace,
            "name": row.run_name,
            "uid": row.run_uid,
        },
        "pipeline": {"id": row.pipeline_id, "version": row.pipeline_version},
        "model_file": row.model_file,
        "digest": row.digest,
        "files": [] if row.state in UNREGISTERED else list(SERVED),
        "release_outcome": row.release_outcome,
        "archived_by": row.archived_by,
        "archived_at": iso(row.archived_at),
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def approval_item(row: ApprovalRow) -> dict[str, Any]:
    return {
        "run": {
            "cluster": row.cluster_id,
            "namespace": row.run_namespace,
            "name": row.run_name,
            "uid": row.run_uid,
        },
        "version": row.version,
        "state": row.state,
        "requested_at": iso(row.requested_at),
        "expires_at": iso(row.expires_at),
        "decided_by": row.decided_by,
        "decided_at": iso(row.decided_at),
        "reason": row.reason,
    }


async def _model(services: Services, identity: Identity, request: web.Request) -> ModelRow:
    model_id = request.match_info["model"]
    row = await services.registry.find(model_id, tenant=identity.tenant)
    if row is None:
        raise NotFound(f"no model {model_id!r}", details={"model": model_id})
    return row


async def _version(services: Services, model: ModelRow, request: web.Request) -> VersionRow:
    number = int(request.match_info["v"])  # the route's rule: an integer from 1
    row = await services.registry.version(model.id, number)
    if row is None:
        raise NotFound(
            f"model {model.id!r} has no version {number}",
            details={"model": model.id, "version": number},
        )
    return row


# --- reads -------------------------------------------------------------------------------------
async def list_models(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    params = query_params(request, {"limit", "cursor"})
    limit = parse_limit(params.get("limit"))
    bound_to = cursors.binding(request.path, tenant=identity.tenant)
    position = parse_cursor(
        services.cursors, params.get("cursor"), bound_to=bound_to, shape=(str, str)
    )
    after = (str(position[0]), str(position[1])) if position else None
    page = await services.registry.page(tenant=identity.tenant, after=after, limit=limit)
    rows = page.rows[:limit]
    cursor = None
    if len(page.rows) > limit:
        cursor = services.cursors.encode((rows[-1].name, rows[-1].id), bound_to=bound_to)
    return web.json_response(
        {"items": [model_item(row) for row in rows], "next_cursor": cursor, "total": page.total}
    )


async def read_model(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    query_params(request, set())
    model = await _model(services, identity_of(request), request)
    versions = await services.registry.versions(model.id, limit=VERSIONS_SHOWN)
    approvals = await services.registry.approvals(model.id, state="pending")
    item = model_item(model)
    item["versions"] = [version_item(row) for row in versions[:VERSIONS_SHOWN]]
    item["more_versions"] = len(versions) > VERSIONS_SHOWN
    item["pending_approvals"] = [approval_item(row) for row in approvals]
    item["deployments"] = await deployments_of(services, model)
    return web.json_response(item)


async def version_file(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    query_params(request, set())
    name = served_file(request.match_info["file"])
    model = await _model(services, identity_of(request), request)
    version = await _version(services, model, request)
    key = object_key(tenant=model.tenant, prefix=version.prefix, state=version.state, name=name)
    if services.artifact_bucket is None:
        raise DependencyDown(
            "object storage is not configured (ARTIFACT_BUCKET)",
            details={"dependency": "object_storage"},
        )
    stored = await object_store(services).open(services.artifact_bucket, key)
    filename = f"{model.name}-v{version.number}-{name}"
    return await send_object(
        request,
        replace(stored, content_type="application/json"),  # ours, whatever the object says
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}"},
    )


# --- writes ------------------------------------------------------------------------------------
def _run_of(row: VersionRow | ApprovalRow, tenant: str) -> Target:
    return Target(row.cluster_id, row.run_namespace, row.run_name, row.run_uid, tenant)


async def archive(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    query_params(request, set())
    model = await _model(services, identity, request)
    version = await _version(services, model, request)

    async def work() -> dict[str, Any]:
        row = await services.registry.archive(
            model.id, version.number, tenant=identity.tenant, actor=identity.actor
        )
        return {"model": model.id, "version": version_item(row)}

    parameters = {"model": model.id, "version": version.number}
    result = await audited(
        services, identity, _run_of(version, model.tenant), "model_archive", parameters, work
    )
    return web.json_response(result)


async def _decide(request: web.Request, *, approve: bool) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    query_params(request, set())
    body = await json_body(request, required=False)
    reason = _reason(body)
    model = await _model(services, identity, request)
    run = request.match_info["run"]
    approval = await services.registry.approval_of(model.id, run)
    if approval is None:
        raise NotFound("no approval of this run for this model", details={"run": run})

    async def work() -> dict[str, Any]:
        row = await services.registry.decide(
            model.id,
            run,
            tenant=identity.tenant,
            approve=approve,
            actor=identity.actor,
            reason=reason,
        )
        return {"model": model.id, "approval": approval_item(row)}

    action = "model_approve" if approve else "model_reject"
    parameters = {"model": model.id, "version": approval.version}
    if reason is not None:
        parameters["reason"] = reason
    result = await audited(
        services, identity, _run_of(approval, model.tenant), action, parameters, work
    )
    return web.json_response(result)


def _reason(body: Mapping[str, Any]) -> str | None:
    unknown = sorted(set(body) - {"reason"})
    if unknown:
        raise Invalid(f"{unknown[0]}: unknown field", details={"parameter": unknown[0]})
    reason = body.get("reason")
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise Invalid(
            f"reason: a string of at most {MAX_REASON} characters", details={"parameter": "reason"}
        )
    return reason.strip() or None


async def approve(request: web.Request) -> web.Response:
    return await _decide(request, approve=True)


async def reject(request: web.Request) -> web.Response:
    return await _decide(request, approve=False)


_ACTING = Param("acting_tenant", "An administrator acting for this tenant.")
_DECISION = {
    "type": "object",
    "properties": {"reason": {"type": "string", "maxLength": MAX_REASON}},
}
ROUTES = (
    RouteSpec(
        "GET",
        BASE,
        list_models,
        Permission.MODELS_READ,
        "Registered models of the caller's tenant, by name.",
        "models",
        query=(*PAGE, _ACTING),
        responses={200: "ModelList", 400: "Error", 403: "Error"},
    ),
    RouteSpec(
        "GET",
        MODEL_PATH,
        read_model,
        Permission.MODELS_READ,
        "A model with its versions (newest first) and pending approvals.",
        "models",
        query=(_ACTING,),
        responses={200: "ModelDetail", 403: "Error", 404: "Error"},
    ),
    RouteSpec(
        "GET",
        f"{MODEL_PATH}/versions/{{v}}/files/{{file}}",
        version_file,
        Permission.MODELS_READ,
        "A version's eval_scorecard.json or lineage.json, streamed from the registry.",
        "models",
        query=(_ACTING,),
        responses={200: "ModelFile", 403: "Error", 404: "Error", 503: "Error"},
        content_type="application/json",
    ),
    RouteSpec(
        "POST",
        f"{MODEL_PATH}/versions/{{v}}/archive",
        archive,
        Permission.MODELS_DEPLOY,
        "Archive a version (not the production one); again: no change.",
        "models",
        query=(_ACTING,),
        responses={200: "ModelVersionArchived", 403: "Error", 404: "Error", 409: "Error"},
    ),
    RouteSpec(
        "POST",
        f"{MODEL_PATH}/approvals/{{run}}/approve",
        approve,
        Permission.MODELS_APPROVE,
        "Approve a release waiting for approval (decided once).",
        "models",
        query=(_ACTING,),
        body=_DECISION,
        responses={200: "ApprovalDecided", 400: "Error", 403: "Error", 404: "Error", 409: "Error"},
    ),
    RouteSpec(
        "POST",
        f"{MODEL_PATH}/approvals/{{run}}/reject",
        reject,
        Permission.MODELS_APPROVE,
        "Reject a release waiting for approval (decided once).",
        "models",
        query=(_ACTING,),
        body=_DECISION,
        responses={200: "ApprovalDecided", 400: "Error", 403: "Error", 404: "Error", 409: "Error"},
    ),
    RouteSpec(
        "POST",
        f"{MODEL_PATH}/versions/{{v}}/promote",
        promote,
        Permission.MODELS_DEPLOY,
        "Deploy a version to production at once (an approved version, or one that needed no "
        "approval); 202: the stage controller deploys it, GET /models/{id} shows it ready.",
        "models",
        query=(_ACTING,),
        responses={202: "DeploymentChanged", 403: "Error", 404: "Error", 409: "Error"},
    ),
    RouteSpec(
        "POST",
        f"{MODEL_PATH}/rollback",
        rollback,
        Permission.MODELS_DEPLOY,
        "Return production to the version it served before the current one, or to a given "
        "version it served before (from the recorded deployment history).",
        "models",
        query=(_ACTING,),
        body={
            "type": "object",
            "properties": {"version": {"type": "integer", "minimum": 1}},
            "additionalProperties": False,
        },
        responses={
            202: "DeploymentChanged",
            400: "Error",
            403: "Error",
            404: "Error",
            409: "Error",
        },
    ),
    RouteSpec(
        "GET",
        f"{MODEL_PATH}/deployments/{{env}}/endpoint",
        endpoint,
        Permission.MODELS_DEPLOY,
        "A deployment's URL, its token (kept sealed until shown; each showing is audited) "
        "and an example request.",
        "models",
        query=(_ACTING,),
        responses={200: "Endpoint", 403: "Error", 404: "Error"},
    ),
)
