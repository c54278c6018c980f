"""The compiler's internal HTTP API: what the apiserver calls to validate, save, roll back,
delete and run pipelines (docs/api.md, "Compiler internal API").

Only the apiserver calls it, with ``X-Internal-Key: <INTERNAL_API_KEY>``; it has already
authenticated the caller and checked their permission, and passes the effective tenant and the
actor in the body. Errors have the public API's JSON shape, so the apiserver relays them as
they are.

    POST   /internal/v1/pipelines/{kind}/validate      {tenant, actor, pipeline}
    POST   /internal/v1/pipelines/{kind}               {tenant, actor, pipeline}
    PUT    /internal/v1/pipelines/{kind}/{id}          {tenant, actor, pipeline}
    DELETE /internal/v1/pipelines/{kind}/{id}          {tenant, actor}
    POST   /internal/v1/pipelines/{kind}/{id}/rollback {tenant, actor, version}
    POST   /internal/v1/pipelines/{kind}/{id}/run      {tenant, actor, parameters}
    POST   /internal/v1/pipelines/{kind}/{id}/sync     {tenant, actor}
"""

from __future__ import annotations

from typing import Any, Final, cast

from aiohttp import web

from compiler.gitsync.syncing import GitSync
from compiler.pipelines.service import Caller, PipelineService
from shared.errors import Invalid, NotFound
from shared.identifiers import PIPELINE_ID, TENANT_ID
from shared.pipelines import PipelineKind
from shared.web import error_middleware, json_body, key_middleware, request_id_header

INTERNAL_KEY_HEADER: Final = "X-Internal-Key"
PREFIX: Final = "/internal/v1/pipelines"
MAX_BODY: Final = 1024 * 1024  # a YAML template may be 512 KiB, inside JSON
SERVICE = web.AppKey("pipelines", PipelineService)
GIT = web.AppKey("git", GitSync)


def _kind(request: web.Request) -> PipelineKind:
    kind = request.match_info["kind"]
    if kind not in ("data", "ml"):
        raise NotFound(f"no pipeline kind {kind!r}")
    return cast(PipelineKind, kind)


def _pipeline_id(request: web.Request) -> str:
    pipeline_id = request.match_info["id"]
    if not PIPELINE_ID.fullmatch(pipeline_id):
        raise NotFound(f"no pipeline {pipeline_id!r}", details={"id": pipeline_id})
    return pipeline_id


async def _call(request: web.Request) -> tuple[Caller, dict[str, Any]]:
    body = await json_body(request, max_body=MAX_BODY)
    tenant, actor = body.get("tenant"), body.get("actor")
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise Invalid("tenant: a valid tenant id is required", details={"parameter": "tenant"})
    if not isinstance(actor, str) or not actor:
        raise Invalid("actor: required", details={"parameter": "actor"})
    return Caller(tenant, actor[:256]), body


async def validate(request: web.Request) -> web.Response:
    caller, body = await _call(request)
    result = await request.app[SERVICE].validate(caller, _kind(request), body.get("pipeline"))
    return web.json_response(result)


async def create(request: web.Request) -> web.Response:
    caller, body = await _call(request)
    result = await request.app[SERVICE].create(caller, _kind(request), body.get("pipeline"))
    return web.json_response(result, status=201)


async def update(request: web.Request) -> web.Response:
    caller, body = await _call(request)
    service = request.app[SERVICE]
    result = await service.update(
        caller, _kind(request), _pipeline_id(request), body.get("pipeline")
    )
    return web.json_response(result)


async def delete(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    result = await request.app[SERVICE].delete(caller, _kind(request), _pipeline_id(request))
    return web.json_response(result)


async def rollback(request: web.Request) -> web.Response:
    caller, body = await _call(request)
    service = request.app[SERVICE]
    result = await service.rollback(
        caller, _kind(request), _pipeline_id(request), body.get("version")
    )
    return web.json_response(result)


async def run(request: web.Request) -> web.Response:
    caller, body = await _call(request)
    service = request.app[SERVICE]
    result = await service.run(
        caller, _kind(request), _pipeline_id(request), body.get("parameters")
    )
    return web.json_response(result, status=201)


async def sync(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    result = await request.app[GIT].sync_now(caller, _kind(request), _pipeline_id(request))
    return web.json_response(result)


def create_app(
    service: PipelineService, git: GitSync, *, internal_key: str | None
) -> web.Application:
    app = web.Application(
        middlewares=[
            error_middleware("compiler"),
            key_middleware(header=INTERNAL_KEY_HEADER, key=internal_key),
        ],
        client_max_size=MAX_BODY,
    )
    app.on_response_prepare.append(request_id_header)
    app[SERVICE] = service
    app[GIT] = git
    app.router.add_post(f"{PREFIX}/{{kind}}/validate", validate)
    app.router.add_post(f"{PREFIX}/{{kind}}", create)
    app.router.add_put(f"{PREFIX}/{{kind}}/{{id}}", update)
    app.router.add_delete(f"{PREFIX}/{{kind}}/{{id}}", delete)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/rollback", rollback)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/run", run)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/sync", sync)
    return app
