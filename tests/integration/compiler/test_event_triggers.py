"""Webhook triggers end to end: a pipeline saved with a trigger gets an event source, a sensor
and a token Secret in the events namespace; the tenant reads its URL and token through the
apiserver; a POST with the token to the simulated Argo Events endpoint starts a run of the
current version with the event's fields as parameters, on the data controller; tokens rotate;
updates, removals and deletes follow; another tenant sees nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest

from compiler.pipelines.stamping import template_name
from shared.runs import RunSource
from tests.integration.compiler.pipeline_stack import (
    INSTANCE_LABEL,
    NS,
    Stack,
    finish,
    headers,
    make_stack,
)
from watcher.normalise import source_of

EVENTS = "kubeopera-pipeline-events"
PUBLIC_HOST = "hooks.example.test"
TEMPLATE = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata:
  name: ingest
spec:
  entrypoint: main
  arguments:
    parameters:
      - name: file
      - name: size
        value: "10"
      - name: mode
        value: fast
  templates:
    - name: main
      container:
        image: alpine:3.20
        command: [sh, -c, "echo {{workflow.parameters.file}} {{workflow.parameters.size}}"]
"""
ON_UPLOAD = {
    "name": "on-upload",
    "type": "webhook",
    "parameters": {"file": "body.object.key", "size": "header.x-size"},
}


def pipeline(*triggers: dict[str, Any], name: str = "ingest") -> dict[str, Any]:
    return {
        "name": name,
        "definition": {"type": "yaml", "template": TEMPLATE},
        "triggers": list(triggers),
    }


@pytest.fixture
async def hooks(db: asyncpg.Pool, database_url: str, settings_factory: Any) -> AsyncIterator[Stack]:
    async for value in make_stack(
        db, database_url, settings_factory, EVENTS_PUBLIC_HOST=PUBLIC_HOST
    ):
        yield value


def objects(stack: Stack, plural: str, namespace: str = EVENTS) -> dict[str, dict[str, Any]]:
    store = stack.world.host.store
    group, version = {
        "secrets": ("", "v1"),
        "ingresses": ("networking.k8s.io", "v1"),
    }.get(plural, ("argoproj.io", "v1alpha1"))
    items, _ = store.list(store.resolve(group, version, plural), namespace)
    return {item["metadata"]["name"]: item for item in items}


async def post_event(
    stack: Stack, path: str, token: str | None, body: Any, **extra: str
) -> tuple[int, str]:
    events = stack.world.host.events
    assert events is not None
    sent = {"Content-Type": "application/json", **extra}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{events.url}{path}", data=json.dumps(body), headers=sent) as answer,
    ):
        text = await answer.text()
    await events.drain()
    return answer.status, text


async def created(stack: Stack) -> dict[str, Any]:
    status, saved = await stack.call("POST", "data-pipelines", json=pipeline(ON_UPLOAD))
    assert status == 201, saved
    return saved


async def webhook(stack: Stack, pipeline_id: str, trigger: str = "on-upload") -> dict[str, Any]:
    status, answer = await stack.call(
        "GET", f"data-pipelines/{pipeline_id}/triggers/{trigger}/webhook"
    )
    assert status == 200, answer
    return answer


