"""Finding a node, its artifact and its archived log in a run's stored graph, and deciding
whether we may read that location. Purely computational.

Artifact locations come from the workflow's status, which whoever submitted the workflow can
shape, so a location is never trusted: it must be S3, in the bucket workflow-manager serves
(ARTIFACT_BUCKET), and — unless the caller is an administrator — under the run's namespace
prefix (``shared.storage.namespace_prefix``: ``tenants/<tenant>/`` for a tenant's data
namespace, ``<namespace>/`` elsewhere), so that a tenant's run cannot point at another tenant's
objects. The
endpoint a location names is ignored: we read with our own client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import DependencyDown, Forbidden, NotFound
from shared.storage import namespace_prefix

MAIN_LOGS = "main-logs"
_UNRESOLVED = re.compile(r"{{[^}]*}}")


@dataclass(frozen=True, slots=True)
class ObjectRef:
    bucket: str
    key: str


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def find_node(graph: Mapping[str, Any], node: str) -> Mapping[str, Any]:
    """The node with id ``node`` (or, failing that, that pod name); NotFound otherwise."""
    nodes = [n for n in graph.get("nodes") or [] if isinstance(n, Mapping)]
    for candidate in nodes:
        if candidate.get("id") == node:
            return candidate
    for candidate in nodes:
        if candidate.get("podName") == node:
            return candidate
    details: dict[str, Any] = {"node": node}
    if graph.get("truncated"):
        details["graph_truncated"] = True
    raise NotFound(f"the run has no node {node!r}", details=details)


def find_artifact(node: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for artifact in _mapping(node.get("outputs")).get("artifacts") or []:
        if isinstance(artifact, Mapping) and artifact.get("name") == name:
            return artifact
    raise NotFound(
        f"the node has no output artifact {name!r}",
        details={"node": node.get("id"), "artifact": name},
    )


def checked_location(
    location: Mapping[str, Any],
    *,
    namespace: str,
    bucket: str | None,
    admin: bool,
    what: str = "artifact",
) -> ObjectRef:
    """The object to read for ``location``; refuses what we may not or cannot serve."""
    if bucket is None:
        raise DependencyDown(
            "object storage is not configured (ARTIFACT_BUCKET)",
            details={"dependency": "object_storage"},
        )
    kind = location.get("kind")
    if kind != "s3":
        raise NotFound(
            f"the {what} is stored in {kind or 'an unknown place'}, which is not served here",
            details={"kind": kind},
        )
    key = location.get("key")
    if not isinstance(key, str) or not key or ".." in key.split("/"):
        raise NotFound(f"the {what} has no usable object key")
    if location.get("bucket") not in (None, bucket):
        raise Forbidden(
            f"the {what} is stored outside the platform's bucket",
            details={"reason": "foreign_bucket"},
        )
    prefix = namespace_prefix(namespace)
    if not admin and not key.startswith(prefix):
        raise Forbidden(
            f"the {what} is stored outside its namespace's prefix",
            details={"reason": "outside_prefix", "prefix": prefix},
        )
    return ObjectRef(bucket=bucket, key=key)


def artifact_location(node: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    artifact = find_artifact(node, name)
    if artifact.get("deleted"):
        raise NotFound(f"the artifact {name!r} was garbage-collected", details={"artifact": name})
    location = _mapping(artifact.get("location"))
    if not location:
        raise NotFound(f"the artifact {name!r} has no stored location", details={"artifact": name})
    return location


def render_key_format(key_format: str, *, workflow: str, namespace: str, pod: str) -> str | None:
    """Argo's keyFormat with the variables we know; None when others remain."""
    key = (
        key_format.replace("{{workflow.name}}", workflow)
        .replace("{{workflow.namespace}}", namespace)
        .replace("{{pod.name}}", pod)
    )
    return None if _UNRESOLVED.search(key) else key


def archived_log_location(
    graph: Mapping[str, Any], node: Mapping[str, Any], *, workflow: str, namespace: str
) -> Mapping[str, Any]:
    """Where Argo archived the node's main log: its ``main-logs`` output, else derived from
    the frozen repository's keyFormat (``<keyFormat>/main.log``)."""
    try:
        return artifact_location(node, MAIN_LOGS)
    except NotFound:
        pass
    repository = _mapping(graph.get("artifact_repository"))
    place = _mapping(repository.get("location"))
    pod = node.get("podName")
    if not isinstance(pod, str) or place.get("kind") != "s3":
        raise NotFound("the step's log was not archived", details={"node": node.get("id")})
    key_format = str(place.get("keyFormat") or "{{workflow.name}}/{{pod.name}}")
    prefix = render_key_format(key_format, workflow=workflow, namespace=namespace, pod=pod)
    if prefix is None:
        raise NotFound(
            "the step's archived log cannot be located", details={"node": node.get("id")}
        )
    return {"kind": "s3", "bucket": place.get("bucket"), "key": f"{prefix.rstrip('/')}/main.log"}
