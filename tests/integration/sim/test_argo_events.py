"""The Argo Events stand-in over real HTTP: upstream's webhook checks in upstream's order, the
event it builds, and sensors firing as their service account (hand-written objects, not the
compiler's: this is the simulator's contract)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sim.events.argo_events import ArgoEventsSim
from sim.kube.store import ClusterStore

EVENTS = "events"
TENANT = "kubeopera-data-acme"
OTHER = "kubeopera-data-globex"
TOKEN = "s3cret"
TOO_LARGE = "failed to parse request body, http: request body too large"


def create(store: ClusterStore, group: str, version: str, plural: str, obj: dict[str, Any]) -> None:
    namespace = obj["metadata"].get("namespace")
    store.create(store.resolve(group, version, plural), namespace, obj)


def event_source(**entry: Any) -> dict[str, Any]:
    webhook = {
        "endpoint": "/hooks/p/t",
        "method": "POST",
        "port": "12000",
        "authSecret": {"name": "tokens", "key": "t"},
        **entry,
    }
    return {"metadata": {"name": "src", "namespace": EVENTS}, "spec": {"webhook": {"t": webhook}}}


def parameter(key: str, index: int, **src: str) -> dict[str, Any]:
    return {
        "src": {"dependencyName": "dep", "dataKey": key, **src},
        "dest": f"spec.arguments.parameters.{index}.value",
    }


def sensor(
    namespace: str = TENANT, *, args: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    action: dict[str, Any] = {
        "operation": "submit",
        "source": {
            "resource": {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Workflow",
                "metadata": {
                    "generateName": "run-",
                    "namespace": namespace,
                    "labels": {"workflows.argoproj.io/controller-instanceid": "kubeopera-data"},
                },
                "spec": {
                    "workflowTemplateRef": {"name": "tpl"},
                    "arguments": {
                        "parameters": [
                            {"name": "a", "value": ""},
                            {"name": "b", "value": ""},
                            {"name": "c", "value": ""},
                        ]
                    },
                },
            }
        },
        "parameters": [
            parameter("body.items.1.id", 0),
            parameter("header.X-Id.0", 1),
            parameter("body.n", 2, value="dflt"),
        ],
        **extra,
    }
    if args is not None:
        action["args"] = args
    return {
        "metadata": {"name": "sns", "namespace": EVENTS},
        "spec": {
            "template": {"serviceAccountName": "sensor-acme"},
            "dependencies": [{"name": "dep", "eventSourceName": "src", "eventName": "t"}],
            "triggers": [{"template": {"name": "go", "conditions": "dep", "argoWorkflow": action}}],
        },
    }


@pytest.fixture
async def world() -> AsyncIterator[tuple[ClusterStore, ArgoEventsSim]]:
    store = ClusterStore("events-test")
    for name in (EVENTS, TENANT, OTHER):
        create(store, "", "v1", "namespaces", {"metadata": {"name": name}})
    secret = {
        "metadata": {"name": "tokens", "namespace": EVENTS},
        "data": {"t": base64.b64encode(TOKEN.encode()).decode()},
    }
    create(store, "", "v1", "secrets", secret)
    for namespace in (TENANT, OTHER):
        template = {"metadata": {"name": "tpl", "namespace": namespace}, "spec": {}}
        create(store, "argoproj.io", "v1alpha1", "workflowtemplates", template)
    binding = {
        "metadata": {"name": "sensor", "namespace": TENANT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "x"},
        "subjects": [{"kind": "ServiceAccount", "name": "sensor-acme", "namespace": EVENTS}],
    }
    create(store, "rbac.authorization.k8s.io", "v1", "rolebindings", binding)
    events = ArgoEventsSim(store)
    await events.start()
    try:
        yield store, events
    finally:
        await events.stop()


async def send(
    events: ArgoEventsSim,
    *,
    path: str = "/hooks/p/t",
    method: str = "POST",
    token: str | None = TOKEN,
    data: str | bytes = "{}",
    **headers: str,
) -> tuple[int, str]:
    sent = dict(headers)
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"{events.url}{path}", data=data, headers=sent) as answer,
    ):
        text = await answer.text()
    await events.drain()
    return answer.status, text


def workflows(store: ClusterStore, namespace: str = TENANT) -> list[dict[str, Any]]:
    items, _ = store.list(store.resolve("argoproj.io", "v1alpha1", "workflows"), namespace)
    return items


async def test_an_event_with_its_token_fires_the_sensor_with_mapped_parameters(
    world: tuple[ClusterStore, ArgoEventsSim],
) -> None:
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source())
    create(
        store, "argoproj.io", "v1alpha1", "sensors", sensor(args=["--instanceid", "kubeopera-data"])
    )
    body = json.dumps({"items": [{"id": 1}, {"id": {"deep": True}}]})
    assert await send(events, data=body, **{"x-id": "abc"}) == (200, "success")
    [workflow] = workflows(store)
    assert workflow["spec"]["arguments"]["parameters"] == [
        {"name": "a", "value": '{"deep":true}'},
        {"name": "b", "value": "abc"},
        {"name": "c", "value": "dflt"},
    ]
    labels = workflow["metadata"]["labels"]
    assert labels["events.argoproj.io/sensor"] == "sns"
    assert labels["events.argoproj.io/trigger"] == "go"
    assert labels["events.argoproj.io/action-timestamp"].isdigit()
    assert labels["workflows.argoproj.io/controller-instanceid"] == "kubeopera-data"
    assert events.fired[-1].workflow == workflow["metadata"]["name"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"token": None}, (401, "Invalid Authorization Header")),
        ({"token": "wrong"}, (401, "Invalid Auth token")),
        ({"token": None, "Authorization": "Basic czNjcmV0"}, (401, "Invalid Authorization Header")),
        ({"method": "PUT"}, (400, "http method does not match")),
        ({"method": "PUT", "token": "wrong"}, (401, "Invalid Auth token")),  # auth comes first
        ({"data": "not json"}, (400, "json: error calling MarshalJSON for type *json.RawMessage")),
        ({"data": b"{" + b" " * 300 + b"}"}, (400, TOO_LARGE)),
        ({"path": "/hooks/p/other"}, (404, "404 page not found")),
    ],
)  # fmt: skip
async def test_refusals_start_nothing(
    world: tuple[ClusterStore, ArgoEventsSim], change: dict[str, Any], expected: tuple[int, str]
) -> None:
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source(maxPayloadSize=100))
    create(
        store, "argoproj.io", "v1alpha1", "sensors", sensor(args=["--instanceid", "kubeopera-data"])
    )
    assert await send(events, **change) == expected
    assert workflows(store) == []


async def test_the_token_is_read_again_on_every_request(
    world: tuple[ClusterStore, ArgoEventsSim],
) -> None:
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source())
    secrets = store.resolve("", "v1", "secrets")
    new = {"data": {"t": base64.b64encode(b"new").decode()}}
    store.patch(secrets, EVENTS, "tokens", new, content_type="application/merge-patch+json")
    assert (await send(events))[0] == 401
    assert (await send(events, token="new"))[0] == 200
    store.delete(secrets, EVENTS, "tokens")
    assert await send(events, token="new") == (500, "Error loading auth token")
    es = store.resolve("argoproj.io", "v1alpha1", "eventsources")
    store.delete(es, EVENTS, "src")
    assert (await send(events, token="new"))[0] == 404


async def test_forms_and_masked_authorization_reach_the_event(
    world: tuple[ClusterStore, ArgoEventsSim],
) -> None:
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source())
    hostile = sensor(args=["--instanceid", "kubeopera-data"])
    action = hostile["spec"]["triggers"][0]["template"]["argoWorkflow"]
    action["parameters"] = [parameter("body.n.0", 0), parameter("header.Authorization.0", 1)]
    create(store, "argoproj.io", "v1alpha1", "sensors", hostile)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert (await send(events, data="n=7&n=8", **form))[0] == 200
    [workflow] = workflows(store)
    values = [p["value"] for p in workflow["spec"]["arguments"]["parameters"]]
    assert values[:2] == ["7", "*** Masked Auth Secret ***"]


async def test_a_missing_field_without_a_default_fails_the_trigger_at_most_once(
    world: tuple[ClusterStore, ArgoEventsSim],
) -> None:
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source())
    create(
        store, "argoproj.io", "v1alpha1", "sensors", sensor(args=["--instanceid", "kubeopera-data"])
    )
    assert (await send(events, data="{}"))[0] == 200  # the bus took it
    assert workflows(store) == []
    assert events.fired[-1].error == "unable to resolve 'dep' parameter value"


async def test_the_sensor_creates_only_where_its_account_is_bound(
    world: tuple[ClusterStore, ArgoEventsSim],
) -> None:
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source())
    create(store, "argoproj.io", "v1alpha1", "sensors", sensor(OTHER, args=["--instanceid", "x"]))
    body = json.dumps({"items": [{}, {"id": 1}]})
    assert (await send(events, data=body, **{"X-Id": "i"}))[0] == 200
    assert workflows(store, OTHER) == []
    assert "cannot create resource" in str(events.fired[-1].error)


async def test_without_instanceid_argos_cli_strips_the_controller_label(
    world: tuple[ClusterStore, ArgoEventsSim],
) -> None:
    """What Argo's CLI does to what it submits (util/instanceid): the data controller would
    never see this run; the CI/CD controller would take it."""
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source())
    create(store, "argoproj.io", "v1alpha1", "sensors", sensor())
    body = json.dumps({"items": [{}, {"id": 1}]})
    assert (await send(events, data=body, **{"X-Id": "i"}))[0] == 200
    [workflow] = workflows(store)
    assert "workflows.argoproj.io/controller-instanceid" not in workflow["metadata"]["labels"]


async def test_other_trigger_kinds_and_missing_templates_fail(
    world: tuple[ClusterStore, ArgoEventsSim],
) -> None:
    store, events = world
    create(store, "argoproj.io", "v1alpha1", "eventsources", event_source())
    hostile = sensor(args=["--instanceid", "kubeopera-data"])
    template = hostile["spec"]["triggers"][0]["template"]
    template["k8s"] = template.pop("argoWorkflow")
    hostile["spec"]["triggers"].append(
        {"template": {"name": "other", "conditions": "dep", "argoWorkflow": sensor(
            args=[])["spec"]["triggers"][0]["template"]["argoWorkflow"]}}
    )  # fmt: skip
    other = hostile["spec"]["triggers"][1]["template"]["argoWorkflow"]["source"]["resource"]
    other["spec"]["workflowTemplateRef"]["name"] = "missing"
    create(store, "argoproj.io", "v1alpha1", "sensors", hostile)
    body = json.dumps({"items": [{}, {"id": 1}]})
    assert (await send(events, data=body, **{"X-Id": "i"}))[0] == 200
    assert workflows(store) == []
    assert [f.error is not None for f in events.fired] == [True, True]
    assert "only argoWorkflow" in str(events.fired[0].error)
    assert "missing" in str(events.fired[1].error)
