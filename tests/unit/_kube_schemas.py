"""Validating Kubernetes objects as the API server would, offline.

Core kinds: kubernetes-validate in strict mode (unknown fields refused). Custom resources: the
CRD's openAPIV3Schema (a ``crds/`` directory beside the tests, its README naming the sources) as
the API server applies it:

1. defaults filled in (structural defaulting runs before validation);
2. the schema by jsonschema (types, enums, patterns, lengths, required, min/max);
3. no field the schema does not name (the server would prune it silently: a typo would
   vanish), except under ``x-kubernetes-preserve-unknown-fields`` or ``additionalProperties``;
4. every ``x-kubernetes-validations`` rule (CEL) on the nodes present, with ``self`` bound to
   the node; transition rules (``oldSelf``) do not apply to a create. A rule cel-python cannot
   compile or evaluate (a Kubernetes CEL library function it lacks) is reported as
   unsupported, never silently passed: ``validate`` returns their count.

A kind with neither (no kubernetes-validate schema, no CRD given) is ``Unchecked``: never passed.
kubernetes-validate takes any string or number for a Quantity: the quantities of pods'
containers and volumes, quotas and limit ranges are checked here against the API's grammar.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
from celpy import celtypes

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

# kubernetes-validate (pinned) reads and parses its 1.8 MB definitions file on every call, three
# quarters of a call's time; its files never change, so each is parsed once. The schemas are
# only read (jsonschema does not change them).
kubernetes_validate.utils.schema_contents = functools.cache(
    kubernetes_validate.utils.schema_contents
)

# resource.Quantity (k8s.io/apimachinery): a signed decimal, then a binary or decimal SI suffix
# or a decimal exponent ("256Mi", "0.5", "100m", "1e3"; never "256MB" or "1 Gi").
_QUANTITY = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")

# cel-python's parser raises the recursion limit when it first builds; doing it here, at
# import, keeps it out of hypothesis's runs (which warn when a test changes it).
celpy.Environment().compile("true")


class Invalid(Exception):
    pass


class Unchecked(Invalid):
    """Nothing here can check this kind: neither kubernetes-validate nor a CRD schema."""


@functools.cache
def crd_schema(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


@functools.cache
def _validator(path: Path) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schema(path))


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


def validate_custom(obj: dict[str, Any], schema_path: Path) -> int:
    """Raise Invalid unless ``obj`` (a namespaced custom resource) is valid for the CRD schema
    at ``schema_path``; the number of CEL rules cel-python could not evaluate."""
    root = crd_schema(schema_path)
    _check_metadata(obj)
    defaulted = _defaulted(obj, root)
    errors = sorted(_validator(schema_path).iter_errors(defaulted), key=str)
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


def _pod_quantities(pod: dict[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    for field in ("initContainers", "containers"):
        for index, container in enumerate(pod.get(field) or []):
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                for name, value in (resources.get(kind) or {}).items():
                    yield f"{path}.{field}[{index}].resources.{kind}.{name}", value
    for index, volume in enumerate(pod.get("volumes") or []):
        if "sizeLimit" in (volume.get("emptyDir") or {}):
            yield f"{path}.volumes[{index}].emptyDir.sizeLimit", volume["emptyDir"]["sizeLimit"]


def _quantities(obj: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Where a core object holds quantities (pods and their templates, quotas, limit ranges)."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Pod":
        yield from _pod_quantities(spec, ".spec")
    elif "template" in spec:
        yield from _pod_quantities(spec["template"].get("spec") or {}, ".spec.template.spec")
    elif obj["kind"] == "ResourceQuota":
        for name, value in (spec.get("hard") or {}).items():
            yield f".spec.hard.{name}", value
    elif obj["kind"] == "LimitRange":
        for index, limit in enumerate(spec.get("limits") or []):
            for field in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                for name, value in (limit.get(field) or {}).items():
                    yield f".spec.limits[{index}].{field}.{name}", value


def check_quantities(obj: dict[str, Any]) -> None:
    """Raise Invalid for a quantity the API server would refuse to parse."""
    for path, value in _quantities(obj):
        if isinstance(value, bool) or not (
            isinstance(value, int | float) or _QUANTITY.fullmatch(str(value))
        ):
            raise Invalid(f"{path}: {value!r} is not a quantity")


def validate(
    obj: dict[str, Any], *, version: str, crds: Mapping[tuple[str, str], Path] | None = None
) -> int:
    """Any object: by its CRD's schema when ``crds`` has its (apiVersion, kind), otherwise by
    kubernetes-validate for Kubernetes ``version``. Returns the unsupported CEL rule count (0
    for core kinds); Invalid when it is not valid (the first error kubernetes-validate finds, for
    a core kind), Unchecked when nothing can check it."""
    key = (obj["apiVersion"], obj["kind"])
    if crds and key in crds:
        return validate_custom(obj, crds[key])
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as error:
        raise Unchecked(f"{key[1]} ({key[0]}): {error.message}; give its CRD schema") from error
    except kubernetes_validate.ValidationError as error:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise Invalid(f"{path or '.'}: {error.message}") from error
    check_quantities(obj)
    return 0
