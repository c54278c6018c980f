"""The Argo Events objects a pipeline's webhook triggers become. Purely computational.

Per pipeline, in ``EVENTS_NAMESPACE`` (docs/security.md, "Event triggers"):

- the Secret ``p-<id>-webhooks``: one key per trigger, its token;
- the ``EventSource`` ``p-<id>``: one webhook entry per trigger, all on one port (Argo Events
  serves entries of one port from one HTTP server, one path each), each checking the bearer
  token of its key in that Secret (``authSecret``) and refusing bodies over ``MAX_PAYLOAD``;
- the ``Sensor`` ``p-<id>``: one dependency per trigger and one ``argoWorkflow`` trigger per
  dependency (``conditions`` names it: without, a trigger would wait for every dependency), which
  submits a Workflow that references the current version's template and nothing else, in the
  tenant's namespace, labelled like a manual run plus ``kubeopera.io/trigger``, with each mapped
  parameter's value taken from the event (``src.dataKey`` -> ``spec.arguments.parameters.N
  .value``; a parameter with a default falls back to it when the event lacks the field). It runs
  as the tenant's sensor account, which may create workflows in that namespace only;
- when ``EVENTS_PUBLIC_HOST`` is set, the Ingress ``p-<id>-webhooks`` routing
  ``https://<host>/hooks/<id>/<trigger>`` to the event source's Service.

Argo's CLI, which the trigger runs in the sensor pod (``argo submit``), labels what it submits
with its own controller instance ID and removes the label when it has none
(``util/instanceid`` in argo-workflows), so the trigger passes ``--instanceid``: without it the
data controller would never see the run and the CI/CD controller would take it.

``compiler.automation.sensor_check`` judges every rendered Sensor and EventSource before any is
applied.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from compiler.pipelines.stamping import identity_labels
from compiler.tenants.provisioning import sensor_account
from shared import labels as L
from shared.event_selectors import Selector, parse_selector
from shared.pipelines import PipelineKind, WebhookTrigger

API_VERSION: Final = "argoproj.io/v1alpha1"
WEBHOOK_PORT: Final = 12000
# What one event may weigh: its fields become parameters of a Workflow object, which etcd
# keeps whole (Argo Events' own default is 1 MiB).
MAX_PAYLOAD: Final = 256 * 1024
HOOKS_PREFIX: Final = "/hooks"
INSTANCE_ID_FLAG: Final = "--instanceid"


@dataclass(frozen=True, slots=True)
class EventsTarget:
    """Where event objects go: ``EVENTS_NAMESPACE``, ``EVENTS_PUBLIC_HOST``, and the data
    controller's instance ID (``ARGO_DATA_INSTANCE_ID``) that runs must carry."""

    namespace: str
    public_host: str | None
    instance_id: str


@dataclass(frozen=True, slots=True)
class PipelineVersion:
    """The pipeline version a sensor submits: identity, its template and declared parameters."""

    tenant: str
    kind: PipelineKind
    pipeline_id: str
    version: int
    template_name: str
    parameters: Sequence[Mapping[str, Any]]

    @property
    def namespace(self) -> str:
        return f"{L.DATA_NAMESPACE_PREFIX}{self.tenant}"


def object_name(pipeline_id: str) -> str:
    """The EventSource's and the Sensor's name (kinds differ, so they may share it)."""
    return f"p-{pipeline_id}"


def secret_name(pipeline_id: str) -> str:
    """The Secret of the pipeline's webhook tokens, and its Ingress's name."""
    return f"p-{pipeline_id}-webhooks"


def webhook_path(pipeline_id: str, trigger: str) -> str:
    """Unique per pipeline and trigger; names no tenant (the pipeline id is random)."""
    return f"{HOOKS_PREFIX}/{pipeline_id}/{trigger}"


def webhook_url(public_host: str | None, pipeline_id: str, trigger: str) -> str | None:
    if not public_host:
        return None
    return f"https://{public_host}{webhook_path(pipeline_id, trigger)}"


def labels_of(ref: PipelineVersion) -> dict[str, str]:
    """Our labels on every event object of a pipeline (not the version: they follow it)."""
    return {
        L.MANAGED_BY: L.MANAGED_BY_US,
        L.TENANT: ref.tenant,
        L.PIPELINE_ID: ref.pipeline_id,
        L.PIPELINE_KIND: ref.kind,
    }


def _metadata(name: str, ref: PipelineVersion, target: EventsTarget) -> dict[str, Any]:
    return {"name": name, "namespace": target.namespace, "labels": labels_of(ref)}


