"""``GET · POST · DELETE /access-grants`` (administrators only)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from apiserver.auth import Special, identity_of
from apiserver.grants.pg_grants import GrantRow
from apiserver.params import json_body, query_params, text_field
from apiserver.routing import API_PREFIX, Param, RouteSpec
from apiserver.runs.query import iso
from apiserver.services import SERVICES
from shared.errors import Invalid, NotFound
from shared.identifiers import TENANT_ID


def _item(row: GrantRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "tenant": row.tenant,
        "cluster_id": row.cluster_id,
        "namespace": row.namespace,
        "granted_by": row.granted_by,
        "created_at": iso(row.created_at),
    }


def _grant_fields(values: dict[str, Any]) -> tuple[str, str, str]:
    tenant = text_field(values, "tenant", max_length=48)
    if not TENANT_ID.fullmatch(tenant):
        raise Invalid("tenant: not a valid tenant id", details={"parameter": "tenant"})
    return tenant, text_field(values, "cluster_id"), text_field(values, "namespace", max_length=63)


async def list_grants(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    params = query_params(request, {"tenant"})
    tenants = params.get("tenant") or []
    tenant = tenants[0] if tenants else None
    if tenant is not None and not TENANT_ID.fullmatch(tenant):
        raise Invalid("tenant: not a valid tenant id", details={"parameter": "tenant"})
    rows = await services.grants.listed(tenant=tenant)
    return web.json_response({"items": [_item(row) for row in rows]})


async def create_grant(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    query_params(request, set())
    tenant, cluster_id, namespace = _grant_fields(await json_body(request))
    if await services.clusters.get(cluster_id) is None:
        raise NotFound(f"no cluster {cluster_id!r}", details={"cluster": cluster_id})
    row = await services.grants.create(
        tenant=tenant,
        cluster_id=cluster_id,
        namespace=namespace,
        granted_by=identity_of(request).actor,
    )
    return web.json_response(_item(row), status=201)


async def delete_grant(request: web.Request) -> web.Response:
    """Revoke by ``id`` (query) or by ``tenant``, ``cluster_id`` and ``namespace`` (query or
    JSON body)."""
    services = request.app[SERVICES]
    params = query_params(request, {"id", "tenant", "cluster_id", "namespace"})
    values: dict[str, Any] = {key: vals[0] for key, vals in params.items() if vals}
    values.pop("acting_tenant", None)
    if not values:
        values = await json_body(request)
    if "id" in values:
        text = str(values["id"])
        if not text.isdigit():
            raise Invalid("id: expected a grant id", details={"parameter": "id"})
        row = await services.grants.delete(int(text))
    else:
        tenant, cluster_id, namespace = _grant_fields(values)
        row = await services.grants.delete_matching(
            tenant=tenant, cluster_id=cluster_id, namespace=namespace
        )
    if row is None:
        raise NotFound("no such access grant")
    return web.json_response(_item(row))


_GRANT_BODY = {
    "type": "object",
    "required": ["tenant", "cluster_id", "namespace"],
    "properties": {
        "tenant": {"type": "string", "pattern": TENANT_ID.pattern, "maxLength": 48},
        "cluster_id": {"type": "string", "minLength": 1, "maxLength": 253},
        "namespace": {"type": "string", "minLength": 1, "maxLength": 63},
    },
}
ROUTES = (
    RouteSpec(
        "GET",
        f"{API_PREFIX}/access-grants",
        list_grants,
        Special.ADMIN,
        "Access grants, optionally of one tenant.",
        "access-grants",
        query=(
            Param("tenant", "Only this tenant's grants.", pattern=TENANT_ID.pattern, max_length=48),
        ),
        responses={200: "GrantList", 400: "Error", 403: "Error"},
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/access-grants",
        create_grant,
        Special.ADMIN,
        "Grant a tenant access to a namespace of a cluster.",
        "access-grants",
        body=_GRANT_BODY,
        responses={201: "Grant", 400: "Error", 403: "Error", 404: "Error", 409: "Error"},
    ),
    RouteSpec(
        "DELETE",
        f"{API_PREFIX}/access-grants",
        delete_grant,
        Special.ADMIN,
        "Revoke a grant, by id or by tenant, cluster_id and namespace.",
        "access-grants",
        query=(
            Param("id", "The grant's id.", type="integer"),
            Param("tenant", "The grant's tenant."),
            Param("cluster_id", "The grant's cluster."),
            Param("namespace", "The grant's namespace."),
        ),
        body=_GRANT_BODY,
        responses={200: "Grant", 403: "Error", 404: "Error"},
    ),
)
