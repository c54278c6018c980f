"""Whether a live object has left what we applied, the body that puts it back, and which objects
belong to no recorded pipeline.

Purely computational. ``shared.k8s_objects.KubeObjects.apply`` uses them for every object it
converges: tenant namespaces' contents (``compiler.tenants.provisioning``) and pipeline templates.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from shared import quantity

# Fields compared whole when present in the desired object (metadata is compared key by key).
OWNED_FIELDS: Final = (
    "spec",
    "data",
    "rules",
    "subjects",
    "roleRef",
    "automountServiceAccountToken",
    "type",
)
# Fields the API server never changes in place, by kind: an object that must have another value
# there is deleted and created again (a RoleBinding's roleRef: Kubernetes refuses the update).
IMMUTABLE_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "RoleBinding": ("roleRef",),
    "ClusterRoleBinding": ("roleRef",),
}
# Metadata the server owns; never sent back on replace (managedFields omitted is kept as is).
_SERVER_METADATA: Final = frozenset({"managedFields"})
_QUANTITY_KINDS: Final = frozenset({"ResourceQuota", "LimitRange"})


def _same(desired: Any, live: Any, *, quantities: bool) -> bool:
    if isinstance(desired, Mapping):
        return (
            isinstance(live, Mapping)
            and set(desired) == set(live)
            and all(_same(desired[key], live[key], quantities=quantities) for key in desired)
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(_same(d, v, quantities=quantities) for d, v in zip(desired, live, strict=True))
        )
    if quantities and isinstance(desired, str) and isinstance(live, str) and desired != live:
        # The API server stores quantities in canonical form ("0.5" comes back as "500m").
        ours, theirs = quantity.parse_or_none(desired), quantity.parse_or_none(live)
        return ours is not None and ours == theirs
    return bool(desired == live) and type(desired) is type(live)


def drifted(desired: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
    """Whether ``live`` has left ``desired`` in a field we own. Purely computational.

    Our labels and annotations must be there with our values (others may add their own); every
    field of ``OWNED_FIELDS`` that we set must be equal as a whole, quantities by value. Fields
    we do not set (a Namespace's spec, a token Secret's data, status) belong to others.
    """
    ours, theirs = desired.get("metadata") or {}, live.get("metadata") or {}
    for part in ("labels", "annotations"):
        wanted, present = ours.get(part) or {}, theirs.get(part) or {}
        if any(present.get(key) != value for key, value in wanted.items()):
            return True
    quantities = desired.get("kind") in _QUANTITY_KINDS
    return any(
        not _same(desired[field], live.get(field), quantities=quantities)
        for field in OWNED_FIELDS
        if field in desired
    )


def recreated(desired: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
    """Whether ``live`` can only be converged to ``desired`` by deleting it and creating it
    again: a field of ``IMMUTABLE_FIELDS`` differs. Purely computational."""
    return any(
        field in desired and not _same(desired[field], live.get(field), quantities=False)
        for field in IMMUTABLE_FIELDS.get(str(desired.get("kind")), ())
    )


def replacement(desired: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """The body that replaces ``live`` with ``desired``: the live resourceVersion (so a
    concurrent writer makes it fail with 409 rather than be overwritten), the live object's
    other metadata, labels and annotations (ours win), and its fields we do not set (a
    Namespace's spec, a token Secret's data). Purely computational."""
    body = {
        key: copy.deepcopy(value)
        for key, value in live.items()
        if key not in ("metadata", "status") and key not in desired
    }
    body.update(copy.deepcopy({key: value for key, value in desired.items() if key != "metadata"}))
    live_metadata = live.get("metadata") or {}
    metadata = {
        key: copy.deepcopy(value)
        for key, value in live_metadata.items()
        if key not in _SERVER_METADATA
    }
    desired_metadata = desired.get("metadata") or {}
    for part in ("labels", "annotations"):
        merged = {**(live_metadata.get(part) or {}), **(desired_metadata.get(part) or {})}
        if merged:
            metadata[part] = merged
    metadata["name"] = desired_metadata.get("name", live_metadata.get("name"))
    body["metadata"] = metadata
    return body


def orphaned(
    items: Iterable[Mapping[str, Any]],
    known: Collection[str],
    *,
    label: str,
    now: datetime,
    grace: timedelta,
) -> list[Mapping[str, Any]]:
    """The objects whose ``label`` names something not in ``known`` and that are older than
    ``grace`` (a younger one may belong to a save whose transaction has not committed yet; one
    whose age cannot be read is kept). Purely computational."""
    found = []
    for item in items:
        metadata = item.get("metadata") or {}
        owner = (metadata.get("labels") or {}).get(label)
        if not isinstance(owner, str) or owner in known:
            continue
        try:
            created = datetime.fromisoformat(str(metadata.get("creationTimestamp")))
        except ValueError:
            continue
        if created.tzinfo is not None and now - created > grace:
            found.append(item)
    return found
