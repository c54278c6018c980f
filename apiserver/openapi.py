"""The OpenAPI 3 document of the apiserver, rendered from the route table it serves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web

from apiserver.auth import (
    ACTING_TENANT_PARAM,
    ACTOR_HEADER,
    ADMIN_HEADER,
    PERMISSIONS_HEADER,
    TENANT_HEADER,
    Permission,
    Special,
)
from apiserver.routing import API_PREFIX, ROUTE_SPEC, Param, RouteSpec, path_params
from apiserver.schemas import SCHEMAS
from shared.identifiers import TENANT_ID
from shared.web import REQUEST_ID_HEADER


def _operation_id(spec: RouteSpec) -> str:
    """The handler's name, prefixed by its tag where one handler serves several route groups
    (the data and ML pipeline routes), so that every operationId is unique."""
    name = spec.handler.__name__
    if spec.tag.endswith("pipelines"):
        return f"{spec.tag.replace('-', '_')}_{name}"
    return name


# What each error status means on every route that can answer it (docs/api.md, "Errors").
ERROR_MEANINGS: Mapping[int, str] = {
    400: "A query parameter, header, path segment or body field breaks its rule "
    "(details.parameter names it), or the route does not take a query parameter.",
    401: "Missing or wrong X-API-Key.",
    403: "The caller may not use this route (details.permission or details.admin), has no "
    "tenant without being an administrator, or gave acting_tenant without being one.",
    404: "Nothing of that name, or nothing the caller may see: the same answer.",
    409: "The target's state refuses the request (details.reason).",
    422: "The pipeline's template is refused (details.violations).",
    503: "A dependency did not answer: PostgreSQL, a cluster, its Argo server, object storage, "
    "the pipeline compiler or the tracking server (MLflow).",
}
ACTING_TENANT = Param(
    ACTING_TENANT_PARAM,
    "An administrator acting for this tenant (sees exactly what the tenant sees).",
    pattern=TENANT_ID.pattern,
    max_length=48,
)
IDENTITY_HEADERS: tuple[Param, ...] = (
    Param(
        TENANT_HEADER,
        "The caller's tenant; required unless X-Kubeopera-Admin is true.",
        pattern=TENANT_ID.pattern,
        max_length=48,
    ),
    Param(ADMIN_HEADER, "Whether the caller is a platform administrator.", enum=("true", "false")),
    Param(
        PERMISSIONS_HEADER,
        "The caller's permissions, comma-separated: " + ", ".join(p.value for p in Permission),
    ),
    Param(ACTOR_HEADER, "Who the caller is, for the audit (the first 256 characters are kept)."),
)
_REQUEST_ID = {
    REQUEST_ID_HEADER: {
        "description": "The caller's X-Request-Id when it is 1-64 visible ASCII characters, "
        "else one of ours; on streamed answers too.",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": 64},
    }
}


def _parameter(param: Param, where: str) -> dict[str, Any]:
    parameter: dict[str, Any] = {
        "name": param.name,
        "in": where,
        "required": param.required or where == "path",
        "description": param.description,
        "schema": param.schema(),
    }
    if param.example is not None:
        parameter["example"] = param.example
    return parameter


def error_statuses(spec: RouteSpec) -> list[int]:
    """Every error status ``spec``'s route can answer. Purely computational.

    Every route can refuse the key (401); a route for callers (not ``internal``) reads their
    identity headers and query (400, 403) and PostgreSQL (503); a path with placeholders can
    name nothing (404); the route declares the rest (409, 422, ...)."""
    statuses = {401, *(status for status in spec.responses if status >= 400)}
    if spec.access is not Special.INTERNAL:
        statuses |= {400, 403, 503}
    if path_params(spec.path):
        statuses.add(404)
    return sorted(statuses)


def _operation(spec: RouteSpec) -> dict[str, Any]:
    caller = spec.access is not Special.INTERNAL
    parameters = [_parameter(param, "path") for param in path_params(spec.path)]
    query = [param for param in spec.query if param.name != ACTING_TENANT_PARAM]
    parameters += [_parameter(param, "query") for param in query]
    if caller:
        parameters.append(_parameter(ACTING_TENANT, "query"))
        parameters += [_parameter(param, "header") for param in IDENTITY_HEADERS]
    parameters += [_parameter(param, "header") for param in spec.headers]
    responses: dict[str, Any] = {}
    for status, schema_name in sorted(spec.responses.items()):
        if status < 400:
            responses[str(status)] = {
                "description": spec.summary,
                "headers": _REQUEST_ID,
                "content": {spec.content_type: {"schema": _ref(schema_name)}},
            }
    for status in error_statuses(spec):
        responses[str(status)] = {
            "description": ERROR_MEANINGS.get(status, "An error."),
            "headers": _REQUEST_ID,
            "content": {"application/json": {"schema": _ref("Error")}},
        }
    responses["401"]["headers"] = {
        **_REQUEST_ID,
        "WWW-Authenticate": {"required": True, "schema": {"type": "string", "enum": ["X-API-Key"]}},
    }
    operation: dict[str, Any] = {
        "operationId": _operation_id(spec),
        "summary": spec.summary,
        "tags": [spec.tag],
        "parameters": parameters,
        "responses": responses,
        "security": [{"apiKey": []}],
        "x-access": str(spec.access),
    }
    if spec.body is not None:
        operation["requestBody"] = {
            "required": spec.method != "DELETE",
            "content": {"application/json": {"schema": dict(spec.body)}},
        }
    return operation


def _ref(schema_name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema_name}"}


def document(specs: Iterable[RouteSpec]) -> dict[str, Any]:
    """The OpenAPI 3.0 document for ``specs``. Purely computational."""
    paths: dict[str, dict[str, Any]] = {}
    for spec in specs:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "workflow-manager apiserver",
            "version": "1",
            "description": "Called by kubeopera-api only; see docs/api.md for the contracts.",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
        },
    }


async def serve(request: web.Request) -> web.Response:
    return web.json_response(document(request.app[ROUTE_SPEC].values()))


ROUTE = RouteSpec(
    "GET",
    f"{API_PREFIX}/openapi.json",
    serve,
    Special.INTERNAL,
    "This document.",
    "meta",
    responses={200: "OpenAPI"},
)
