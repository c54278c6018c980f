"""The Argo Events objects a pipeline's webhook triggers become: exact shapes, Argo Events' own
field names (Hera's generated models of its API, and the JSON tags of its webhook context), the
sensor allowlist passing everything rendering makes, and every selector meaning the same in the
compiler, in the example event and in the simulator's gjson."""

from __future__ import annotations

import base64
import json
import shlex
from typing import Any

import hera.events.models as events_models
import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.automation import event_objects as ev
from compiler.automation.sensor_check import (
    Confinement,
    event_source_violations,
    sensor_violations,
)
from compiler.automation.webhooks import triggers_of
from compiler.pipelines.compile import StepLimits
from compiler.pipelines.definitions import Target, render
from shared.errors import Invalid
from shared.pipelines import WebhookTrigger, parse_body
from sim.events import paths

EVENTS = "kubeopera-pipeline-events"
TARGET = ev.EventsTarget(EVENTS, "hooks.example.test", "kubeopera-data")
REF = ev.PipelineVersion(
    tenant="acme",
    kind="data",
    pipeline_id="abc123",
    version=3,
    template_name="p-abc123-v3",
    parameters=[{"name": "file"}, {"name": "size", "default": "10"}, {"name": "mode"}],
)
RULES = Confinement(EVENTS, "acme", "abc123", "p-abc123-v3", "kubeopera-data")
LABELS = {
    "app.kubernetes.io/managed-by": "workflow-manager",
    "kubeopera.io/tenant": "acme",
    "kubeopera.io/pipeline-id": "abc123",
    "kubeopera.io/pipeline-kind": "data",
}
ON_UPLOAD = WebhookTrigger(
    name="on-upload",
    type="webhook",
    parameters={"size": "header.x-size", "file": "body.object.key"},
)
BARE = WebhookTrigger(name="ping", type="webhook")
# The JSON tags of argo-events' WebhookContext (pkg/apis/events/v1alpha1/webhook_context.go),
# which a webhook entry inlines.
WEBHOOK_CONTEXT_FIELDS = {
    "endpoint",
    "method",
    "port",
    "url",
    "metadata",
    "authSecret",
    "maxPayloadSize",
    "serverCertSecret",
    "serverKeySecret",
}


def test_the_sensor_submits_the_current_template_only_with_mapped_parameters() -> None:
    sensor = ev.sensor(REF, TARGET, [ON_UPLOAD, BARE])
    assert sensor == {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Sensor",
        "metadata": {"name": "p-abc123", "namespace": EVENTS, "labels": LABELS},
        "spec": {
            "template": {"serviceAccountName": "kubeopera-sensor-acme"},
            "dependencies": [
                {"name": "on-upload", "eventSourceName": "p-abc123", "eventName": "on-upload"},
                {"name": "ping", "eventSourceName": "p-abc123", "eventName": "ping"},
            ],
            "triggers": [
                {
                    "template": {
                        "name": "on-upload",
                        "conditions": "on-upload",
                        "argoWorkflow": {
                            "operation": "submit",
                            "args": ["--instanceid", "kubeopera-data"],
                            "source": {
                                "resource": {
                                    "apiVersion": "argoproj.io/v1alpha1",
                                    "kind": "Workflow",
                                    "metadata": {
                                        "generateName": "p-abc123-v3-",
                                        "namespace": "kubeopera-data-acme",
                                        "labels": {
                                            "kubeopera.io/pipeline-id": "abc123",
                                            "kubeopera.io/pipeline-version": "3",
                                            "kubeopera.io/pipeline-kind": "data",
                                            "workflows.argoproj.io/controller-instanceid": (
                                                "kubeopera-data"
                                            ),
                                            "kubeopera.io/trigger": "on-upload",
                                        },
                                    },
                                    "spec": {
                                        "workflowTemplateRef": {"name": "p-abc123-v3"},
                                        "arguments": {
                                            "parameters": [
                                                {"name": "file", "value": ""},
                                                {"name": "size", "value": "10"},
                                            ]
                                        },
                                    },
                                }
                            },
                            "parameters": [
                                {
                                    "src": {
                                        "dependencyName": "on-upload",
                                        "dataKey": "body.object.key",
                                    },
                                    "dest": "spec.arguments.parameters.0.value",
                                },
                                {
                                    "src": {
                                        "dependencyName": "on-upload",
                                        "dataKey": "header.X-Size.0",
                                        "value": "10",
                                    },
                                    "dest": "spec.arguments.parameters.1.value",
                                },
                            ],
                        },
                    }
                },
                {
                    "template": {
                        "name": "ping",
                        "conditions": "ping",
                        "argoWorkflow": {
                            "operation": "submit",
                            "args": ["--instanceid", "kubeopera-data"],
                            "source": {
                                "resource": {
                                    "apiVersion": "argoproj.io/v1alpha1",
                                    "kind": "Workflow",
                                    "metadata": {
                                        "generateName": "p-abc123-v3-",
                                        "namespace": "kubeopera-data-acme",
                                        "labels": {
                                            "kubeopera.io/pipeline-id": "abc123",
                                            "kubeopera.io/pipeline-version": "3",
                                            "kubeopera.io/pipeline-kind": "data",
                                            "workflows.argoproj.io/controller-instanceid": (
                                                "kubeopera-data"
                                            ),
                                            "kubeopera.io/trigger": "ping",
                                        },
                                    },
                                    "spec": {"workflowTemplateRef": {"name": "p-abc123-v3"}},
                                }
                            },
                        },
                    }
                },
            ],
        },
    }
    assert sensor_violations(sensor, RULES) == []


