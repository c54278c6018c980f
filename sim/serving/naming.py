"""Names, hosts and revision templates of a KServe predictor in Knative mode; purely
computational, no side effects."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

GROUP = "serving.kserve.io"
VISIBILITY_LABEL = "networking.knative.dev/visibility"
CLUSTER_LOCAL = "cluster-local"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
REVISION_LABEL = "serving.knative.dev/revision"
CONFIGURATION_LABEL = "serving.knative.dev/configuration"
SERVICE_LABEL = "serving.knative.dev/service"
# Fields of the predictor that are route settings, not part of the revision template
# (createKnativeService moves them to the route or to annotations).
ROUTE_FIELDS = frozenset({"canaryTrafficPercent"})


def predictor_service(isvc: str) -> str:
    """The predictor's Knative Service: `<isvc>-predictor`."""
    return f"{isvc}-predictor"


def revision_name(isvc: str, number: int) -> str:
    """Knative's revision names: `<service>-<5 digits>`."""
    return f"{predictor_service(isvc)}-{number:05d}"


def cluster_local_host(isvc: str, namespace: str) -> str:
    return f"{predictor_service(isvc)}.{namespace}.svc.cluster.local"


def hosts(isvc: str, namespace: str, *, domain: str, cluster_local: bool) -> tuple[str, ...]:
    """Every host the gateway routes to the predictor: the cluster-local forms Knative puts on
    `kourier-internal` (`<svc>.<ns>`, `<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`), and
    the external `<svc>.<ns>.<domain>` unless the service is cluster-local."""
    service = predictor_service(isvc)
    local = (
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        cluster_local_host(isvc, namespace),
    )
    return local if cluster_local else (*local, f"{service}.{namespace}.{domain}")


def url(isvc: str, namespace: str, *, domain: str, cluster_local: bool) -> str:
    """The predictor's (and, with Kourier's disableIstioVirtualHost, the ISVC's) URL."""
    if cluster_local:
        return f"http://{cluster_local_host(isvc, namespace)}"
    return f"http://{predictor_service(isvc)}.{namespace}.{domain}"


def is_cluster_local(metadata: Mapping[str, Any]) -> bool:
    labels = metadata.get("labels") or {}
    return bool(labels.get(VISIBILITY_LABEL) == CLUSTER_LOCAL)


def template(predictor: Mapping[str, Any]) -> dict[str, Any]:
    """The part of `spec.predictor` a revision is made of (a change makes a new revision)."""
    return {key: value for key, value in predictor.items() if key not in ROUTE_FIELDS}


def template_digest(predictor: Mapping[str, Any]) -> str:
    encoded = json.dumps(template(predictor), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


def canary_percent(predictor: Mapping[str, Any]) -> int | None:
    """`canaryTrafficPercent` (None when absent; the CRD bounds it to 0..100)."""
    value = predictor.get("canaryTrafficPercent")
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None
    return max(0, min(100, value))
