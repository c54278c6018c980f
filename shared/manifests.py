"""The metadata every object the platform writes for a tenant carries: who manages it and which
tenant it belongs to (``shared.labels``). The compiler's tenant objects
(``compiler.tenants.provisioning``) and stagectl's serving objects
(``stagectl.serving.manifests``) are both built with ``tenant_object``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared import labels as L


def tenant_labels(tenant: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The platform's labels of one of ``tenant``'s objects, with ``extra`` beside them."""
    return {L.MANAGED_BY: L.MANAGED_BY_US, L.TENANT: tenant, **(extra or {})}


def tenant_object(
    api_version: str,
    kind: str,
    name: str,
    *,
    tenant: str,
    namespace: str | None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """An object of ``tenant``'s (``namespace`` None: cluster-scoped) labelled as the
    platform's, with ``fields`` (``spec``, ``data``...) beside its metadata."""
    metadata: dict[str, Any] = {"name": name, "labels": tenant_labels(tenant, labels)}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}


def platform_owned(obj: Mapping[str, Any]) -> bool:
    """Whether a live object carries the platform's managed-by label (one the platform may
    change); anything else is someone else's and is never overwritten."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and labels.get(L.MANAGED_BY) == L.MANAGED_BY_US
