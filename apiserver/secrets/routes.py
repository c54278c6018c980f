"""``/data-secrets``: the tenant's write-only secrets (docs/api.md, "Data secrets").

The apiserver holds no rights in tenant namespaces: every route goes to the compiler's internal
API (``compiler.secrets.service``) with the effective tenant and the actor, and relays its
answer. A read shows a secret's name, key names and who changed it when, never a value; a PUT
carries values one way, to the compiler, and its answer has none. Reads need
``pipelines.read`` (whoever writes a pipeline must be able to pick a secret's name and key),
writes ``secrets.write``. Every route needs a tenant: an administrator gives ``acting_tenant``.
Another tenant's secret is a 404 like a missing one: the compiler only ever looks in the
effective tenant's namespace.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from apiserver.auth import Identity, Permission, identity_of
from apiserver.paging import parse_cursor, parse_limit
from apiserver.params import query_params
from apiserver.routing import API_PREFIX, PAGE, Param, RouteSpec
from apiserver.services import SERVICES, Services
from shared import cursors
from shared.errors import DependencyDown, Invalid
from shared.web import json_body

RESOURCE: Final = "data-secrets"
# 64 KiB of keys and values (the compiler's rule), with room for JSON's escapes.
MAX_BODY: Final = 512 * 1024


def _tenant(identity: Identity) -> str:
    if identity.tenant is None:
        raise Invalid(
            "an administrator reads and writes data secrets for one tenant: give acting_tenant",
            details={"parameter": "acting_tenant"},
        )
    return identity.tenant


async def _forward(
    request: web.Request,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    services: Services = request.app[SERVICES]
    if services.compiler is None:
        raise DependencyDown("no pipeline compiler is configured (COMPILER_URL)")
    identity = identity_of(request)
    tenant = _tenant(identity)
    if body is None:  # a read: the tenant in the query
        return await services.compiler.call(
            method, path, None, resource=RESOURCE, query={"tenant": tenant, **(query or {})}
        )
    return await services.compiler.call(
        method, path, {"tenant": tenant, "actor": identity.actor, **body}, resource=RESOURCE
    )


def _name(request: web.Request) -> str:
    return request.match_info["secret"]


async def list_secrets(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    identity = identity_of(request)
    params = query_params(request, {"limit", "cursor"})
    limit = parse_limit(params.get("limit"))
    bound_to = cursors.binding(request.path, tenant=_tenant(identity))
    query = {"limit": str(limit)}
    position = parse_cursor(services.cursors, params.get("cursor"), bound_to=bound_to, shape=(str,))
    if position:
        query["after"] = str(position[0])
    page = await _forward(request, "GET", "", query=query)
    items = page.get("items") or []
    cursor = None
    if page.get("more") and items:
        cursor = services.cursors.encode((items[-1]["name"],), bound_to=bound_to)
    return web.json_response({"items": items, "next_cursor": cursor, "total": page.get("total")})


async def read_secret(request: web.Request) -> web.Response:
    query_params(request, set())
    return web.json_response(await _forward(request, "GET", _name(request)))


async def put_secret(request: web.Request) -> web.Response:
    query_params(request, set())
    secret = await json_body(request, max_body=MAX_BODY)
    answer = await _forward(request, "PUT", _name(request), body={"secret": secret})
    return web.json_response(answer.get("secret"), status=201 if answer.get("created") else 200)


async def delete_secret(request: web.Request) -> web.Response:
    query_params(request, set())
    return web.json_response(await _forward(request, "DELETE", _name(request), body={}))


_ACTING = Param("acting_tenant", "An administrator acting for this tenant.")
_ITEM = f"{API_PREFIX}/{RESOURCE}/{{secret}}"
_BODY = {
    "type": "object",
    "required": ["data"],
    "additionalProperties": False,
    "properties": {
        "data": {
            "type": "object",
            "minProperties": 1,
            "description": "{key: value}: keys [-._a-zA-Z0-9]{1,253}, values strings; at most "
            "64 KiB of keys and values together (docs/security.md, Data secrets).",
            "additionalProperties": {"type": "string"},
        }
    },
}
_ERRORS = {400: "Error", 403: "Error", 404: "Error", 409: "Error", 503: "Error"}

ROUTES = (
    RouteSpec(
        "GET",
        f"{API_PREFIX}/{RESOURCE}",
        list_secrets,
        Permission.PIPELINES_READ,
        "The tenant's data secrets by name: names, keys and history, never a value.",
        RESOURCE,
        query=(*PAGE, _ACTING),
        responses={200: "DataSecretList", 400: "Error", 403: "Error"},
    ),
    RouteSpec(
        "GET",
        _ITEM,
        read_secret,
        Permission.PIPELINES_READ,
        "A data secret's name, keys and history, never a value.",
        RESOURCE,
        query=(_ACTING,),
        responses={200: "DataSecret", 400: "Error", 403: "Error", 404: "Error"},
    ),
    RouteSpec(
        "PUT",
        _ITEM,
        put_secret,
        Permission.SECRETS_WRITE,
        "Create (201) or replace (200) a data secret; the answer holds no value. 409 when the "
        "tenant already has DATA_SECRETS_MAX_PER_TENANT of them.",
        RESOURCE,
        query=(_ACTING,),
        body=_BODY,
        responses={200: "DataSecret", 201: "DataSecret", **_ERRORS},
    ),
    RouteSpec(
        "DELETE",
        _ITEM,
        delete_secret,
        Permission.SECRETS_WRITE,
        "Delete a data secret; 409 naming the pipelines whose current version uses it.",
        RESOURCE,
        query=(_ACTING,),
        responses={200: "DataSecretDeleted", **_ERRORS},
    ),
)
