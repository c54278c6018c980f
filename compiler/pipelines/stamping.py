"""Stamp a rendered WorkflowTemplate with the identity only workflow-manager may give it.

Purely computational, no side effects: the input document is never modified; a stamped deep copy
is returned. Whatever a tenant wrote in the identity fields is replaced or removed:

- ``metadata`` keeps only the tenant's labels and annotations outside the reserved domains
  (``reserved_key``: ``kubeopera.io``, ``argoproj.io`` and their subdomains, such as
  ``workflows.argoproj.io/``); name and namespace are ours, and every other metadata field
  (generateName, ownerReferences, finalizers, uid, ...) is dropped;
- our labels (pipeline id, version, kind) go on the template and on
  ``spec.workflowMetadata.labels``, so every run created from it carries them too;
- pods run as the namespace's workload account without a mounted token
  (``spec.automountServiceAccountToken: false``); the executor identity is set through
  ``spec.executor`` so Argo's own containers get it and user containers never do;
- a template annotated ``kubeopera.io/runs-as: spark`` or ``training`` (the wizard's
  ``runtime: spark|pytorch``) runs as the namespace's ``kubeopera-spark`` or
  ``kubeopera-training`` account with its token mounted, which Spark drivers and PyTorch
  launchers need to create their workers. These are the only accounts a template may name;
  ``compiler.pipelines.allowlist`` refuses any other.

``with_tracking_credentials`` is the one thing added after the allowlist has judged the
document: the reference to the platform's ``kubeopera-mlflow`` Secret, which the allowlist
refuses in any tenant's writing, and the experiment's name (``compiler.pipelines.definitions``,
step 5).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

from compiler.tenants.provisioning import EXECUTOR_SERVICE_ACCOUNT as EXECUTOR_SERVICE_ACCOUNT
from compiler.tenants.provisioning import SPARK_SERVICE_ACCOUNT as SPARK_SERVICE_ACCOUNT
from compiler.tenants.provisioning import TRAINING_SERVICE_ACCOUNT as TRAINING_SERVICE_ACCOUNT
from compiler.tenants.provisioning import WORKLOAD_SERVICE_ACCOUNT as WORKLOAD_SERVICE_ACCOUNT
from compiler.tracking.accounts import EXPERIMENT_VARIABLE
from shared import labels as L
from shared.pipelines import PipelineKind

# Template-level accounts a template may run as (its token mounted): Spark and PyTorch jobs.
RUNS_AS_ANNOTATION: Final = "kubeopera.io/runs-as"
RUNS_AS_ACCOUNTS: Final[Mapping[str, str]] = {
    "spark": SPARK_SERVICE_ACCOUNT,
    "training": TRAINING_SERVICE_ACCOUNT,
}
TEMPLATE_SERVICE_ACCOUNTS: Final = frozenset(RUNS_AS_ACCOUNTS.values())
# Label and annotation keys under these domains, or any subdomain of them, are the platform's
# (kubeopera.io/, x.kubeopera.io/) and Argo's (workflows.argoproj.io/, events.argoproj.io/, ...):
# the controllers act on them and our records read them (the watcher attributes a run to a sensor
# by events.argoproj.io/sensor, and finds its pods by workflows.argoproj.io/pod-name-format).
RESERVED_DOMAINS: Final = ("kubeopera.io", "argoproj.io")

_NAME_UNSAFE: Final = re.compile(r"[^a-z0-9-]+")
_MAX_SLUG: Final = 40


def template_name(pipeline_id: str, version: int) -> str:
    """The WorkflowTemplate name of a pipeline version: deterministic, DNS-1123, <= 63 chars.

    It is also the value of Argo's ``workflow-template`` label on runs, hence the label limit.
    A pipeline id that is not already a short DNS label gets a hash suffix, so that two ids
    that slug to the same text still get different names.
    """
    if version < 1:
        raise ValueError("a pipeline version is a positive integer")
    slug = _NAME_UNSAFE.sub("-", pipeline_id.lower()).strip("-")
    if slug != pipeline_id or len(slug) > _MAX_SLUG or not slug:
        digest = hashlib.sha256(pipeline_id.encode()).hexdigest()[:8]
        slug = f"{slug[:_MAX_SLUG].strip('-')}-{digest}".lstrip("-")
    return f"p-{slug}-v{version}"


def _copy(template: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy. Templates are JSON documents (compiled, or parsed by
    ``compiler.pipelines.yamldoc``),
    which a JSON round trip copies about ten times faster than ``copy.deepcopy``; anything
    else (a caller's own mapping with other types) falls back to ``deepcopy``."""
    try:
        copied = orjson.loads(orjson.dumps(template))
    except TypeError:
        return copy.deepcopy(dict(template))
    return copied if isinstance(copied, dict) else copy.deepcopy(dict(template))


def reserved_key(key: object) -> bool:
    """Whether a label or annotation key is under a reserved domain (``RESERVED_DOMAINS``).

    Only a prefixed key (``<domain>/<name>``) is; the domain is compared case-insensitively,
    although the API server accepts only lower-case prefixes, so that no spelling slips by.
    """
    prefix, slash, _ = str(key).partition("/")
    domain = prefix.lower()
    return bool(slash) and any(
        domain == reserved or domain.endswith(f".{reserved}") for reserved in RESERVED_DOMAINS
    )


def _unreserved(values: object) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        return {}
    return {str(key): value for key, value in values.items() if not reserved_key(key)}