def test_the_event_source_checks_each_triggers_token() -> None:
    source = ev.event_source(REF, TARGET, [ON_UPLOAD, BARE])
    assert source == {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "EventSource",
        "metadata": {"name": "p-abc123", "namespace": EVENTS, "labels": LABELS},
        "spec": {
            "service": {"ports": [{"port": 12000, "targetPort": 12000}]},
            "webhook": {
                name: {
                    "port": "12000",
                    "endpoint": f"/hooks/abc123/{name}",
                    "method": "POST",
                    "authSecret": {"name": "p-abc123-webhooks", "key": name},
                    "maxPayloadSize": 262144,
                }
                for name in ("on-upload", "ping")
            },
        },
    }
    assert event_source_violations(source, RULES) == []
    for entry in source["spec"]["webhook"].values():
        assert set(entry) <= WEBHOOK_CONTEXT_FIELDS


def test_field_names_are_argo_events_own() -> None:
    """Hera's models of Argo Events' API keep every field we write (the submitted resource is
    opaque to them, and they model a webhook entry's inlined context wrongly, hence the tag
    list above)."""
    sensor = ev.sensor(REF, TARGET, [ON_UPLOAD, BARE])
    dumped = events_models.Sensor.model_validate(sensor).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    expected = json.loads(json.dumps(sensor))
    for trigger in expected["spec"]["triggers"]:
        trigger["template"]["argoWorkflow"]["source"]["resource"] = {}
    del expected["apiVersion"], expected["kind"]
    assert dumped == expected


def test_the_token_secret_and_the_ingress_are_valid_kubernetes_objects() -> None:
    secret = ev.token_secret(REF, TARGET, {"ping": "t1", "on-upload": "t2"})
    assert secret["data"] == {
        "on-upload": base64.b64encode(b"t2").decode(),
        "ping": base64.b64encode(b"t1").decode(),
    }
    assert ev.tokens_of(secret) == {"ping": "t1", "on-upload": "t2"}
    ingress = ev.ingress(REF, TARGET, [ON_UPLOAD, BARE])
    assert ingress is not None
    assert ingress["spec"]["rules"] == [
        {
            "host": "hooks.example.test",
            "http": {
                "paths": [
                    {
                        "path": f"/hooks/abc123/{name}",
                        "pathType": "Exact",
                        "backend": {
                            "service": {
                                "name": "p-abc123-eventsource-svc",
                                "port": {"number": 12000},
                            }
                        },
                    }
                    for name in ("on-upload", "ping")
                ]
            },
        }
    ]
    for obj in (secret, ingress):
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
    assert ev.ingress(REF, ev.EventsTarget(EVENTS, None, "kubeopera-data"), [BARE]) is None


def test_tokens_of_skips_what_it_cannot_read() -> None:
    assert ev.tokens_of(None) == {}
    assert ev.tokens_of({"data": {"a": "!!!", "b": base64.b64encode(b"\xff").decode()}}) == {}
    assert ev.tokens_of({"data": "x"}) == {}


def test_urls_name_no_tenant() -> None:
    assert ev.webhook_url("h.example", "abc123", "t") == "https://h.example/hooks/abc123/t"
    assert ev.webhook_url(None, "abc123", "t") is None
    assert "acme" not in ev.webhook_path("abc123", "t")


def test_the_example_curl_sends_a_token_and_an_event_that_fills_every_mapped_parameter() -> None:
    trigger = WebhookTrigger(
        name="t",
        type="webhook",
        parameters={
            "a": "body.x.y",
            "b": "body.items.1.id",
            "c": "header.x-id",
            "d": "body.x",  # clashes with body.x.y: left out of the example
            "e": "body",
        },
    )
    words = shlex.split(ev.curl_example("https://h/hooks/p/t", "tok en", trigger))
    assert words[:4] == ["curl", "-X", "POST", "https://h/hooks/p/t"]
    assert "Authorization: Bearer tok en" in words
    assert "X-Id: <c>" in words
    assert json.loads(words[-1]) == {"x": {"y": "<a>"}, "items": [{}, {"id": "<b>"}]}


_SEGMENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,6}|[0-9]", fullmatch=True)
_SELECTOR = st.one_of(
    st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda s: "body." + ".".join(s)),
    st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,10}", fullmatch=True)
    .filter(lambda name: name.lower() != "authorization")
    .map(lambda name: f"header.{name}"),
)
_NAME = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)


@st.composite
def _triggers(draw: st.DrawFn) -> list[WebhookTrigger]:
    names = draw(st.lists(_NAME, min_size=1, max_size=4, unique=True))
    declared = [str(item["name"]) for item in REF.parameters]
    return [
        WebhookTrigger(
            name=name,
            type="webhook",
            parameters=draw(st.dictionaries(st.sampled_from(declared), _SELECTOR, max_size=3)),
        )
        for name in names
    ]


@settings(max_examples=200, deadline=None)
@given(_triggers())
def test_whatever_rendering_makes_the_allowlist_passes(triggers: list[WebhookTrigger]) -> None:
    assert sensor_violations(ev.sensor(REF, TARGET, triggers), RULES) == []
    assert event_source_violations(ev.event_source(REF, TARGET, triggers), RULES) == []


@settings(max_examples=200, deadline=None)
@given(_triggers())
def test_a_selector_finds_its_value_in_the_example_event_as_argo_would(
    triggers: list[WebhookTrigger],
) -> None:
    """The example event puts each parameter's placeholder where its selector points (one of
    two clashing selectors is left out); the simulator's gjson reads it back from the event
    Argo Events would build."""
    for trigger in triggers:
        headers, body = ev.example_event(trigger)
        event = {"header": {k: [v] for k, v in headers.items()}, "body": body, "metadata": None}
        sensor = ev.sensor(REF, TARGET, [trigger])
        (rendered,) = sensor["spec"]["triggers"]
        names = sorted(trigger.parameters)
        placed = json.dumps(event)
        for parameter in rendered["template"]["argoWorkflow"].get("parameters", []):
            name = names[int(parameter["dest"].split(".")[3])]
            if f'"<{name}>"' in placed:  # in the example: found exactly where it points
                assert paths.get(event, parameter["src"]["dataKey"]) == (True, f"<{name}>")


@pytest.mark.parametrize("count", [0, 1])
def test_a_trigger_without_parameters_submits_no_arguments(count: int) -> None:
    trigger = BARE if count == 0 else ON_UPLOAD
    (rendered,) = ev.sensor(REF, TARGET, [trigger])["spec"]["triggers"]
    action = rendered["template"]["argoWorkflow"]
    assert ("parameters" in action) == bool(count)
    assert ("arguments" in action["source"]["resource"]["spec"]) == bool(count)


def test_settings_recorded_before_triggers_existed_have_none() -> None:
    assert triggers_of({"triggers": None}) == []
    assert triggers_of({}) == []
    recorded: dict[str, Any] = {"triggers": [{"name": "a", "type": "webhook"}]}
    assert triggers_of(recorded) == [WebhookTrigger(name="a", type="webhook")]


# --- on the render path: triggers map declared parameters only --------------------------------
YAML = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: t}
spec:
  entrypoint: main
  arguments:
    parameters:
      - {name: file}
      - {name: size, value: "10"}
  templates:
    - name: main
      container: {image: alpine:3.20, command: [sh, -c, "echo {{workflow.parameters.file}}"]}
"""


def _render(*triggers: dict[str, Any]) -> Any:
    body = parse_body(
        {"name": "n", "definition": {"type": "yaml", "template": YAML}, "triggers": list(triggers)}
    )
    target = Target("acme", "abc123", 1, "data", StepLimits("4", "8Gi"), "bucket")
    return render(body, target)


def test_render_accepts_triggers_mapping_declared_parameters() -> None:
    rendered = _render(
        {"name": "a", "type": "webhook", "parameters": {"file": "body.f"}},
        {"name": "b", "type": "webhook", "parameters": {"file": "body", "size": "header.n"}},
    )
    assert [p["name"] for p in rendered.parameters] == ["file", "size"]


@pytest.mark.parametrize(
    ("parameters", "errors"),
    [
        ({"file": "body.f", "nope": "body.n"}, [("triggers[0].parameters.nope", "not declared")]),
        ({"size": "body.s"}, [("triggers[0].parameters.file", "required")]),
        ({}, [("triggers[0].parameters.file", "required")]),
        ({"other": "body"}, [
            ("triggers[0].parameters.other", "not declared"),
            ("triggers[0].parameters.file", "required"),
        ]),
    ],
)  # fmt: skip
def test_render_refuses_undeclared_and_unmapped_required_parameters(
    parameters: dict[str, str], errors: list[tuple[str, str]]
) -> None:
    with pytest.raises(Invalid) as refused:
        _render({"name": "a", "type": "webhook", "parameters": parameters})
    found = [(e["field"], e["message"]) for e in refused.value.details["errors"]]
    assert len(found) == len(errors)
    for (field, message), (want_field, want_message) in zip(found, errors, strict=True):
        assert field == want_field
        assert want_message in message
