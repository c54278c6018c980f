"""``POST /workflows/{cluster}/{ns}/{name}/stop · /terminate · /retry`` and
``POST /workflow-templates/{cluster}/{ns}/{template}/submit``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from apiserver.actions import planning
from apiserver.actions.k8s_workflows import ClusterWorkflows
from apiserver.actions.planning import RetryMode, Shutdown
from apiserver.auth import Identity, Permission, identity_of
from apiserver.params import json_body, query_params, string_map
from apiserver.routing import API_PREFIX, Param, RouteSpec
from apiserver.runs.routes import RUN_PATH, visible_run
from apiserver.services import SERVICES, Services
from shared.argo import ArgoServer
from shared.db.audit import record_action
from shared.errors import Conflict, Invalid, NotFound, WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Target:
    cluster_id: str
    namespace: str
    name: str
    uid: str | None
    tenant: str | None


async def audited(
    services: Services,
    identity: Identity,
    target: Target,
    action: str,
    parameters: Mapping[str, Any],
    work: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """Run ``work`` and record its outcome, failures included."""

    async def record(outcome: str, detail: Mapping[str, Any]) -> None:
        await record_action(
            services.pool,
            cluster_id=target.cluster_id,
            namespace=target.namespace,
            name=target.name,
            run_uid=target.uid,
            tenant=target.tenant,
            actor=identity.actor,
            action=action,
            parameters=parameters,
            outcome=outcome,
            detail=detail,
        )

    try:
        result = await work()
    except WorkflowManagerError as exc:
        try:
            await record("failed", exc.to_json())
        except WorkflowManagerError as audit_error:
            log.error("action_audit_failed", action=action, error=audit_error.code)
        raise
    await record("succeeded", result)
    return result


def _identity_of(workflow: Mapping[str, Any], cluster_id: str) -> dict[str, Any]:
    metadata = workflow.get("metadata") or {}
    return {
        "cluster": cluster_id,
        "namespace": metadata.get("namespace"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
    }


async def _shutdown(request: web.Request, kind: Shutdown) -> web.Response:
    services, identity, row = await visible_run(request)
    query_params(request, set())
    action = kind.value.lower()
    target = Target(row["cluster_id"], row["namespace"], row["name"], row["uid"], row["tenant"])

    async def work() -> dict[str, Any]:
        workflows = ClusterWorkflows(await services.connections.api(target.cluster_id))
        live = await workflows.get(target.namespace, target.name)
        planning.check_shutdown(live, uid=row["uid"], action=action)
        await workflows.patch(target.namespace, target.name, planning.shutdown_patch(kind))
        return {"action": action, "outcome": "requested", "shutdown": kind.value}

    result = await audited(services, identity, target, action, {}, work)
    return web.json_response(result)


async def stop(request: web.Request) -> web.Response:
    return await _shutdown(request, Shutdown.STOP)


async def terminate(request: web.Request) -> web.Response:
    return await _shutdown(request, Shutdown.TERMINATE)


async def retry(request: web.Request) -> web.Response:
    services, identity, row = await visible_run(request)
    query_params(request, set())
    await json_body(request, required=False)
    target = Target(row["cluster_id"], row["namespace"], row["name"], row["uid"], row["tenant"])
    parameters: dict[str, str] = dict(row["parameters"] or {})
    labels: dict[str, str] = dict(row["labels"] or {})
    template: str | None = row["template"]

    async def work() -> dict[str, Any]:
        cluster = await services.clusters.get(target.cluster_id)
        api = await services.connections.api(target.cluster_id)
        workflows = ClusterWorkflows(api)
        live = await workflows.get(target.namespace, target.name)
        plan = planning.plan_retry(live, uid=row["uid"], template=template)
        ref = planning.argo_server_for(
            is_host=cluster is not None and cluster.is_host,
            namespace=target.namespace,
            data_server_url=services.argo_data_server_url,
        )
        argo = ArgoServer(
            api, namespace=ref.namespace, service=ref.service, port=ref.port, scheme=ref.scheme
        )
        if plan.mode is RetryMode.IN_PLACE:
            try:
                retried = await argo.retry(target.namespace, target.name)
                return {
                    "action": "retry",
                    "outcome": "retried",
                    "reason": plan.reason,
                    "workflow": _identity_of(retried, target.cluster_id),
                }
            except Conflict as refused:  # ArgoRefused included: resubmit instead
                plan = planning.fallback_plan(
                    live, template=template, reason=f"Argo refused to retry: {refused.message}"
                )
        if plan.mode is RetryMode.FROM_TEMPLATE:
            assert template is not None
            cluster_scope = planning.is_cluster_template(labels, template)
            if not await workflows.template_exists(
                target.namespace, template, cluster_scope=cluster_scope
            ):
                raise Conflict(
                    f"cannot resubmit: the template {template!r} no longer exists",
                    details={"reason": "template_missing", "template": template},
                )
            manifest = planning.template_workflow(
                namespace=target.namespace,
                template=template,
                parameters=parameters,
                cluster_scope=cluster_scope,
                labels={
                    **planning.resubmission_labels(labels, original=target.name),
                    **planning.controller_labels(
                        is_host=cluster is not None and cluster.is_host,
                        namespace=target.namespace,
                        data_instance_id=services.argo_data_instance_id,
                    ),
                },
            )
            created = await workflows.create(target.namespace, manifest)
        else:
            created = await argo.resubmit(target.namespace, target.name)
        if not (created.get("metadata") or {}).get("name"):
            raise Conflict("the resubmission created no workflow", details={"reason": "empty"})
        return {
            "action": "retry",
            "outcome": "resubmitted",
            "mode": plan.mode.value,
            "reason": plan.reason,
            "workflow": _identity_of(created, target.cluster_id),
        }

    result = await audited(services, identity, target, "retry", {}, work)
    return web.json_response(result)


async def submit(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    query_params(request, set())
    cluster_id = request.match_info["cluster"]
    namespace = request.match_info["ns"]
    template = request.match_info["template"]
    body = await json_body(request, required=False)
    unknown = sorted(set(body) - {"parameters"})
    if unknown:
        raise Invalid(f"{unknown[0]}: unknown field", details={"parameter": unknown[0]})
    parameters = string_map(body, "parameters")
    cluster = await services.clusters.get(cluster_id)
    if cluster is None:
        raise NotFound(f"no cluster {cluster_id!r}", details={"cluster": cluster_id})
    scope = await services.runs.scope_of(identity)
    tenant = planning.tenant_of_namespace(namespace)
    if not scope.allows(tenant=tenant, cluster_id=cluster_id, namespace=namespace):
        raise NotFound(
            f"no template {namespace}/{template} on cluster {cluster_id}",
            details={"cluster": cluster_id, "namespace": namespace, "template": template},
        )
    target = Target(cluster_id, namespace, template, None, tenant)

    async def work() -> dict[str, Any]:
        workflows = ClusterWorkflows(await services.connections.api(cluster_id))
        if not await workflows.template_exists(namespace, template, cluster_scope=False):
            raise NotFound(
                f"no template {namespace}/{template} on cluster {cluster_id}",
                details={"cluster": cluster_id, "namespace": namespace, "template": template},
            )
        manifest = planning.template_workflow(
            namespace=namespace,
            template=template,
            parameters=parameters,
            labels=planning.controller_labels(
                is_host=cluster.is_host,
                namespace=namespace,
                data_instance_id=services.argo_data_instance_id,
            ),
        )
        created = await workflows.create(namespace, manifest)
        return {
            "action": "submit",
            "outcome": "submitted",
            "template": template,
            "workflow": _identity_of(created, cluster_id),
        }

    result = await audited(services, identity, target, "submit", parameters, work)
    return web.json_response(result, status=201)


_ACTION_RESPONSES = {200: "ActionResult", 404: "Error", 409: "Error", 503: "Error"}
_ACTING = (Param("acting_tenant", "An administrator acting for this tenant."),)
_RUN_ACTIONS = tuple(
    RouteSpec(
        "POST",
        f"{RUN_PATH}/{name}",
        handler,
        Permission.WORKFLOWS_ACT,
        summary,
        "actions",
        query=_ACTING,
        responses=_ACTION_RESPONSES,
    )
    for name, handler, summary in (
        ("stop", stop, "Stop the run: nothing more runs except exit handlers."),
        ("terminate", terminate, "Terminate the run: nothing more runs, exit handlers included."),
        (
            "retry",
            retry,
            "Retry in place (Failed/Error), else resubmit from its template with the same "
            "parameters; the answer says which.",
        ),
    )
)
ROUTES = (
    *_RUN_ACTIONS,
    RouteSpec(
        "POST",
        f"{API_PREFIX}/workflow-templates/{{cluster}}/{{ns}}/{{template}}/submit",
        submit,
        Permission.WORKFLOWS_ACT,
        "Start a run from a WorkflowTemplate with parameters.",
        "actions",
        query=_ACTING,
        body={
            "type": "object",
            "properties": {
                "parameters": {"type": "object", "additionalProperties": {"type": "string"}}
            },
        },
        responses={201: "ActionResult", 400: "Error", 404: "Error", 503: "Error"},
    ),
)