def identity_labels(*, pipeline_id: str, version: int, kind: PipelineKind) -> dict[str, str]:
    """Our labels on a pipeline version's template and on every run created from it."""
    return {
        L.PIPELINE_ID: pipeline_id,
        L.PIPELINE_VERSION: str(version),
        L.PIPELINE_KIND: kind,
    }


def stamp(
    template: Mapping[str, Any],
    *,
    tenant: str,
    namespace: str,
    pipeline_id: str,
    version: int,
    kind: PipelineKind,
    service_account: str = WORKLOAD_SERVICE_ACCOUNT,
    executor_service_account: str = EXECUTOR_SERVICE_ACCOUNT,
) -> dict[str, Any]:
    """A deep copy of ``template`` carrying our identity; the tenant's identity fields removed."""
    if kind not in (L.PIPELINE_KIND_DATA, L.PIPELINE_KIND_ML):
        raise ValueError(f"unknown pipeline kind {kind!r}")
    if namespace != f"{L.DATA_NAMESPACE_PREFIX}{tenant}":
        raise ValueError("a pipeline template lives in its tenant's data namespace")
    document = _copy(template)
    ours = identity_labels(pipeline_id=pipeline_id, version=version, kind=kind)

    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    stamped_metadata: dict[str, Any] = {
        "name": template_name(pipeline_id, version),
        "namespace": namespace,
        "labels": {**_unreserved(metadata.get("labels")), **ours},
    }
    annotations = _unreserved(metadata.get("annotations"))
    if annotations:
        stamped_metadata["annotations"] = annotations
    document["metadata"] = stamped_metadata

    spec = document.get("spec")
    if not isinstance(spec, dict):
        return document  # nothing more to stamp; the allowlist refuses a spec-less document
    spec["serviceAccountName"] = service_account
    spec["automountServiceAccountToken"] = False
    spec["executor"] = {"serviceAccountName": executor_service_account}
    workflow_metadata = spec.get("workflowMetadata")
    workflow_metadata = dict(workflow_metadata) if isinstance(workflow_metadata, Mapping) else {}
    workflow_metadata["labels"] = {**_unreserved(workflow_metadata.get("labels")), **ours}
    spec["workflowMetadata"] = workflow_metadata

    templates = spec.get("templates")
    for entry in templates if isinstance(templates, list) else []:
        if not isinstance(entry, dict):
            continue
        pod_metadata = entry.get("metadata")
        pod_annotations = (
            pod_metadata.get("annotations") if isinstance(pod_metadata, Mapping) else None
        )
        runs_as = (
            pod_annotations.get(RUNS_AS_ANNOTATION)
            if isinstance(pod_annotations, Mapping)
            else None
        )
        account = RUNS_AS_ACCOUNTS.get(runs_as) if isinstance(runs_as, str) else None
        if account is not None:
            entry["serviceAccountName"] = account
            entry["automountServiceAccountToken"] = True
    return document


def with_tracking_credentials(
    template: Mapping[str, Any], *, secret: str, experiment: str
) -> dict[str, Any]:
    """A copy of ``template`` whose every main container (a template's ``container``,
    ``script`` and each of a ``containerSet``'s; not init containers or sidecars) gets
    ``envFrom`` the Secret ``secret`` (the MLflow account's ``MLFLOW_TRACKING_*`` variables)
    and ``MLFLOW_EXPERIMENT_NAME=experiment``. What the tenant wrote still wins: Kubernetes
    gives ``env`` precedence over ``envFrom``, and an ``MLFLOW_EXPERIMENT_NAME`` of the
    tenant's own is kept; either only changes what the tenant's own code reads (MLflow decides
    what the account may reach). Suspend, resource and other templates run no tenant container
    and get nothing. Purely computational."""
    document = _copy(template)
    spec = document.get("spec")
    templates = spec.get("templates") if isinstance(spec, dict) else None
    for entry in templates if isinstance(templates, list) else []:
        if not isinstance(entry, dict):
            continue
        containers = [entry.get("container"), entry.get("script")]
        container_set = entry.get("containerSet")
        if isinstance(container_set, dict) and isinstance(container_set.get("containers"), list):
            containers += container_set["containers"]
        for container in containers:
            if not isinstance(container, dict):
                continue
            env_from = container.get("envFrom")
            env_from = env_from if isinstance(env_from, list) else []
            container["envFrom"] = [{"secretRef": {"name": secret}}, *env_from]
            env = container.get("env")
            env = env if isinstance(env, list) else []
            named = {item.get("name") for item in env if isinstance(item, dict)}
            if EXPERIMENT_VARIABLE not in named:
                env = [{"name": EXPERIMENT_VARIABLE, "value": experiment}, *env]
            container["env"] = env
    return document


def run_manifest(
    *,
    tenant: str,
    pipeline_id: str,
    kind: PipelineKind,
    version: int,
    template: str,
    arguments: list[dict[str, str]],
    actor: str,
    instance_id: str,
) -> dict[str, Any]:
    """The Workflow a run creates: a reference to the version's template and nothing else the
    tenant could not set themselves (the controller runs only template references), labelled
    with the data controller's instance ID: without it the CI/CD controller, which runs any
    workflow, would take it, and the data controller would never see it."""
    labels = identity_labels(pipeline_id=pipeline_id, version=version, kind=kind)
    labels[L.ARGO_CONTROLLER_INSTANCE_ID] = instance_id
    spec: dict[str, Any] = {"workflowTemplateRef": {"name": template}}
    if arguments:
        spec["arguments"] = {"parameters": arguments}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "generateName": f"{template}-",
            "namespace": f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
            "labels": labels,
            "annotations": {L.ARGO_CREATOR: actor[:63]},
        },
        "spec": spec,
    }
