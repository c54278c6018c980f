"""Label and annotation keys: the ones workflow-manager owns and those Argo (and Argo Events) set.

Constants only. Labels on a Workflow are tenant-controlled: read them for classification and
filtering, never for tenancy or authorisation.
"""

from __future__ import annotations

from typing import Final

# --- ours (stamped by the compiler on templates, schedules and triggers) ---------------------
KUBEOPERA_PREFIX: Final = "kubeopera.io/"
PIPELINE_ID: Final = "kubeopera.io/pipeline-id"
PIPELINE_VERSION: Final = "kubeopera.io/pipeline-version"
# "data" or "ml"; see PIPELINE_KIND_DATA / PIPELINE_KIND_ML.
PIPELINE_KIND: Final = "kubeopera.io/pipeline-kind"
PIPELINE_KIND_DATA: Final = "data"
PIPELINE_KIND_ML: Final = "ml"
# Set on workflows created by our event triggers (value: the trigger's name or id).
TRIGGER: Final = "kubeopera.io/trigger"
# A tenant's data secret (a Secret in its namespace that pipelines may reference by name).
DATA_SECRET: Final = "kubeopera.io/data-secret"
DATA_SECRET_VALUE: Final = "true"
# Where a run came from when nothing else says it; the only value we read is SOURCE_CICD.
SOURCE: Final = "kubeopera.io/source"
SOURCE_CICD: Final = "cicd"

# --- namespaces we own ------------------------------------------------------------------------
DATA_NAMESPACE_PREFIX: Final = "kubeopera-data-"
SERVE_NAMESPACE_PREFIX: Final = "kubeopera-serve-"
CICD_NAMESPACE: Final = "kubeopera-cicd"
# controller-instanceid value of the CI/CD builds' Argo controller.
CICD_CONTROLLER_INSTANCE_ID: Final = "cicd"
# The default controller-instanceid of the data controller, the host's Argo for tenants'
# pipelines (setting ARGO_DATA_INSTANCE_ID): every workflow we start there carries it.
DATA_CONTROLLER_INSTANCE_ID: Final = "kubeopera-data"

# --- Argo Workflows (prefix workflows.argoproj.io/) -------------------------------------------
ARGO_PREFIX: Final = "workflows.argoproj.io/"
ARGO_PHASE: Final = "workflows.argoproj.io/phase"
ARGO_COMPLETED: Final = "workflows.argoproj.io/completed"
ARGO_WORKFLOW_TEMPLATE: Final = "workflows.argoproj.io/workflow-template"
ARGO_CLUSTER_WORKFLOW_TEMPLATE: Final = "workflows.argoproj.io/cluster-workflow-template"
ARGO_CRON_WORKFLOW: Final = "workflows.argoproj.io/cron-workflow"
ARGO_WORKFLOW_EVENT_BINDING: Final = "workflows.argoproj.io/workflow-event-binding"
ARGO_CREATOR: Final = "workflows.argoproj.io/creator"
ARGO_ACTOR: Final = "workflows.argoproj.io/actor"
ARGO_ACTION: Final = "workflows.argoproj.io/action"
ARGO_ARCHIVING_STATUS: Final = "workflows.argoproj.io/workflow-archiving-status"
ARGO_RESUBMITTED_FROM: Final = "workflows.argoproj.io/resubmitted-from-workflow"
ARGO_CONTROLLER_INSTANCE_ID: Final = "workflows.argoproj.io/controller-instanceid"
# On pods.
ARGO_POD_WORKFLOW: Final = "workflows.argoproj.io/workflow"
ARGO_POD_ON_EXIT: Final = "workflows.argoproj.io/on-exit"
# Annotation on workflows: the pod naming convention, "v1" (pod name = node id) or "v2".
ARGO_POD_NAME_FORMAT: Final = "workflows.argoproj.io/pod-name-format"
POD_NAME_FORMAT_V1: Final = "v1"
POD_NAME_FORMAT_V2: Final = "v2"
# Annotation on the namespace ConfigMap `artifact-repositories`: which data key is the default.
ARGO_DEFAULT_ARTIFACT_REPOSITORY: Final = "workflows.argoproj.io/default-artifact-repository"

# --- Argo Events (set on the objects a Sensor's trigger creates) ------------------------------
EVENTS_SENSOR: Final = "events.argoproj.io/sensor"
EVENTS_TRIGGER: Final = "events.argoproj.io/trigger"
SENSOR_KIND: Final = "Sensor"

# --- tenant provisioning (objects the compiler keeps converged in tenant namespaces) ----------
# On every object we provision, so our objects can be listed and told apart from others'.
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_US: Final = "workflow-manager"
# The tenant a provisioned namespace (and each object in it) belongs to.
TENANT: Final = "kubeopera.io/tenant"
# Annotation on a tenant namespace: the provisioning spec hash last applied to it in full.
PROVISIONING_SPEC_HASH: Final = "kubeopera.io/provisioning-spec-hash"
# Pod Security admission (namespace labels).
POD_SECURITY_ENFORCE: Final = "pod-security.kubernetes.io/enforce"
POD_SECURITY_ENFORCE_VERSION: Final = "pod-security.kubernetes.io/enforce-version"
POD_SECURITY_WARN: Final = "pod-security.kubernetes.io/warn"
POD_SECURITY_WARN_VERSION: Final = "pod-security.kubernetes.io/warn-version"
POD_SECURITY_AUDIT: Final = "pod-security.kubernetes.io/audit"
POD_SECURITY_AUDIT_VERSION: Final = "pod-security.kubernetes.io/audit-version"
# Set by the API server on every namespace (network policies select namespaces by it).
NAMESPACE_NAME: Final = "kubernetes.io/metadata.name"
# Argo: the Secret holding a service account's token, when it is not found by name.
ARGO_SERVICE_ACCOUNT_TOKEN_NAME: Final = "workflows.argoproj.io/service-account-token.name"
