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
    POST   /internal/v1/pipelines/{kind}/{id}/schedule         {tenant, actor}  (its state)
    POST   /internal/v1/pipelines/{kind}/{id}/schedule/pause   {tenant, actor}
    POST   /internal/v1/pipelines/{kind}/{id}/schedule/resume  {tenant, actor}
    POST   /internal/v1/pipelines/{kind}/{id}/triggers/{trigger}/webhook         {tenant, actor}
    POST   /internal/v1/pipelines/{kind}/{id}/triggers/{trigger}/webhook/rotate  {tenant, actor}

Reading a webhook's token is a POST like every other call here: it carries the tenant and the
actor in its body, and it is audited.

    GET    /internal/v1/data-secrets?tenant=&after=&limit=
    GET    /internal/v1/data-secrets/{name}?tenant=
    PUT    /internal/v1/data-secrets/{name}                {tenant, actor, secret: {data}}
    DELETE /internal/v1/data-secrets/{name}                {tenant, actor}
    POST   /internal/v1/pipelines/{kind}/{id}/sync     {tenant, actor}
"""

from __future__ import annotations

from typing import Any, Final, cast

from aiohttp import web

from compiler.automation.service import ScheduleService
from compiler.automation.webhooks import EventTriggers
from compiler.gitsync.syncing import GitSync
from compiler.pipelines.ports import Caller
from compiler.pipelines.service import PipelineService
from compiler.secrets.service import DataSecretService
from shared.errors import Invalid, NotFound
from shared.identifiers import PIPELINE_ID, TENANT_ID, TRIGGER_NAME
from shared.pipelines import PipelineKind
from shared.web import error_middleware, json_body, key_middleware, request_id_header

INTERNAL_KEY_HEADER: Final = "X-Internal-Key"
PREFIX: Final = "/internal/v1/pipelines"
SECRETS_PREFIX: Final = "/internal/v1/data-secrets"
MAX_BODY: Final = 1024 * 1024  # a YAML template may be 512 KiB, inside JSON
MAX_LIMIT: Final = 500
SERVICE = web.AppKey("pipelines", PipelineService)
SCHEDULES = web.AppKey("schedules", ScheduleService)
TRIGGERS = web.AppKey("triggers", EventTriggers)
SECRETS = web.AppKey("data_secrets", DataSecretService)
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


def _trigger(request: web.Request) -> str:
    trigger = request.match_info["trigger"]
    if not TRIGGER_NAME.fullmatch(trigger):
        raise NotFound(f"no trigger {trigger!r}", details={"trigger": trigger})
    return trigger


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


async def schedule_state(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    schedules = request.app[SCHEDULES]
    result = await schedules.state(caller, _kind(request), _pipeline_id(request))
    return web.json_response(result)


async def pause(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    paused = request.match_info["action"] == "pause"
    schedules = request.app[SCHEDULES]
    result = await schedules.pause(caller, _kind(request), _pipeline_id(request), paused=paused)
    return web.json_response(result)


async def webhook(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    triggers = request.app[TRIGGERS]
    result = await triggers.webhook(
        caller, _kind(request), _pipeline_id(request), _trigger(request)
    )
    return web.json_response(result)


async def rotate_webhook(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    triggers = request.app[TRIGGERS]
    result = await triggers.rotate(caller, _kind(request), _pipeline_id(request), _trigger(request))
    return web.json_response(result)


# --- data secrets ----------------------------------------------------------------------------
def _tenant_param(request: web.Request) -> str:
    tenant = request.query.get("tenant", "")
    if not TENANT_ID.fullmatch(tenant):
        raise Invalid("tenant: a valid tenant id is required", details={"parameter": "tenant"})
    return tenant


async def list_secrets(request: web.Request) -> web.Response:
    tenant = _tenant_param(request)
    limit_text = request.query.get("limit", str(MAX_LIMIT))
    if (
        not limit_text.isascii()
        or not limit_text.isdigit()
        or not 1 <= int(limit_text) <= MAX_LIMIT
    ):
        raise Invalid(f"limit: an integer from 1 to {MAX_LIMIT}", details={"parameter": "limit"})
    after = request.query.get("after") or None
    result = await request.app[SECRETS].listing(tenant, after=after, limit=int(limit_text))
    return web.json_response(result)


async def read_secret(request: web.Request) -> web.Response:
    tenant = _tenant_param(request)
    return web.json_response(await request.app[SECRETS].read(tenant, request.match_info["name"]))


async def put_secret(request: web.Request) -> web.Response:
    caller, body = await _call(request)
    item, created = await request.app[SECRETS].put(
        caller.tenant, caller.actor, request.match_info["name"], body.get("secret")
    )
    return web.json_response({"secret": item, "created": created}, status=201 if created else 200)


async def delete_secret(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    service = request.app[SECRETS]
    return web.json_response(
        await service.delete(caller.tenant, caller.actor, request.match_info["name"])
    )


async def sync(request: web.Request) -> web.Response:
    caller, _ = await _call(request)
    result = await request.app[GIT].sync_now(caller, _kind(request), _pipeline_id(request))
    return web.json_response(result)


def create_app(
    service: PipelineService,
    git: GitSync,
    *,
    schedules: ScheduleService,
    triggers: EventTriggers,
    internal_key: str | None,
    data_secrets: DataSecretService | None = None,
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
    app[SCHEDULES] = schedules
    app[TRIGGERS] = triggers
    app[GIT] = git
    app.router.add_post(f"{PREFIX}/{{kind}}/validate", validate)
    app.router.add_post(f"{PREFIX}/{{kind}}", create)
    app.router.add_put(f"{PREFIX}/{{kind}}/{{id}}", update)
    app.router.add_delete(f"{PREFIX}/{{kind}}/{{id}}", delete)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/rollback", rollback)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/run", run)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/schedule", schedule_state)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/schedule/{{action:pause|resume}}", pause)
    webhook_path = f"{PREFIX}/{{kind}}/{{id}}/triggers/{{trigger}}/webhook"
    app.router.add_post(webhook_path, webhook)
    app.router.add_post(f"{webhook_path}/rotate", rotate_webhook)
    if data_secrets is not None:
        app[SECRETS] = data_secrets
        app.router.add_get(SECRETS_PREFIX, list_secrets)
        app.router.add_get(f"{SECRETS_PREFIX}/{{name}}", read_secret)
        app.router.add_put(f"{SECRETS_PREFIX}/{{name}}", put_secret)
        app.router.add_delete(f"{SECRETS_PREFIX}/{{name}}", delete_secret)
    app.router.add_post(f"{PREFIX}/{{kind}}/{{id}}/sync", sync)
    return app
