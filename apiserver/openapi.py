"""The OpenAPI 3 document of the apiserver, rendered from the route table it serves."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from apiserver.auth import (
    ACTOR_HEADER,
    ADMIN_HEADER,
    PERMISSIONS_HEADER,
    TENANT_HEADER,
    Special,
)
from apiserver.routing import API_PREFIX, ROUTE_SPEC, RouteSpec

_PLACEHOLDER = re.compile(r"{([^}]+)}")

_ERROR = {
    "type": "object",
    "required": ["error", "message", "details"],
    "properties": {
        "error": {"type": "string"},
        "message": {"type": "string"},
        "details": {"type": "object"},
    },
}
_RUN = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "cluster": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "region": {"type": "string", "nullable": True},
                "provider": {"type": "string", "nullable": True},
            },
        },
        "namespace": {"type": "string"},
        "name": {"type": "string"},
        "uid": {"type": "string"},
        "tenant": {"type": "string", "nullable": True},
        "source": {"type": "string"},
        "phase": {"type": "string"},
        "message": {"type": "string", "nullable": True},
        "progress": {"type": "object", "nullable": True},
        "created_at": {"type": "string", "format": "date-time", "nullable": True},
        "started_at": {"type": "string", "format": "date-time", "nullable": True},
        "finished_at": {"type": "string", "format": "date-time", "nullable": True},
        "duration_seconds": {"type": "number", "nullable": True},
        "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
        "template": {"type": "string", "nullable": True},
        "pipeline": {"type": "object", "nullable": True},
        "deleted": {"type": "boolean"},
    },
}
SCHEMAS: dict[str, Any] = {
    "Error": _ERROR,
    "Run": _RUN,
    "RunPage": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Run"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
            "total_capped": {"type": "boolean"},
        },
    },
    "RunSummary": {
        "type": "object",
        "properties": {
            "phases": {"type": "object", "additionalProperties": {"type": "integer"}},
            "total": {"type": "integer"},
            "failures_last_24h": {"type": "integer"},
            "since": {"type": "string", "format": "date-time"},
        },
    },
    "RunDetail": {
        "allOf": [
            {"$ref": "#/components/schemas/Run"},
            {
                "type": "object",
                "properties": {
                    "labels": {"type": "object"},
                    "graph": {"type": "object"},
                    "actions": {"type": "array", "items": {"$ref": "#/components/schemas/Action"}},
                },
            },
        ]
    },
    "Action": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "action": {"type": "string"},
            "actor": {"type": "string"},
            "outcome": {"type": "string", "enum": ["succeeded", "failed"]},
            "detail": {"type": "object"},
            "at": {"type": "string", "format": "date-time"},
        },
    },
    "ActionResult": {
        "type": "object",
        "properties": {
            "action": {"type": "string"},
            "outcome": {"type": "string"},
            "workflow": {"type": "object"},
        },
    },
    "Cluster": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "region": {"type": "string", "nullable": True},
            "provider": {"type": "string", "nullable": True},
            "host": {"type": "boolean"},
            "registered": {"type": "boolean"},
            "argo": {"type": "object"},
        },
    },
    "ClusterList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Cluster"}}
        },
    },
    "Grant": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "tenant": {"type": "string"},
            "cluster_id": {"type": "string"},
            "namespace": {"type": "string"},
            "granted_by": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
        },
    },
    "GrantList": {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Grant"}}},
    },
    "Pipeline": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "tenant": {"type": "string"},
            "kind": {"type": "string", "enum": ["data", "ml"]},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "definition_type": {"type": "string", "enum": ["wizard", "yaml", "git"]},
            "current_version": {"type": "integer"},
            "latest_version": {"type": "integer"},
            "created_by": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "current": {"$ref": "#/components/schemas/PipelineVersion"},
        },
    },
    "PipelineList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/Pipeline"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
        },
    },
    "PipelineVersion": {
        "type": "object",
        "properties": {
            "version": {"type": "integer"},
            "template_name": {"type": "string"},
            "template_applied": {"type": "boolean"},
            "parameters": {"type": "array", "items": {"type": "object"}},
            "definition": {"type": "object"},
            "template": {"type": "object"},
            "current": {"type": "boolean"},
            "created_by": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
        },
    },
    "PipelineVersionList": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/PipelineVersion"}},
            "next_cursor": {"type": "string", "nullable": True},
            "total": {"type": "integer"},
        },
    },
    "PipelineSaved": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "version": {"type": "integer"},
            "template_name": {"type": "string"},
            "warnings": {"type": "array", "items": {"type": "string"}},
        },
    },
    "PipelineValidation": {
        "type": "object",
        "properties": {
            "valid": {"type": "boolean"},
            "template": {"type": "object"},
            "warnings": {"type": "array", "items": {"type": "string"}},
        },
    },
    "PipelineDeleted": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "deleted": {"type": "boolean"},
            "templates_removed": {"type": "integer"},
        },
    },
    "PipelineRollback": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "current_version": {"type": "integer"},
            "template_restored": {"type": "boolean"},
        },
    },
    "PipelineRun": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "version": {"type": "integer"},
            "workflow": {"type": "object"},
            "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "RefreshAccepted": {"type": "object", "properties": {"refresh": {"type": "string"}}},
    "EventStream": {"type": "string", "description": "text/event-stream"},
    "Text": {"type": "string"},
    "Binary": {"type": "string", "format": "binary"},
    "OpenAPI": {"type": "object"},
}


def _operation_id(spec: RouteSpec) -> str:
    """The handler's name, prefixed by its tag where one handler serves several route groups
    (the data and ML pipeline routes), so that every operationId is unique."""
    name = spec.handler.__name__
    if spec.tag.endswith("pipelines"):
        return f"{spec.tag.replace('-', '_')}_{name}"
    return name


def _operation(spec: RouteSpec) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PLACEHOLDER.findall(spec.path)
    ]
    for param in spec.query:
        schema: dict[str, Any] = {"type": param.type}
        if param.enum:
            schema["enum"] = list(param.enum)
        parameters.append(
            {
                "name": param.name,
                "in": "query",
                "required": param.required,
                "description": param.description,
                "schema": schema,
            }
        )
    responses: dict[str, Any] = {}
    for status, schema_name in sorted(spec.responses.items()):
        media = spec.content_type if status < 300 else "application/json"
        responses[str(status)] = {
            "description": schema_name,
            "content": {media: {"schema": {"$ref": f"#/components/schemas/{schema_name}"}}},
        }
    responses.setdefault(
        "401", {"description": "missing or wrong X-API-Key", "content": _json_error()}
    )
    operation: dict[str, Any] = {
        "operationId": _operation_id(spec),
        "summary": spec.summary,
        "tags": [spec.tag],
        "parameters": parameters,
        "responses": responses,
        "x-access": str(spec.access),
    }
    security: list[dict[str, list[str]]] = [{"apiKey": []}]
    operation["security"] = security
    if spec.access is not Special.INTERNAL:
        operation["parameters"] += [
            {"name": header, "in": "header", "required": False, "schema": {"type": "string"}}
            for header in (TENANT_HEADER, ADMIN_HEADER, PERMISSIONS_HEADER, ACTOR_HEADER)
        ]
    if spec.body is not None:
        operation["requestBody"] = {
            "required": spec.method != "DELETE",
            "content": {"application/json": {"schema": dict(spec.body)}},
        }
    return operation


def _json_error() -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


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