async def test_a_webhook_posted_with_its_token_starts_a_run_of_the_current_version(
    hooks: Stack,
) -> None:
    saved = await created(hooks)
    pipeline_id = saved["id"]
    name = f"p-{pipeline_id}"
    assert name in objects(hooks, "eventsources")
    assert name in objects(hooks, "sensors")
    assert f"{name}-webhooks" in objects(hooks, "secrets")
    assert f"{name}-webhooks" in objects(hooks, "ingresses")

    hook = await webhook(hooks, pipeline_id)
    path = f"/hooks/{pipeline_id}/on-upload"
    assert hook["path"] == path
    assert hook["url"] == f"https://{PUBLIC_HOST}{path}"
    assert len(hook["token"]) >= 40
    assert f"Authorization: Bearer {hook['token']}" in hook["curl"]
    assert hook["url"] in hook["curl"]
    assert '{"object":{"key":"<file>"}}' in hook["curl"]
    assert "X-Size: <size>" in hook["curl"]

    status, text = await post_event(
        hooks, path, hook["token"], {"object": {"key": "in/a.csv"}}, **{"X-Size": "42"}
    )
    assert (status, text) == (200, "success")
    [(workflow_name, workflow)] = objects(hooks, "workflows", NS).items()
    labels = workflow["metadata"]["labels"]
    assert labels["events.argoproj.io/sensor"] == name
    assert labels["events.argoproj.io/trigger"] == "on-upload"
    assert labels["kubeopera.io/trigger"] == "on-upload"
    assert labels[INSTANCE_LABEL] == "kubeopera-data"
    assert labels["kubeopera.io/pipeline-id"] == pipeline_id
    assert workflow["spec"] == {
        "workflowTemplateRef": {"name": template_name(pipeline_id, 1)},
        "arguments": {
            "parameters": [{"name": "file", "value": "in/a.csv"}, {"name": "size", "value": "42"}]
        },
    }
    finished = await finish(hooks, workflow_name)
    assert finished["status"]["phase"] == "Succeeded"

    # A field the event lacks falls back to the parameter's default; a required one fails
    # the trigger (at most once: no run, nothing retried).
    assert (await post_event(hooks, path, hook["token"], {"object": {"key": "b"}}))[0] == 200
    runs = objects(hooks, "workflows", NS)
    assert len(runs) == 2
    [second] = [w for n, w in runs.items() if n != workflow_name]
    assert second["spec"]["arguments"]["parameters"][1] == {"name": "size", "value": "10"}
    assert (await post_event(hooks, path, hook["token"], {"other": 1}))[0] == 200
    assert len(objects(hooks, "workflows", NS)) == 2
    events = hooks.world.host.events
    assert events is not None
    assert events.fired[-1].error is not None

    audit = await hooks.pool.fetch(
        "SELECT actor, action, outcome, parameters, detail FROM run_actions ORDER BY id"
    )
    assert [(r["actor"], r["action"], r["outcome"]) for r in audit] == [
        ("alice@acme", "webhook_token_read", "succeeded")
    ]
    assert hook["token"] not in json.dumps([dict(r) for r in audit], default=str)


async def test_a_run_started_by_a_webhook_has_the_source_event_trigger(hooks: Stack) -> None:
    saved = await created(hooks)
    hook = await webhook(hooks, saved["id"])
    await post_event(hooks, hook["path"], hook["token"], {"object": {"key": "k"}})
    [workflow] = objects(hooks, "workflows", NS).values()
    source = source_of(namespace=NS, labels=workflow["metadata"]["labels"])
    assert source == RunSource.EVENT_TRIGGER


async def test_a_missing_or_wrong_token_is_refused_and_starts_nothing(hooks: Stack) -> None:
    saved = await created(hooks)
    hook = await webhook(hooks, saved["id"])
    event = {"object": {"key": "x"}}
    assert await post_event(hooks, hook["path"], None, event) == (
        401,
        "Invalid Authorization Header",
    )
    assert await post_event(hooks, hook["path"], "nope", event) == (401, "Invalid Auth token")
    assert await post_event(hooks, f"/hooks/{saved['id']}/other", hook["token"], event) == (
        404,
        "404 page not found",
    )
    assert objects(hooks, "workflows", NS) == {}


async def test_rotating_a_token_retires_the_old_one(hooks: Stack) -> None:
    saved = await created(hooks)
    old = await webhook(hooks, saved["id"])
    status, rotated = await hooks.call(
        "POST", f"data-pipelines/{saved['id']}/triggers/on-upload/webhook/rotate"
    )
    assert status == 200, rotated
    assert rotated["token"] != old["token"]
    assert rotated["url"] == old["url"]
    status, refused = await hooks.call(
        "POST", f"data-pipelines/{saved['id']}/triggers/on-upload/webhook/rotate", json={"x": 1}
    )
    assert (status, refused["details"]) == (400, {"parameter": "x"})
    assert (await webhook(hooks, saved["id"]))["token"] == rotated["token"]
    event = {"object": {"key": "x"}}
    assert (await post_event(hooks, old["path"], old["token"], event))[0] == 401
    assert (await post_event(hooks, old["path"], rotated["token"], event))[0] == 200
    assert len(objects(hooks, "workflows", NS)) == 1
    actions = await hooks.pool.fetch("SELECT action, outcome FROM run_actions ORDER BY id")
    assert [r["action"] for r in actions] == [
        "webhook_token_read",
        "webhook_token_rotate",
        "webhook_token_read",
    ]


