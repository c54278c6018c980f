"""The allowlist of what the compiler applies into the events namespace. Purely computational.

A tenant never writes a Sensor or an EventSource: ``compiler.automation.event_objects`` renders
them from the pipeline's triggers. They are judged anyway, every time, before anything is
applied, so that a bug in rendering fails closed instead of handing a sensor more than it may
do. The sensor's account already cannot create anything outside the tenant's namespace (RBAC);
this check is what keeps it to one kind of action inside it.

A Sensor passes only when it is exactly this shape, field by field (anything unlisted is a
violation):

- in the events namespace, running as the tenant's sensor account and nothing else in its pod
  ``template``;
- dependencies on the pipeline's own event source only, without filters or transforms;
- each trigger an ``argoWorkflow`` ``submit`` (no ``k8s``, ``http``, ``log``, ... trigger, no
  trigger-level ``parameters``, which could rewrite the trigger itself, no policy or retry),
  conditioned on one dependency, passing only ``--instanceid <ARGO_DATA_INSTANCE_ID>`` to Argo's
  CLI, from an inline ``resource`` (no URL, file, Git or S3 source);
- that resource a Workflow in the tenant's namespace, labelled for the data controller, whose
  spec holds nothing but ``workflowTemplateRef`` (the current version's template, by name, not
  cluster-scoped) and plain string ``arguments.parameters`` (no ``podSpecPatch``, inline
  ``templates``, ``serviceAccountName``, ``valueFrom``, artifacts, ...);
- each parameter taking a ``dataKey`` of the selector language's gjson form (no modifiers,
  queries, wildcards or templates) from its own trigger's dependency, into
  ``spec.arguments.parameters.N.value`` of an argument that exists.

An EventSource passes only with webhook entries on the pipeline's own paths, each checking a
token from the pipeline's token Secret, by POST, within the payload limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from compiler.automation.event_objects import (
    API_VERSION,
    INSTANCE_ID_FLAG,
    MAX_PAYLOAD,
    object_name,
    secret_name,
    webhook_path,
)
from compiler.pipelines.allowlist import Violation
from compiler.tenants.provisioning import sensor_account
from shared import labels as L
from shared.errors import Refused

_DATA_KEY: Final = re.compile(
    r"body(\.[A-Za-z0-9_-]{1,128}){0,16}|header\.[A-Za-z0-9][A-Za-z0-9-]{0,127}\.0"
)
_DEST: Final = re.compile(r"spec\.arguments\.parameters\.(\d{1,3})\.value")


@dataclass(frozen=True, slots=True)
class Confinement:
    """What a pipeline's event objects may name."""

    events_namespace: str
    tenant: str
    pipeline_id: str
    template_name: str  # the current version's
    instance_id: str

    @property
    def tenant_namespace(self) -> str:
        return f"{L.DATA_NAMESPACE_PREFIX}{self.tenant}"


class _Findings:
    def __init__(self) -> None:
        self.violations: list[Violation] = []

    def add(self, path: str, rule: str, message: str) -> None:
        self.violations.append(Violation(path, rule, message))

    def mapping(self, value: object, path: str, allowed: set[str]) -> Mapping[str, Any]:
        """``value`` as a mapping with only ``allowed`` keys (each other key is a violation)."""
        if not isinstance(value, Mapping):
            self.add(path, "shape", "expected an object")
            return {}
        for key in sorted(set(value) - allowed, key=str):
            self.add(f"{path}.{key}" if path else str(key), "field", f"{key} is not allowed here")
        return value

    def items(self, value: object, path: str) -> list[Any]:
        if not isinstance(value, list):
            self.add(path, "shape", "expected a list")
            return []
        return value

    def equal(self, value: object, wanted: object, path: str, rule: str) -> None:
        if value != wanted:
            self.add(path, rule, f"expected {wanted!r}")


def _check_metadata(found: _Findings, document: Mapping[str, Any], rules: Confinement) -> None:
    metadata = found.mapping(document.get("metadata"), "metadata", {"name", "namespace", "labels"})
    found.equal(metadata.get("name"), object_name(rules.pipeline_id), "metadata.name", "name")
    namespace = metadata.get("namespace")
    found.equal(namespace, rules.events_namespace, "metadata.namespace", "namespace")


