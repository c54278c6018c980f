"""A model's deployments: promote a version to production, roll production back, and a
deployment's endpoint with its token (docs/api.md, "Models"; docs/operations.md,
"Deployments").

The apiserver never touches the serving cluster: promote and rollback write production's
wanted version (``shared.db.deployments``, with a history entry), and the stage controller's
reconciler deploys it; the answer is 202 with the deployment as it stands, and ``GET
/models/{id}`` shows it become ``ready`` (or ``failed`` with KServe's message).

What may serve production: a version whose gate passed and whose release was approved, or that
needed no approval (its pipeline version's ``release.approval.required`` false); never an
archived one; always one whose pipeline version's release has a ``serving`` block (how it is
served). Rollback returns production to the version it served before the current one (from the
recorded history), or to a given version it served before. Each is audited in the action
history of the run that produced the version, failures included.

The endpoint route shows the deployment's token (kept sealed until shown,
``shared.token_sealing``) to a caller with ``models.deploy``; the token never enters the audit
entry that records the showing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from apiserver.actions.routes import Target, audited
from apiserver.auth import Identity, identity_of
from apiserver.params import json_body, query_params
from apiserver.runs.query import iso
from apiserver.services import SERVICES, Services
from shared import stages as S
from shared.db.deployments import DeploymentRow, HistoryEntry, Wanted
from shared.db.registry import ModelRow, VersionRow
from shared.errors import Conflict, Invalid, NotFound
from shared.serving import isvc_name
from shared.token_sealing import SealError, unseal

# Promote and rollback deploy at once: the reconciler's deadline for production's readiness.
PRODUCTION_DEADLINE: Final = 600.0
HISTORY_SHOWN: Final = 50
_EXAMPLE_BODY: Final = {"instances": [[1.0, 2.0]]}


def deployment_item(row: DeploymentRow, history: list[HistoryEntry]) -> dict[str, Any]:
    return {
        "environment": row.environment,
        "version": row.version,
        "state": row.state,
        "message": row.message,
        "url": row.url,
        "requested_by": row.requested_by,
        "requested_at": iso(row.requested_at),
        "ready_at": iso(row.ready_at),
        "history": [
            {
                "version": entry.version,
                "previous_version": entry.previous_version,
                "action": entry.action,
                "actor": entry.actor,
                "run": entry.run_uid,
                "at": iso(entry.created_at),
            }
            for entry in history[-HISTORY_SHOWN:]
        ],
    }


async def deployments_of(services: Services, model: ModelRow) -> list[dict[str, Any]]:
    """Each environment's deployment of the model with its recent history (GET /models/{id})."""
    rows = await services.deployments.of_model(model.id)
    history = await services.deployments.history(model.id)
    return [
        deployment_item(row, [h for h in history if h.environment == row.environment])
        for row in rows
    ]


def _run_of(row: VersionRow, tenant: str) -> Target:
    return Target(row.cluster_id, row.run_namespace, row.run_name, row.run_uid, tenant)


async def _model(services: Services, identity: Identity, request: web.Request) -> ModelRow:
    model_id = request.match_info["model"]
    row = await services.registry.find(model_id, tenant=identity.tenant)
    if row is None:
        raise NotFound(f"no model {model_id!r}", details={"model": model_id})
    return row


async def _version(services: Services, model: ModelRow, number: int) -> VersionRow:
    row = await services.registry.version(model.id, number)
    if row is None:
        raise NotFound(
            f"model {model.id!r} has no version {number}",
            details={"model": model.id, "version": number},
        )
    return row


async def _release_settings(services: Services, version: VersionRow) -> Mapping[str, Any]:
    pipeline_version = await services.pipelines.version(
        version.pipeline_id, version.pipeline_version
    )
    release = (pipeline_version.settings.get("release") if pipeline_version else None) or {}
    return release if isinstance(release, Mapping) else {}


async def _servable(services: Services, model: ModelRow, version: VersionRow) -> dict[str, Any]:
    """How ``version`` is served in production; Conflict saying why it may not be."""
    details = {"model": model.id, "version": version.number, "state": version.state}
    release = await _release_settings(services, version)
    serving = release.get("serving")
    if not isinstance(serving, Mapping):
        raise Conflict(
            f"version {version.number}'s release has no serving block: it cannot be deployed",
            details=details,
        )
    approval = release.get("approval")
    required = isinstance(approval, Mapping) and bool(approval.get("required"))
    if version.state == "approved" or (version.state == "passed" and not required):
        return dict(serving)
    if version.state == "passed":
        # Approved a moment ago: the decision is recorded before stagectl marks the version.
        decision = await services.registry.approval(version.run_uid)
        if decision is not None and decision.state == "approved":
            return dict(serving)
    if version.state == "archived":
        reason = "it is archived"
    elif version.state == "passed":
        reason = "its release waits for approval"
    else:
        reason = f"it is {version.state}"
    raise Conflict(
        f"version {version.number} cannot serve production: {reason} (a version may once its "
        "gate passed and its release was approved, or needed no approval)",
        details=details,
    )