def token_secret(
    ref: PipelineVersion, target: EventsTarget, tokens: Mapping[str, str]
) -> dict[str, Any]:
    """The Secret holding each trigger's token under the trigger's name."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(secret_name(ref.pipeline_id), ref, target),
        "type": "Opaque",
        "data": {
            name: base64.b64encode(token.encode()).decode()
            for name, token in sorted(tokens.items())
        },
    }


def tokens_of(secret: Mapping[str, Any] | None) -> dict[str, str]:
    """The tokens a live token Secret holds, by trigger name (undecodable entries left out)."""
    data = (secret or {}).get("data")
    tokens = {}
    for name, encoded in (data if isinstance(data, Mapping) else {}).items():
        try:
            tokens[str(name)] = base64.b64decode(str(encoded), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            continue
    return tokens


def event_source(
    ref: PipelineVersion, target: EventsTarget, triggers: Sequence[WebhookTrigger]
) -> dict[str, Any]:
    webhook = {
        trigger.name: {
            "port": str(WEBHOOK_PORT),
            "endpoint": webhook_path(ref.pipeline_id, trigger.name),
            "method": "POST",
            "authSecret": {"name": secret_name(ref.pipeline_id), "key": trigger.name},
            "maxPayloadSize": MAX_PAYLOAD,
        }
        for trigger in triggers
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "EventSource",
        "metadata": _metadata(object_name(ref.pipeline_id), ref, target),
        "spec": {
            "service": {"ports": [{"port": WEBHOOK_PORT, "targetPort": WEBHOOK_PORT}]},
            "webhook": webhook,
        },
    }


def _workflow(
    ref: PipelineVersion, target: EventsTarget, trigger: WebhookTrigger, names: Sequence[str]
) -> dict[str, Any]:
    labels = identity_labels(pipeline_id=ref.pipeline_id, version=ref.version, kind=ref.kind)
    labels[L.ARGO_CONTROLLER_INSTANCE_ID] = target.instance_id
    labels[L.TRIGGER] = trigger.name
    defaults = {str(item["name"]): str(item.get("default", "")) for item in ref.parameters}
    spec: dict[str, Any] = {"workflowTemplateRef": {"name": ref.template_name}}
    if names:
        spec["arguments"] = {
            "parameters": [{"name": name, "value": defaults.get(name, "")} for name in names]
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": {
            "generateName": f"{ref.template_name}-",
            "namespace": ref.namespace,
            "labels": labels,
        },
        "spec": spec,
    }


def _trigger(ref: PipelineVersion, target: EventsTarget, trigger: WebhookTrigger) -> dict[str, Any]:
    names = sorted(trigger.parameters)
    defaults = {str(item["name"]): item["default"] for item in ref.parameters if "default" in item}
    parameters = []
    for index, name in enumerate(names):
        source: dict[str, Any] = {
            "dependencyName": trigger.name,
            "dataKey": parse_selector(trigger.parameters[name]).data_key,
        }
        if name in defaults:  # a field the event lacks falls back to the default
            source["value"] = str(defaults[name])
        parameters.append({"src": source, "dest": f"spec.arguments.parameters.{index}.value"})
    action: dict[str, Any] = {
        "operation": "submit",
        "args": [INSTANCE_ID_FLAG, target.instance_id],
        "source": {"resource": _workflow(ref, target, trigger, names)},
    }
    if parameters:
        action["parameters"] = parameters
    return {"template": {"name": trigger.name, "conditions": trigger.name, "argoWorkflow": action}}


def sensor(
    ref: PipelineVersion, target: EventsTarget, triggers: Sequence[WebhookTrigger]
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Sensor",
        "metadata": _metadata(object_name(ref.pipeline_id), ref, target),
        "spec": {
            "template": {"serviceAccountName": sensor_account(ref.tenant)},
            "dependencies": [
                {
                    "name": trigger.name,
                    "eventSourceName": object_name(ref.pipeline_id),
                    "eventName": trigger.name,
                }
                for trigger in triggers
            ],
            "triggers": [_trigger(ref, target, trigger) for trigger in triggers],
        },
    }


def ingress(
    ref: PipelineVersion, target: EventsTarget, triggers: Sequence[WebhookTrigger]
) -> dict[str, Any] | None:
    """The public route to the event source's Service (its name is Argo Events'
    ``<event source>-eventsource-svc``); None without a public host. TLS is the ingress
    controller's default certificate, the class the cluster's default."""
    if not target.public_host:
        return None
    backend = {
        "service": {
            "name": f"{object_name(ref.pipeline_id)}-eventsource-svc",
            "port": {"number": WEBHOOK_PORT},
        }
    }
    paths = [
        {
            "path": webhook_path(ref.pipeline_id, trigger.name),
            "pathType": "Exact",
            "backend": backend,
        }
        for trigger in triggers
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _metadata(secret_name(ref.pipeline_id), ref, target),
        "spec": {"rules": [{"host": target.public_host, "http": {"paths": paths}}]},
    }


def example_event(trigger: WebhookTrigger) -> tuple[dict[str, str], Any]:
    """(headers, body) of an event that gives every mapped parameter a value (its name in
    angle brackets), for the example ``curl``; a selector that clashes with another is left
    out."""
    headers: dict[str, str] = {}
    body: Any = {}
    for name in sorted(trigger.parameters):
        selector: Selector = parse_selector(trigger.parameters[name])
        if selector.source == "header":
            headers[selector.path[0]] = f"<{name}>"
        elif selector.path:
            body = _placed(body, selector.path, f"<{name}>")
    return headers, body


def _placed(node: Any, path: Sequence[str], value: str) -> Any:
    """``node`` with ``value`` at ``path`` (a small number indexes a list); unchanged when the
    place is taken or of another shape."""
    head, rest = path[0], path[1:]
    if head.isdigit() and int(head) < 16:
        if isinstance(node, list):
            items = list(node)
        elif node == {}:
            items = []
        else:
            return node
        index = int(head)
        items += [{} for _ in range(index + 1 - len(items))]
        if rest:
            items[index] = _placed(items[index], rest, value)
        elif items[index] == {}:
            items[index] = value
        return items
    if not isinstance(node, dict) or (not rest and head in node):
        return node
    return {**node, head: _placed(node.get(head, {}), rest, value) if rest else value}


def curl_example(url: str, token: str, trigger: WebhookTrigger) -> str:
    """A shell command that sends an example event to the webhook."""
    headers, body = example_event(trigger)
    words = ["curl", "-X", "POST", url, "-H", f"Authorization: Bearer {token}"]
    words += ["-H", "Content-Type: application/json"]
    for name, value in sorted(headers.items()):
        words += ["-H", f"{name}: {value}"]
    words += ["-d", json.dumps(body, separators=(",", ":"))]
    return shlex.join(words)