def _sensor_spec(found: _Findings, obj: object, kind: str, rules: Confinement) -> Mapping[str, Any]:
    document = found.mapping(obj, "", {"apiVersion", "kind", "metadata", "spec"})
    found.equal(document.get("apiVersion"), API_VERSION, "apiVersion", "kind")
    found.equal(document.get("kind"), kind, "kind", "kind")
    _check_metadata(found, document, rules)
    return found.mapping(document.get("spec"), "spec", {"template", "dependencies", "triggers"})


def sensor_violations(sensor: object, rules: Confinement) -> list[Violation]:
    """Every way ``sensor`` leaves what a pipeline's sensor may be (empty: it passes)."""
    found = _Findings()
    spec = _sensor_spec(found, sensor, "Sensor", rules)
    template = found.mapping(spec.get("template"), "spec.template", {"serviceAccountName"})
    found.equal(
        template.get("serviceAccountName"),
        sensor_account(rules.tenant),
        "spec.template.serviceAccountName",
        "service_account",
    )
    names = set()
    for index, item in enumerate(found.items(spec.get("dependencies"), "spec.dependencies")):
        path = f"spec.dependencies[{index}]"
        dependency = found.mapping(item, path, {"name", "eventSourceName", "eventName"})
        if isinstance(dependency.get("name"), str):
            names.add(dependency["name"])
        found.equal(
            dependency.get("eventSourceName"),
            object_name(rules.pipeline_id),
            f"{path}.eventSourceName",
            "dependency",
        )
        if not isinstance(dependency.get("eventName"), str):
            found.add(f"{path}.eventName", "dependency", "expected the event's name")
    triggers = found.items(spec.get("triggers"), "spec.triggers")
    if not triggers:
        found.add("spec.triggers", "shape", "a sensor has triggers")
    for index, item in enumerate(triggers):
        _check_trigger(found, item, f"spec.triggers[{index}]", names, rules)
    return found.violations


def _check_trigger(
    found: _Findings, item: object, path: str, dependencies: set[str], rules: Confinement
) -> None:
    trigger = found.mapping(item, path, {"template"})
    path = f"{path}.template"
    template = found.mapping(trigger.get("template"), path, {"name", "conditions", "argoWorkflow"})
    condition = template.get("conditions")
    if not isinstance(condition, str) or condition not in dependencies:
        found.add(f"{path}.conditions", "conditions", "expected exactly one dependency's name")
    if "argoWorkflow" not in template:
        found.add(path, "trigger_type", "the only trigger is argoWorkflow")
        return
    path = f"{path}.argoWorkflow"
    action = found.mapping(
        template["argoWorkflow"], path, {"operation", "args", "source", "parameters"}
    )
    found.equal(action.get("operation"), "submit", f"{path}.operation", "operation")
    found.equal(action.get("args"), [INSTANCE_ID_FLAG, rules.instance_id], f"{path}.args", "args")
    source = found.mapping(action.get("source"), f"{path}.source", {"resource"})
    arguments = _check_workflow(found, source.get("resource"), f"{path}.source.resource", rules)
    for index, entry in enumerate(found.items(action.get("parameters", []), f"{path}.parameters")):
        where = f"{path}.parameters[{index}]"
        parameter = found.mapping(entry, where, {"src", "dest"})
        src = found.mapping(
            parameter.get("src"), f"{where}.src", {"dependencyName", "dataKey", "value"}
        )
        if src.get("dependencyName") != condition:
            found.add(f"{where}.src.dependencyName", "parameter", "expected its trigger's own")
        key = src.get("dataKey")
        if not isinstance(key, str) or not _DATA_KEY.fullmatch(key):
            found.add(f"{where}.src.dataKey", "parameter", "not a selector's data key")
        if "value" in src and not isinstance(src["value"], str):
            found.add(f"{where}.src.value", "parameter", "expected a string")
        dest = parameter.get("dest")
        matched = _DEST.fullmatch(dest) if isinstance(dest, str) else None
        if matched is None or int(matched.group(1)) >= arguments:
            found.add(f"{where}.dest", "parameter", "expected an argument's value")


