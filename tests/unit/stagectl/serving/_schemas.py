"""Validating what stagectl.serving builds as the API server would.

Core kinds: kubernetes-validate in strict mode (unknown fields refused). Custom resources: the
CRD's openAPIV3Schema (crds/, README there names the sources) as the API server applies it:

1. defaults filled in (structural defaulting runs before validation);
2. the schema by jsonschema (types, enums, patterns, lengths, required, min/max);
3. no field the schema does not name (the server would prune it silently: a typo would
   vanish), except under ``x-kubernetes-preserve-unknown-fields`` or ``additionalProperties``;
4. every ``x-kubernetes-validations`` rule (CEL) on the nodes present, with ``self`` bound to
   the node; transition rules (``oldSelf``) do not apply to a create. A rule cel-python cannot
   compile or evaluate (a Kubernetes CEL library function it lacks) is reported as
   unsupported, never silently passed: ``validate_custom`` returns their count.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
from celpy import celtypes

CRDS = Path(__file__).parent / "crds"
K8S_VERSION = "1.37.0"
SCHEMAS = {
    ("serving.kserve.io/v1beta1", "InferenceService"): "inferenceservice-v1beta1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-v1.json",
    ("gateway.networking.k8s.io/v1beta1", "ReferenceGrant"): "referencegrant-v1beta1.json",
    ("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy"): "securitypolicy-v1alpha1.json",
}
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


# cel-python's parser raises the recursion limit when it first builds; doing it here, at
# import, keeps it out of hypothesis's runs (which warn when a test changes it).
celpy.Environment().compile("true")


class Invalid(Exception):
    pass


@functools.cache
def schema(api_version: str, kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CRDS / SCHEMAS[(api_version, kind)]).read_text())
    return loaded


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(schema(api_version, kind))


@functools.cache
def _program(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _defaulted(node: Any, node_schema: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        properties = node_schema.get("properties") or {}
        out = {}
        for key, value in node.items():
            sub = properties.get(key) or node_schema.get("additionalProperties")
            out[key] = _defaulted(value, sub) if isinstance(sub, dict) else value
        for key, sub in properties.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        return out
    if isinstance(node, list) and isinstance(node_schema.get("items"), dict):
        return [_defaulted(item, node_schema["items"]) for item in node]
    return node


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    """A custom resource as the API server stores it: its CRD's structural defaults filled in
    (another kind unchanged)."""
    key = (obj["apiVersion"], obj["kind"])
    if key not in SCHEMAS:
        return copy.deepcopy(obj)
    filled: dict[str, Any] = _defaulted(obj, schema(*key))
    return filled


def _walk(
    node: Any, node_schema: dict[str, Any], path: str
) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    yield path, node, node_schema
    if isinstance(node, dict):
        properties = node_schema.get("properties")
        for key, value in node.items():
            sub = (properties or {}).get(key)
            if sub is None and isinstance(node_schema.get("additionalProperties"), dict):
                sub = node_schema["additionalProperties"]
            if sub is None:
                if (
                    properties is not None
                    and not node_schema.get("x-kubernetes-preserve-unknown-fields")
                    and path != ".metadata"
                ):
                    raise Invalid(f"{path}.{key}: not in the schema (the server would drop it)")
                continue
            yield from _walk(value, sub, f"{path}.{key}")
    elif isinstance(node, list) and isinstance(node_schema.get("items"), dict):
        for index, item in enumerate(node):
            yield from _walk(item, node_schema["items"], f"{path}[{index}]")


def _check_metadata(obj: dict[str, Any]) -> None:
    metadata = obj.get("metadata") or {}
    name = metadata.get("name", "")
    if not (0 < len(name) <= 253 and re.fullmatch(_DNS_SUBDOMAIN, name)):
        raise Invalid(f"metadata.name {name!r} is not a DNS subdomain")
    namespace = metadata.get("namespace", "")
    if not (0 < len(namespace) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", namespace)):
        raise Invalid(f"metadata.namespace {namespace!r} is not a DNS label")
    for key, value in (metadata.get("labels") or {}).items():
        if not re.fullmatch(r"(?=.{0,63}$)([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value):
            raise Invalid(f"label {key}={value!r}: not a label value")


def validate_custom(obj: dict[str, Any]) -> int:
    """Raise Invalid (or jsonschema's error) unless ``obj`` is valid for its CRD; the number
    of CEL rules cel-python could not evaluate."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    root = schema(api_version, kind)
    _check_metadata(obj)
    defaulted = _defaulted(obj, root)
    errors = sorted(_validator(api_version, kind).iter_errors(defaulted), key=str)
    if errors:
        raise Invalid("; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]))
    unsupported = 0
    for path, node, node_schema in list(_walk(defaulted, root, "")):
        for rule in node_schema.get("x-kubernetes-validations") or []:
            if "oldSelf" in rule["rule"]:
                continue
            try:
                result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(node)})
            except Exception:
                unsupported += 1
                continue
            if isinstance(result, celpy.CELEvalError):
                unsupported += 1
            elif result != celtypes.BoolType(True):
                raise Invalid(f"{path or '.'}: {rule.get('message') or rule['rule']}")
    return unsupported


def validate(obj: dict[str, Any]) -> int:
    """Any object stagectl.serving builds; the unsupported CEL rule count (0 for core kinds)."""
    if (obj["apiVersion"], obj["kind"]) in SCHEMAS:
        return validate_custom(obj)
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    return 0
