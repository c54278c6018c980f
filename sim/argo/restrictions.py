"""Which workflows a controller or Argo server manages (instance IDs), and the controller's
`workflowRestrictions.templateReferencing: Strict`. Purely computational, no side effects.

As Argo (util/instanceid, workflow/util.InstanceIDRequirement, workflow/util/merge.go and the
operator's setExecWorkflow at f016ad8): a controller or server with an instance ID manages only
objects labelled `workflows.argoproj.io/controller-instanceid=<ID>`; one without manages only
objects without that label. In Strict mode a workflow must reference a WorkflowTemplate, and
besides the reference it may set only the fields Argo allows a submitter to override; either
failure puts the workflow in phase Error with Argo's message, before any pod is created.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Final, Literal

from sim.argo.naming import LABEL_CONTROLLER_INSTANCE_ID, Obj

TemplateReferencing = Literal["Strict"]
STRICT: Final = "Strict"

REFERENCE_MODE_MESSAGE: Final = (
    "workflows must use workflowTemplateRef to be executed when the controller is in reference mode"
)

# WorkflowSpec's fields: JSON name -> Go name (Argo reports violations by Go name).
SPEC_FIELDS: Final[Mapping[str, str]] = {
    "templates": "Templates",
    "entrypoint": "Entrypoint",
    "arguments": "Arguments",
    "serviceAccountName": "ServiceAccountName",
    "automountServiceAccountToken": "AutomountServiceAccountToken",
    "executor": "Executor",
    "volumes": "Volumes",
    "volumeClaimTemplates": "VolumeClaimTemplates",
    "parallelism": "Parallelism",
    "artifactRepositoryRef": "ArtifactRepositoryRef",
    "suspend": "Suspend",
    "nodeSelector": "NodeSelector",
    "affinity": "Affinity",
    "tolerations": "Tolerations",
    "imagePullSecrets": "ImagePullSecrets",
    "hostNetwork": "HostNetwork",
    "dnsPolicy": "DNSPolicy",
    "dnsConfig": "DNSConfig",
    "onExit": "OnExit",
    "ttlStrategy": "TTLStrategy",
    "activeDeadlineSeconds": "ActiveDeadlineSeconds",
    "priority": "Priority",
    "schedulerName": "SchedulerName",
    "podGC": "PodGC",
    "podPriorityClassName": "PodPriorityClassName",
    "hostAliases": "HostAliases",
    "securityContext": "SecurityContext",
    "podSpecPatch": "PodSpecPatch",
    "podDisruptionBudget": "PodDisruptionBudget",
    "metrics": "Metrics",
    "shutdown": "Shutdown",
    "workflowTemplateRef": "WorkflowTemplateRef",
    "synchronization": "Synchronization",
    "volumeClaimGC": "VolumeClaimGC",
    "retryStrategy": "RetryStrategy",
    "podMetadata": "PodMetadata",
    "templateDefaults": "TemplateDefaults",
    "archiveLogs": "ArchiveLogs",
    "hooks": "Hooks",
    "workflowMetadata": "WorkflowMetadata",
    "artifactGC": "ArtifactGC",
    "executorPlugins": "ExecutorPlugins",
    "podResources": "PodResources",
    "resourceClaims": "ResourceClaims",
}
# Go `string` fields: "" is their zero value. Every other field is a pointer, slice, map or
# struct, set as soon as the JSON holds anything but null (an empty list or object included).
STRING_FIELDS: Final = frozenset(
    {
        "entrypoint",
        "serviceAccountName",
        "onExit",
        "schedulerName",
        "podPriorityClassName",
        "podSpecPatch",
        "shutdown",
    }
)
# allowedUserOverrideFields.
USER_OVERRIDABLE: Final = frozenset(
    {
        "arguments",
        "entrypoint",
        "shutdown",
        "suspend",
        "activeDeadlineSeconds",
        "priority",
        "ttlStrategy",
        "podGC",
        "volumeClaimGC",
        "archiveLogs",
        "workflowMetadata",
        "workflowTemplateRef",
        "metrics",
        "artifactGC",
    }
)
# artifactGC is overridable, but not these of its fields: they reach the artifact GC pod.
ARTIFACT_GC_GUARDED: Final[Mapping[str, str]] = {
    "podSpecPatch": "ArtifactGC.PodSpecPatch",
    "serviceAccountName": "ArtifactGC.ServiceAccountName",
    "podMetadata": "ArtifactGC.PodMetadata",
}


# -- instance IDs ---------------------------------------------------------------------------


def instance_selector(instance_id: str | None) -> str:
    """The label selector Argo lists and watches with (`InstanceIDRequirement`)."""
    if instance_id:
        return f"{LABEL_CONTROLLER_INSTANCE_ID}={instance_id}"
    return f"!{LABEL_CONTROLLER_INSTANCE_ID}"


def manages(labels: Mapping[str, str] | None, instance_id: str | None) -> bool:
    """Whether a controller or server with `instance_id` manages an object with `labels`."""
    labels = labels or {}
    if not instance_id:
        return LABEL_CONTROLLER_INSTANCE_ID not in labels
    return labels.get(LABEL_CONTROLLER_INSTANCE_ID) == instance_id


def label_instance(obj: Obj, instance_id: str | None) -> None:
    """What the Argo server does to a workflow it creates or lints: its own instance ID on,
    or (without one) any instance ID label off."""
    metadata = obj.setdefault("metadata", {})
    labels = metadata.get("labels") or {}
    if instance_id:
        labels[LABEL_CONTROLLER_INSTANCE_ID] = instance_id
    else:
        labels.pop(LABEL_CONTROLLER_INSTANCE_ID, None)
    metadata["labels"] = labels


def not_managed_message(name: object) -> str:
    """The Argo server's answer (InvalidArgument) about another instance's object."""
    return f"'{name}' is not managed by the current Argo Server"


# -- Strict template referencing ------------------------------------------------------------


def _is_set(field: str, value: object) -> bool:
    if value is None:
        return False
    return not (field in STRING_FIELDS and value == "")


def override_violations(spec: Mapping[str, object]) -> list[str]:
    """The fields a workflow sets besides what a submitter may override, by Go name, sorted
    (`ValidateUserOverrides`). Keys that are no WorkflowSpec field are dropped by Argo's
    decoding, so they are not violations."""
    violations = [
        SPEC_FIELDS[field]
        for field, value in spec.items()
        if field in SPEC_FIELDS and field not in USER_OVERRIDABLE and _is_set(field, value)
    ]
    artifact_gc = spec.get("artifactGC")
    if isinstance(artifact_gc, Mapping):
        violations.extend(
            name
            for field, name in ARTIFACT_GC_GUARDED.items()
            if _is_set(field, artifact_gc.get(field))
        )
    return sorted(violations)


def reference_mode_error(spec: Mapping[str, object]) -> str | None:
    """Why a Strict controller errors a workflow at its start, or None when it may run."""
    if spec.get("workflowTemplateRef") is None:
        return REFERENCE_MODE_MESSAGE
    violations = override_violations(spec)
    if violations:
        return (
            f"fields [{' '.join(violations)}] are not permitted when using workflowTemplateRef "
            "with templateReferencing restriction"
        )
    return None


def sanitize_user_spec(spec: Mapping[str, object]) -> Obj:
    """Only the overridable fields of a workflow's spec, as a Strict controller merges it over
    the template (`SanitizeUserWorkflowSpec`)."""
    clean: Obj = {k: copy.deepcopy(v) for k, v in spec.items() if k in USER_OVERRIDABLE}
    artifact_gc = clean.get("artifactGC")
    if isinstance(artifact_gc, dict):
        for field in ARTIFACT_GC_GUARDED:
            artifact_gc.pop(field, None)
    return clean
