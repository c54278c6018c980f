"""Checks the API server makes on every written body: its type, its resourceVersion against the
stored one, and its metadata. Purely computational."""

from __future__ import annotations

import re
from typing import Any

from sim.kube.objects import Stored
from sim.kube.types import ApiError, JsonObject, ResourceType

NAMESPACES_KEY = ("", "v1", "namespaces")

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PATH_SEGMENT_NAME = re.compile(r"^[^/%]+$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ROLE_REF_KINDS = frozenset({"RoleBinding", "ClusterRoleBinding"})
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def validate_metadata(rtype: ResourceType, obj: JsonObject) -> None:
    """422 Invalid for a bad name, labels, annotations or finalizers."""
    meta = obj["metadata"]
    name = meta["name"]
    if rtype.key == NAMESPACES_KEY:
        valid = len(name) <= 63 and _DNS_LABEL.match(name) is not None
    elif rtype.group == "rbac.authorization.k8s.io":
        valid = _PATH_SEGMENT_NAME.match(name) is not None and name not in (".", "..")
    else:
        valid = len(name) <= 253 and _SUBDOMAIN.match(name) is not None
    if not valid:
        raise ApiError(422, "Invalid", f'{rtype.kind} "{name}" is invalid: metadata.name')
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise ApiError(422, "Invalid", "metadata.labels must be a map of strings")
    for key, value in labels.items():
        if not valid_label_key(key) or not (
            isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.match(value)
        ):
            raise ApiError(
                422,
                "Invalid",
                f'{rtype.kind} "{name}" is invalid: metadata.labels: Invalid value: '
                f"{key}={value!r}",
            )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        raise ApiError(422, "Invalid", "metadata.annotations must be a map of strings")
    finalizers = meta.get("finalizers") or []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        raise ApiError(422, "Invalid", "metadata.finalizers must be a list of strings")


def check_unchanged_fields(rtype: ResourceType, old: JsonObject, new: JsonObject) -> None:
    """422 Invalid for an update of a field the API server never changes in place: a binding's
    roleRef (delete the binding and create it again instead)."""
    if rtype.group != "rbac.authorization.k8s.io" or rtype.kind not in _ROLE_REF_KINDS:
        return
    if old.get("roleRef") != new.get("roleRef"):
        raise ApiError(
            422,
            "Invalid",
            f'{rtype.kind}.rbac.authorization.k8s.io "{old["metadata"]["name"]}" is invalid: '
            "roleRef: Invalid value: cannot change roleRef",
        )


def valid_label_key(key: Any) -> bool:
    """`[prefix/]name` with a DNS-subdomain prefix and a name of at most 63 characters."""
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.match(name) is not None


def typed_body(rtype: ResourceType, body: Any) -> JsonObject:
    """The body with apiVersion and kind first; 400 when they name another type."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", f"the body must be a {rtype.kind} object")
    for field, expected in (("apiVersion", rtype.api_version), ("kind", rtype.kind)):
        if body.get(field) not in (None, "", expected):
            raise ApiError(
                400,
                "BadRequest",
                f"the body {field} {body.get(field)!r} does not match the resource ({expected})",
            )
    obj: JsonObject = {"apiVersion": rtype.api_version, "kind": rtype.kind, **body}
    obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
    meta = obj.get("metadata")
    obj["metadata"] = dict(meta) if isinstance(meta, dict) else {}
    return obj


def check_resource_version(rtype: ResourceType, current: Stored, given: Any) -> None:
    """409 Conflict when `given` is set and is not the stored resourceVersion."""
    if given not in (None, "") and str(given) != current.resource_version:
        name = current.meta["name"]
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {resource_name(rtype)} "{name}": the object has '
            "been modified; please apply your changes to the latest version and try again",
            details={"name": name, "group": rtype.group, "kind": rtype.plural},
        )


def resource_name(rtype: ResourceType) -> str:
    """`plural.group` (`plural` for the core group), as API error messages name a resource."""
    return f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