async def _deploy_production(
    services: Services,
    identity: Identity,
    model: ModelRow,
    version: VersionRow,
    serving: dict[str, Any],
    action: str,
) -> dict[str, Any]:
    current = await services.deployments.get(model.id, S.PRODUCTION)
    if current is not None and current.version == version.number and current.state != "failed":
        row = current  # already serving it, or on its way: nothing to change
    else:
        async with services.deployments.transaction() as store:
            row = await store.want(
                Wanted(
                    model_id=model.id,
                    environment=S.PRODUCTION,
                    version=version.number,
                    serving=serving,
                    action="promote" if action == "model_promote" else "rollback",
                    actor=identity.actor,
                    deadline_seconds=PRODUCTION_DEADLINE,
                )
            )
    history = await services.deployments.history(model.id, S.PRODUCTION)
    return {"model": model.id, "deployment": deployment_item(row, history)}


async def promote(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    query_params(request, set())
    model = await _model(services, identity, request)
    version = await _version(services, model, int(request.match_info["v"]))

    async def work() -> dict[str, Any]:
        serving = await _servable(services, model, version)
        return await _deploy_production(
            services, identity, model, version, serving, "model_promote"
        )

    parameters = {"model": model.id, "version": version.number}
    result = await audited(
        services, identity, _run_of(version, model.tenant), "model_promote", parameters, work
    )
    return web.json_response(result, status=202)


def _rollback_version(body: Mapping[str, Any]) -> int | None:
    unknown = sorted(set(body) - {"version"})
    if unknown:
        raise Invalid(f"{unknown[0]}: unknown field", details={"parameter": unknown[0]})
    value = body.get("version")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Invalid("version: a version number from 1", details={"parameter": "version"})
    return value


def rollback_target(history: list[HistoryEntry], current: int, wanted: int | None) -> int | None:
    """The version production returns to: ``wanted`` when production served it before, else
    (None) the last version before the current one in its history. Pure."""
    served = [entry.version for entry in history]
    if wanted is not None:
        return wanted if wanted in served and wanted != current else None
    for version in reversed(served):
        if version != current:
            return version
    return None


async def rollback(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    query_params(request, set())
    wanted = _rollback_version(await json_body(request, required=False))
    model = await _model(services, identity, request)
    current = await services.deployments.get(model.id, S.PRODUCTION)
    if current is None:
        raise Conflict(
            "the model serves no production version to roll back", details={"model": model.id}
        )
    history = await services.deployments.history(model.id, S.PRODUCTION)
    target = rollback_target(history, current.version, wanted)
    if target is None:
        which = f"version {wanted}" if wanted is not None else "a version before the current one"
        raise Conflict(
            f"production never served {which}; roll back to a version it served before",
            details={"model": model.id, "current": current.version, "version": wanted},
        )
    version = await _version(services, model, target)

    async def work() -> dict[str, Any]:
        if version.state == "archived":
            raise Conflict(
                f"version {target} is archived: it cannot serve production again",
                details={"model": model.id, "version": target},
            )
        release = await _release_settings(services, version)
        serving = release.get("serving")
        if not isinstance(serving, Mapping):
            raise Conflict(
                f"version {target}'s release has no serving block", details={"version": target}
            )
        return await _deploy_production(
            services, identity, model, version, dict(serving), "model_rollback"
        )

    parameters = {"model": model.id, "version": target, "from": current.version}
    result = await audited(
        services, identity, _run_of(version, model.tenant), "model_rollback", parameters, work
    )
    return web.json_response(result, status=202)


async def endpoint(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    query_params(request, set())
    environment = request.match_info["env"]
    model = await _model(services, identity, request)
    row = await services.deployments.get(model.id, environment)
    if row is None:
        raise NotFound(
            f"model {model.id!r} is not deployed to {environment}",
            details={"model": model.id, "environment": environment},
        )
    version = await _version(services, model, row.version)
    shown: dict[str, str | None] = {"token": None}

    async def work() -> dict[str, Any]:
        reason = None
        if services.deployment_token_key is None:
            reason = "DEPLOYMENT_TOKEN_KEY is not configured: issue a token through /tokens"
        elif row.token_sealed is None:
            reason = "the deployment has no token yet (it is issued at first deploy)"
        else:
            try:
                shown["token"] = unseal(
                    row.token_sealed,
                    key=services.deployment_token_key,
                    model_id=model.id,
                    environment=environment,
                )
            except SealError:
                reason = "the deployment's token does not open with this key"
        return {
            "model": model.id,
            "environment": environment,
            "version": row.version,
            "state": row.state,
            "url": row.url,
            "token_shown": shown["token"] is not None,
            "token_reason": reason,
        }

    parameters = {"model": model.id, "environment": environment, "version": row.version}
    result = await audited(
        services, identity, _run_of(version, model.tenant), "model_endpoint", parameters, work
    )
    token = shown["token"]
    # KServe's v1 protocol names the model by its InferenceService.
    url = f"{row.url}/v1/models/{isvc_name(model.name, environment)}:predict" if row.url else None
    result["token"] = token
    result["example"] = (
        None
        if url is None
        else {
            "method": "POST",
            "url": url,
            "headers": {"Authorization": f"Bearer {token or '<token>'}"},
            "body": _EXAMPLE_BODY,
            "curl": (
                f"curl -sS -X POST {url} -H 'Authorization: Bearer {token or '<token>'}' "
                "-H 'Content-Type: application/json' -d '{\"instances\": [[1.0, 2.0]]}'"
            ),
        }
    )
    return web.json_response(result, headers={"Cache-Control": "no-store"})
