"""Types shared by the emulator's store and server: resource types, watch events, API errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypedDict

JsonObject = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
# The groups the API server itself serves among those registered; the rest are custom resources,
# served by apiextensions-apiserver with its own, narrower rules.
BUILTIN_GROUPS = frozenset(
    {"", "apps", "rbac.authorization.k8s.io", "networking.k8s.io", "coordination.k8s.io"}
)


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource: where it lives in the REST tree and how it is named."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def custom(self) -> bool:
        """A custom resource (a CRD's), not one the API server has built in."""
        return self.group not in BUILTIN_GROUPS


class WatchEvent(TypedDict):
    type: EventType
    object: JsonObject


class ApiError(Exception):
    """An error the API answers with a Kubernetes `Status` body."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        details: JsonObject | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details

    def to_status(self) -> JsonObject:
        """The Kubernetes `Status` object for this error."""
        status: JsonObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.status,
        }
        if self.details:
            status["details"] = self.details
        return status


def not_found(rtype: ResourceType, name: str) -> ApiError:
    """404 as the API server words it: `workflows.argoproj.io "x" not found`."""
    resource = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
    return ApiError(
        404,
        "NotFound",
        f'{resource} "{name}" not found',
        details={"name": name, "group": rtype.group, "kind": rtype.plural},
    )


def _core(plural: str, kind: str, *, namespaced: bool = True) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _core("namespaces", "Namespace", namespaced=False),
    _core("pods", "Pod"),
    _core("services", "Service"),
    _core("configmaps", "ConfigMap"),
    _core("secrets", "Secret"),
    _core("serviceaccounts", "ServiceAccount"),
    _core("resourcequotas", "ResourceQuota"),
    _core("limitranges", "LimitRange"),
    _core("events", "Event"),
    ResourceType("apps", "v1", "deployments", "Deployment", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True),
    ResourceType("networking.k8s.io", "v1", "ingresses", "Ingress", True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType("argoproj.io", "v1alpha1", "workflows", "Workflow", True),
    ResourceType("argoproj.io", "v1alpha1", "workflowtemplates", "WorkflowTemplate", True),
    ResourceType("argoproj.io", "v1alpha1", "cronworkflows", "CronWorkflow", True),
    ResourceType("argoproj.io", "v1alpha1", "workflowtaskresults", "WorkflowTaskResult", True),
    ResourceType(
        "argoproj.io", "v1alpha1", "clusterworkflowtemplates", "ClusterWorkflowTemplate", False
    ),
    ResourceType("argoproj.io", "v1alpha1", "eventsources", "EventSource", True),
    ResourceType("argoproj.io", "v1alpha1", "sensors", "Sensor", True),
    ResourceType("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService", True),
    ResourceType("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute", True),
    ResourceType("gateway.networking.k8s.io", "v1beta1", "referencegrants", "ReferenceGrant", True),
    ResourceType("gateway.envoyproxy.io", "v1alpha1", "securitypolicies", "SecurityPolicy", True),
)