def _check_workflow(found: _Findings, value: object, path: str, rules: Confinement) -> int:
    """Check the submitted Workflow; how many arguments it declares."""
    resource = found.mapping(value, path, {"apiVersion", "kind", "metadata", "spec"})
    found.equal(resource.get("apiVersion"), API_VERSION, f"{path}.apiVersion", "kind")
    found.equal(resource.get("kind"), "Workflow", f"{path}.kind", "kind")
    metadata = found.mapping(
        resource.get("metadata"), f"{path}.metadata", {"generateName", "namespace", "labels"}
    )
    found.equal(
        metadata.get("namespace"), rules.tenant_namespace, f"{path}.metadata.namespace", "namespace"
    )
    labels = metadata.get("labels")
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        found.add(f"{path}.metadata.labels", "shape", "expected string labels")
    elif labels.get(L.ARGO_CONTROLLER_INSTANCE_ID) != rules.instance_id:
        found.add(f"{path}.metadata.labels", "instance_id", "runs go to the data controller")
    spec = found.mapping(resource.get("spec"), f"{path}.spec", {"workflowTemplateRef", "arguments"})
    found.equal(
        spec.get("workflowTemplateRef"),
        {"name": rules.template_name},
        f"{path}.spec.workflowTemplateRef",
        "template_ref",
    )
    arguments = found.mapping(spec.get("arguments", {}), f"{path}.spec.arguments", {"parameters"})
    entries = found.items(arguments.get("parameters", []), f"{path}.spec.arguments.parameters")
    for index, entry in enumerate(entries):
        where = f"{path}.spec.arguments.parameters[{index}]"
        parameter = found.mapping(entry, where, {"name", "value"})
        if not all(isinstance(parameter.get(key), str) for key in ("name", "value")):
            found.add(where, "arguments", "expected a name and a string value")
    return len(entries)


def event_source_violations(source: object, rules: Confinement) -> list[Violation]:
    """Every way ``source`` leaves what a pipeline's event source may be."""
    found = _Findings()
    document = found.mapping(source, "", {"apiVersion", "kind", "metadata", "spec"})
    found.equal(document.get("apiVersion"), API_VERSION, "apiVersion", "kind")
    found.equal(document.get("kind"), "EventSource", "kind", "kind")
    _check_metadata(found, document, rules)
    spec = found.mapping(document.get("spec"), "spec", {"service", "webhook"})
    service = found.mapping(spec.get("service", {}), "spec.service", {"ports"})
    for index, entry in enumerate(found.items(service.get("ports", []), "spec.service.ports")):
        port = found.mapping(entry, f"spec.service.ports[{index}]", {"port", "targetPort"})
        if not all(isinstance(port.get(key), int) for key in ("port", "targetPort")):
            found.add(f"spec.service.ports[{index}]", "shape", "expected a port and its target")
    entries = spec.get("webhook")
    names = set(entries) if isinstance(entries, Mapping) else set()
    webhooks = found.mapping(entries, "spec.webhook", names)
    allowed = {"port", "endpoint", "method", "authSecret", "maxPayloadSize"}
    for name, entry in webhooks.items():
        path = f"spec.webhook.{name}"
        webhook = found.mapping(entry, path, allowed)
        found.equal(
            webhook.get("endpoint"),
            webhook_path(rules.pipeline_id, str(name)),
            f"{path}.endpoint",
            "endpoint",
        )
        found.equal(webhook.get("method"), "POST", f"{path}.method", "endpoint")
        found.equal(
            webhook.get("authSecret"),
            {"name": secret_name(rules.pipeline_id), "key": name},
            f"{path}.authSecret",
            "token",
        )
        size = webhook.get("maxPayloadSize")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_PAYLOAD:
            found.add(f"{path}.maxPayloadSize", "payload", f"at most {MAX_PAYLOAD} bytes")
    return found.violations


def raise_if_refused(violations: list[Violation], what: str) -> None:
    """Refuse (422) what rendering produced when it breaks the allowlist: a bug of ours, so the
    save fails and nothing of it is applied."""
    if violations:
        raise Refused(
            f"the {what} rendered for this pipeline was refused by the event allowlist",
            details={"violations": [violation.as_json() for violation in violations]},
        )