async def test_updates_follow_removals_clean_up_and_tokens_are_kept_per_name(
    hooks: Stack,
) -> None:
    saved = await created(hooks)
    pipeline_id, name = saved["id"], f"p-{saved['id']}"
    token = (await webhook(hooks, pipeline_id))["token"]
    nightly = {"name": "nightly", "type": "webhook", "parameters": {"file": "body.f"}}
    status, updated = await hooks.call(
        "PUT", f"data-pipelines/{pipeline_id}", json=pipeline(ON_UPLOAD, nightly)
    )
    assert (status, updated["version"]) == (200, 2), updated
    sensor = objects(hooks, "sensors")[name]
    refs = {
        trigger["template"]["argoWorkflow"]["source"]["resource"]["spec"]["workflowTemplateRef"][
            "name"
        ]
        for trigger in sensor["spec"]["triggers"]
    }
    assert refs == {template_name(pipeline_id, 2)}
    assert (await webhook(hooks, pipeline_id))["token"] == token  # kept across versions
    assert set(objects(hooks, "eventsources")[name]["spec"]["webhook"]) == {
        "on-upload",
        "nightly",
    }

    status, _ = await hooks.call("PUT", f"data-pipelines/{pipeline_id}", json=pipeline(nightly))
    assert status == 200
    status, gone = await hooks.call(
        "GET", f"data-pipelines/{pipeline_id}/triggers/on-upload/webhook"
    )
    assert status == 404, gone
    status, _ = await hooks.call("PUT", f"data-pipelines/{pipeline_id}", json=pipeline(ON_UPLOAD))
    assert status == 200
    assert (await webhook(hooks, pipeline_id))["token"] != token  # a name back: a new token

    status, _ = await hooks.call("PUT", f"data-pipelines/{pipeline_id}", json=pipeline())
    assert status == 200
    for plural in ("eventsources", "sensors", "secrets", "ingresses"):
        assert objects(hooks, plural) == {}, plural

    status, _ = await hooks.call(
        "POST", f"data-pipelines/{pipeline_id}/rollback", json={"version": 2}
    )
    assert status == 200
    assert set(objects(hooks, "sensors")) == {name}
    status, _ = await hooks.call("DELETE", f"data-pipelines/{pipeline_id}")
    assert status == 200
    for plural in ("eventsources", "sensors", "secrets", "ingresses"):
        assert objects(hooks, plural) == {}, plural


async def test_another_tenants_webhook_is_not_found(hooks: Stack) -> None:
    saved = await created(hooks)
    base = f"data-pipelines/{saved['id']}/triggers/on-upload/webhook"
    globex = headers("globex", actor="mallory@globex")
    for method, path in (("GET", base), ("POST", f"{base}/rotate")):
        status, answer = await hooks.call(method, path, as_=globex)
        assert (status, answer["error"]) == (404, "not_found"), answer
        status, answer = await hooks.call(method, path.replace("data-", "ml-"))
        assert status == 404, answer
    status, answer = await hooks.call("GET", f"data-pipelines/{saved['id']}/triggers/nope/webhook")
    assert status == 404
    reader = headers(permissions="pipelines.read")
    status, answer = await hooks.call("GET", base, as_=reader)
    assert status == 403, answer
    assert await hooks.pool.fetchval("SELECT count(*) FROM run_actions") == 0


@pytest.mark.parametrize(
    ("parameters", "field", "message"),
    [
        ({"file": "body.a", "nope": "body.b"}, "triggers[0].parameters.nope", "not declared"),
        ({"size": "body.a"}, "triggers[0].parameters.file", "required"),
        ({"file": "body.a[0]"}, "triggers[0].parameters.file", "body path segment"),
        ({"file": "header.Authorization"}, "triggers[0].parameters.file", "masks"),
    ],
)
async def test_selectors_and_mappings_are_checked_at_save(
    hooks: Stack, parameters: dict[str, str], field: str, message: str
) -> None:
    trigger = {"name": "t", "type": "webhook", "parameters": parameters}
    for method, path in (("POST", "data-pipelines/validate"), ("POST", "data-pipelines")):
        status, answer = await hooks.call(method, path, json=pipeline(trigger))
        assert status == 400, answer
        [error] = answer["details"]["errors"]
        assert error["field"] == field, error
        assert message in error["message"], error
    assert objects(hooks, "sensors") == {}


async def test_without_a_public_host_the_webhook_answers_its_token_and_path(
    stack: Stack,
) -> None:
    saved = await created(stack)
    hook = await webhook(stack, saved["id"])
    assert hook["url"] is None
    assert hook["curl"] is None
    assert "EVENTS_PUBLIC_HOST" in hook["warning"]
    assert objects(stack, "ingresses") == {}
    event = {"object": {"key": "k"}}
    assert (await post_event(stack, hook["path"], hook["token"], event))[0] == 200
    assert len(objects(stack, "workflows", NS)) == 1
