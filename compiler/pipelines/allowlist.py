"""Check a WorkflowTemplate against the allowlist: nothing in it may leave the tenant namespace.

Purely computational, no side effects. ``check`` returns every violation it finds, each with a
JSON-path-like location (``spec.templates[2].container.securityContext.privileged``), a rule
name from ``RULES`` and a sentence. It never raises on a malformed document: a list where an
object belongs, a number where a name belongs, a template nested absurdly deep, each is a
violation. It is an *allowlist*: at the document, spec, template, step, container, volume and
security-context levels only known fields are accepted, so a field Argo or Kubernetes adds
tomorrow is refused (``unknown_field``) until someone has decided it is safe. Every rule and the
reason for it is listed in docs/security.md.

The checker runs on the stamped document (``compiler.pipelines.stamping``): it accepts exactly the
identity stamping gives (the workload account, the executor account, no mounted token) and the
platform's Spark and training accounts on templates, and nothing else. Anything the platform
itself must add that a tenant may not write (a reference to one of its own Secrets, say) is added
after the check, never before: the check would refuse it, rightly.

Besides the document, the check takes what it is judged against: the tenant (its namespace and
its ``artifacts/`` prefix of ``artifact_bucket``), the pipeline's kind and the largest step
(``limits``: ``DATA_MAX_CPU``, ``DATA_MAX_MEMORY``, ``ML_MAX_GPU``), and ``data_secrets``, the
names of the Secrets the tenant may reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from compiler.pipelines import podrules as P
from compiler.pipelines.compile import GPU_RESOURCE, StepLimits
from compiler.pipelines.podrules import RULES, Ceiling, Walk
from compiler.pipelines.stamping import (
    EXECUTOR_SERVICE_ACCOUNT,
    TEMPLATE_SERVICE_ACCOUNTS,
    WORKLOAD_SERVICE_ACCOUNT,
    reserved_key,
)
from shared import labels as L
from shared import quantity, storage
from shared.errors import Refused
from shared.pipelines import PipelineKind
from shared.stages import reserved_name

__all__ = ["RULES", "Violation", "check", "raise_if_refused"]

API_VERSION: Final = "argoproj.io/v1alpha1"
KIND: Final = "WorkflowTemplate"
MAX_DEPTH: Final = 8  # inline templates within inline templates: deeper is refused
DISPLAY_NAME: Final = "workflows.argoproj.io/display-name"

_DOCUMENT: Final = frozenset({"apiVersion", "kind", "metadata", "spec"})
_METADATA: Final = frozenset({"name", "generateName", "namespace", "labels", "annotations"})
_SPEC: Final = frozenset(
    {
        "templates", "entrypoint", "arguments", "serviceAccountName", "executor", "volumes",
        "automountServiceAccountToken", "volumeClaimTemplates", "parallelism", "suspend",
        "artifactRepositoryRef", "imagePullSecrets", "dnsPolicy", "dnsConfig", "onExit",
        "ttlStrategy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "priority", "podGC",
        "hostAliases", "securityContext", "metrics", "synchronization", "volumeClaimGC",
        "retryStrategy", "podMetadata", "templateDefaults", "archiveLogs", "hooks",
        "workflowMetadata", "artifactGC", "shutdown", "hostNetwork",
    }
)  # fmt: skip
_TEMPLATE: Final = frozenset(
    {
        "name", "inputs", "outputs", "metadata", "daemon", "steps", "container", "containerSet",
        "script", "dag", "suspend", "data", "volumes", "initContainers", "sidecars",
        "archiveLocation", "activeDeadlineSeconds", "retryStrategy", "parallelism", "failFast",
        "serviceAccountName", "automountServiceAccountToken", "hostAliases", "securityContext",
        "metrics", "synchronization", "memoize", "timeout", "annotations",
    }
)  # fmt: skip
_STEP: Final = frozenset(
    {
        "name", "template", "inline", "arguments", "templateRef", "withItems", "withParam",
        "withSequence", "when", "continueOn", "onExit", "hooks", "depends", "dependencies",
    }
)  # fmt: skip
# Fields refused wherever they appear at the spec or template level, with their rule.
_REFUSED_POD_FIELDS: Final[Mapping[str, str]] = {
    "podSpecPatch": "pod_spec_patch",
    "nodeSelector": "scheduling",
    "affinity": "scheduling",
    "tolerations": "scheduling",
    "schedulerName": "scheduling",
    "priorityClassName": "scheduling",
    "podPriorityClassName": "scheduling",
    "podPriority": "scheduling",
    "podDisruptionBudget": "scheduling",
    "workflowTemplateRef": "workflow_template_ref",
}
# The labels stamping writes on spec.workflowMetadata (``stamping.identity_labels``).
_IDENTITY_LABELS: Final = frozenset({L.PIPELINE_ID, L.PIPELINE_VERSION, L.PIPELINE_KIND})
_REFUSED_TEMPLATE_KINDS: Final[Mapping[str, str]] = {
    "resource": "resource_template",
    "http": "http_template",
    "plugin": "plugin_template",
    "executor": "executor",
}


@dataclass(frozen=True, slots=True)
class Violation:
    """One refused construct: where it is, which rule refuses it, and why."""

    path: str
    rule: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "rule": self.rule, "message": self.message}


def raise_if_refused(violations: list[Violation]) -> None:
    """Raise ``Refused`` (422) listing every violation, when there is any."""
    if violations:
        raise Refused(
            f"the template was refused: {len(violations)} violation(s)",
            details={"violations": [violation.as_json() for violation in violations]},
        )


def check(
    template: object,
    *,
    namespace: str,
    tenant: str,
    artifact_bucket: str,
    kind: PipelineKind,
    limits: StepLimits,
    data_secrets: frozenset[str],
    service_account: str = WORKLOAD_SERVICE_ACCOUNT,
    executor_service_account: str = EXECUTOR_SERVICE_ACCOUNT,
) -> list[Violation]:
    """Every violation of the allowlist in ``template`` (empty: accepted), in document order.

    ``data_secrets``: the names of the Secrets the tenant created through workflow-manager,
    the only ones a template may reference (no such Secret exists yet: the set is empty).
    """
    if namespace != f"{L.DATA_NAMESPACE_PREFIX}{tenant}":
        raise ValueError("a pipeline template is checked against its tenant's data namespace")
    walk = Walk(
        namespace=namespace,
        artifact_bucket=artifact_bucket,
        artifact_prefix=storage.tenant_artifacts(tenant),
        data_secrets=frozenset(data_secrets),
        ceilings=ceilings(limits, kind),
    )
    _Checker(walk, service_account, executor_service_account).document(template)
    return [Violation(path, rule, message) for (path, rule), message in walk.found.items()]


def ceilings(limits: StepLimits, kind: PipelineKind) -> dict[str, Ceiling]:
    """The most of each resource one container may ask for, named by its setting."""
    gpus = limits.max_gpu if kind == L.PIPELINE_KIND_ML else 0
    return {
        "cpu": Ceiling(quantity.parse(limits.max_cpu), f"DATA_MAX_CPU ({limits.max_cpu})"),
        "memory": Ceiling(
            quantity.parse(limits.max_memory), f"DATA_MAX_MEMORY ({limits.max_memory})"
        ),
        GPU_RESOURCE: Ceiling(
            Decimal(gpus),
            f"ML_MAX_GPU ({gpus})"
            if kind == L.PIPELINE_KIND_ML
            else "the 0 GPUs of a data pipeline (GPUs are for ML pipelines, up to ML_MAX_GPU)",
        ),
    }


class _Checker:
    def __init__(self, walk: Walk, service_account: str, executor_service_account: str) -> None:
        self.w = walk
        self.service_account = service_account
        self.executor = executor_service_account

    # --- document and spec ---------------------------------------------------------------------
    def document(self, document: object) -> None:
        w = self.w
        root = w.mapping(document, "$")
        if root is None:
            if document is None:
                w.add("$", "malformed", "the document is empty")
            return
        w.known(root, "", _DOCUMENT)
        if root.get("apiVersion") != API_VERSION:
            w.add("apiVersion", "document_kind", f"only {API_VERSION} documents are accepted")
        if root.get("kind") != KIND:
            w.add("kind", "document_kind", f"only {KIND} documents are accepted")
        metadata = w.mapping(root.get("metadata"), "metadata")
        labels: Mapping[str, Any] = {}
        if metadata is not None:
            w.known(metadata, "metadata", _METADATA)
            labels = w.mapping(metadata.get("labels"), "metadata.labels") or {}
            w.mapping(metadata.get("annotations"), "metadata.annotations")
        if "spec" not in root:
            w.add("spec", "malformed", "a WorkflowTemplate needs a spec")
        spec = w.mapping(root.get("spec"), "spec")
        if spec is not None:
            self.spec(spec, labels)
        w.namespaces(root, "")

    def spec(self, spec: Mapping[str, Any], labels: Mapping[str, Any]) -> None:
        w = self.w
        w.known(spec, "spec", _SPEC | _REFUSED_POD_FIELDS.keys())
        for key, rule in _REFUSED_POD_FIELDS.items():
            if key in spec:
                w.add(f"spec.{key}", rule, RULES[rule])
        if w.is_set(spec.get("hostNetwork")):
            w.add("spec.hostNetwork", "host_namespaces", RULES["host_namespaces"])
        if "serviceAccountName" in spec and spec["serviceAccountName"] != self.service_account:
            w.add("spec.serviceAccountName", "service_account", RULES["service_account"])
        if w.is_set(spec.get("automountServiceAccountToken")):
            w.add("spec.automountServiceAccountToken", "service_account", RULES["service_account"])
        if "executor" in spec and spec["executor"] != {"serviceAccountName": self.executor}:
            w.add("spec.executor", "executor", RULES["executor"])
        for index, claim in enumerate(
            w.items(spec.get("volumeClaimTemplates"), "spec.volumeClaimTemplates")
        ):
            P.claim_template(w, claim, f"spec.volumeClaimTemplates[{index}]")
        for index, volume in enumerate(w.items(spec.get("volumes"), "spec.volumes")):
            P.volume(w, volume, f"spec.volumes[{index}]")
        for index, secret in enumerate(
            w.items(spec.get("imagePullSecrets"), "spec.imagePullSecrets")
        ):
            P.secret_ref(w, secret, f"spec.imagePullSecrets[{index}]", "name")
        if "securityContext" in spec:
            P.pod_security(w, spec["securityContext"], "spec.securityContext")
        for field in ("entrypoint", "onExit"):
            self.platform_reference(spec, field, "spec")
        self.arguments(spec.get("arguments"), "spec.arguments")
        self.hooks(spec.get("hooks"), "spec.hooks")
        reference = spec.get("artifactRepositoryRef")
        P.artifact_repository_ref(w, reference, "spec.artifactRepositoryRef")
        P.artifact_gc(w, spec.get("artifactGC"), "spec.artifactGC")
        P.pod_metadata(w, spec.get("podMetadata"), "spec.podMetadata")
        self.workflow_metadata(spec.get("workflowMetadata"), labels)
        if "templateDefaults" in spec:
            self.template(spec["templateDefaults"], "spec.templateDefaults", 0)
        for index, template in enumerate(w.items(spec.get("templates"), "spec.templates")):
            self.template(template, f"spec.templates[{index}]", 0, runs_as=True)

    def workflow_metadata(self, value: object, labels: Mapping[str, Any]) -> None:
        w = self.w
        metadata = w.mapping(value, "spec.workflowMetadata")
        if metadata is None:
            return
        w.known(
            metadata, "spec.workflowMetadata", frozenset({"labels", "annotations", "labelsFrom"})
        )
        own = w.mapping(metadata.get("labels"), "spec.workflowMetadata.labels") or {}
        for key, label in own.items():
            # Ours are accepted only as stamping sets them: equal to the template's own.
            stamped = key in _IDENTITY_LABELS and labels.get(key) == label
            if reserved_key(key) and not stamped:
                path = w.join("spec.workflowMetadata.labels", key)
                w.add(path, "reserved_label", RULES["reserved_label"])
        from_labels = w.mapping(metadata.get("labelsFrom"), "spec.workflowMetadata.labelsFrom")
        for key in from_labels or {}:
            if reserved_key(key):
                w.add(
                    w.join("spec.workflowMetadata.labelsFrom", key),
                    "reserved_label",
                    RULES["reserved_label"],
                )
        # On the Workflow object, not its pods: only the reserved domains matter there.
        annotations = w.mapping(metadata.get("annotations"), "spec.workflowMetadata.annotations")
        for key in annotations or {}:
            if reserved_key(key):
                w.add(
                    w.join("spec.workflowMetadata.annotations", key),
                    "reserved_annotation",
                    RULES["reserved_annotation"],
                )

    # --- templates and their steps -------------------------------------------------------------
    def template(self, value: object, path: str, depth: int, *, runs_as: bool = False) -> None:
        """One template; ``runs_as``: one of ``spec.templates``, where stamping reads
        ``kubeopera.io/runs-as`` (templateDefaults and inline templates are not)."""
        w = self.w
        template = w.mapping(value, path)
        if template is None:
            return
        if depth > MAX_DEPTH:
            w.add(path, "malformed", f"inline templates are nested more than {MAX_DEPTH} deep")
            return
        w.known(
            template, path, _TEMPLATE | _REFUSED_POD_FIELDS.keys() | _REFUSED_TEMPLATE_KINDS.keys()
        )
        self.platform_reference(template, "name", path)
        # Argo shows a node under its template's display-name annotation: never as a stage.
        for key, shown in (
            w.mapping(template.get("annotations"), f"{path}.annotations") or {}
        ).items():
            if str(key).lower() == DISPLAY_NAME and reserved_name(shown):
                w.add(w.join(f"{path}.annotations", key), "platform_stage", RULES["platform_stage"])
        for key, rule in {**_REFUSED_POD_FIELDS, **_REFUSED_TEMPLATE_KINDS}.items():
            if key in template:
                w.add(f"{path}.{key}", rule, RULES[rule])
        account = template.get("serviceAccountName")
        account = account if isinstance(account, str) else None
        if "serviceAccountName" in template and account not in TEMPLATE_SERVICE_ACCOUNTS:
            w.add(f"{path}.serviceAccountName", "service_account", RULES["service_account"])
        if w.is_set(template.get("automountServiceAccountToken")) and (
            template.get("automountServiceAccountToken") is not True
            or account not in TEMPLATE_SERVICE_ACCOUNTS
        ):
            w.add(
                f"{path}.automountServiceAccountToken", "service_account", RULES["service_account"]
            )
        for field in ("container", "script"):
            if field in template:
                P.container(w, template[field], f"{path}.{field}")
        for field in ("initContainers", "sidecars"):
            for index, item in enumerate(w.items(template.get(field), f"{path}.{field}")):
                P.container(w, item, f"{path}.{field}[{index}]")
        container_set = w.mapping(template.get("containerSet"), f"{path}.containerSet")
        if container_set is not None:
            where = f"{path}.containerSet"
            w.known(
                container_set, where, frozenset({"containers", "volumeMounts", "retryStrategy"})
            )
            for index, item in enumerate(
                w.items(container_set.get("containers"), f"{where}.containers")
            ):
                P.container(w, item, f"{where}.containers[{index}]")
            for index, mount in enumerate(
                w.items(container_set.get("volumeMounts"), f"{where}.volumeMounts")
            ):
                P.volume_mount(w, mount, f"{where}.volumeMounts[{index}]")
        for index, volume in enumerate(w.items(template.get("volumes"), f"{path}.volumes")):
            P.volume(w, volume, f"{path}.volumes[{index}]")
        if "securityContext" in template:
            P.pod_security(w, template["securityContext"], f"{path}.securityContext")
        P.pod_metadata(w, template.get("metadata"), f"{path}.metadata", runs_as=runs_as)
        self.io(template.get("inputs"), f"{path}.inputs")
        self.io(template.get("outputs"), f"{path}.outputs")
        if "archiveLocation" in template:
            P.location(w, template["archiveLocation"], f"{path}.archiveLocation", archive=True)
        self.data(template.get("data"), f"{path}.data")
        P.memoize(w, template.get("memoize"), f"{path}.memoize")
        for group_index, group in enumerate(w.items(template.get("steps"), f"{path}.steps")):
            for index, step in enumerate(w.items(group, f"{path}.steps[{group_index}]")):
                self.step(step, f"{path}.steps[{group_index}][{index}]", depth)
        dag = w.mapping(template.get("dag"), f"{path}.dag")
        if dag is not None:
            w.known(dag, f"{path}.dag", frozenset({"tasks", "target", "failFast"}))
            for index, task in enumerate(w.items(dag.get("tasks"), f"{path}.dag.tasks")):
                self.step(task, f"{path}.dag.tasks[{index}]", depth)

    def step(self, value: object, path: str, depth: int) -> None:
        w = self.w
        step = w.mapping(value, path)
        if step is None:
            return
        w.known(step, path, _STEP)
        for field in ("name", "template", "onExit"):
            self.platform_reference(step, field, path)
        self.template_ref(step.get("templateRef"), f"{path}.templateRef")
        self.arguments(step.get("arguments"), f"{path}.arguments")
        self.hooks(step.get("hooks"), f"{path}.hooks")
        if "inline" in step:
            self.template(step["inline"], f"{path}.inline", depth + 1)

    def template_ref(self, value: object, path: str) -> None:
        reference = self.w.mapping(value, path)
        if reference is None:
            return
        self.w.known(reference, path, frozenset({"name", "template", "clusterScope"}))
        self.platform_reference(reference, "template", path)
        if self.w.is_set(reference.get("clusterScope")):
            self.w.add(
                f"{path}.clusterScope", "cluster_template_ref", RULES["cluster_template_ref"]
            )

    def hooks(self, value: object, path: str) -> None:
        w = self.w
        for name, hook in (w.mapping(value, path) or {}).items():
            where = w.join(path, name)
            entry = w.mapping(hook, where)
            if entry is None:
                continue
            w.known(entry, where, frozenset({"template", "templateRef", "arguments", "expression"}))
            self.platform_reference(entry, "template", where)
            self.template_ref(entry.get("templateRef"), f"{where}.templateRef")
            self.arguments(entry.get("arguments"), f"{where}.arguments")

    def arguments(self, value: object, path: str) -> None:
        arguments = self.w.mapping(value, path)
        if arguments is not None:
            self.w.known(arguments, path, frozenset({"parameters", "artifacts"}))
            self.artifacts(arguments.get("artifacts"), f"{path}.artifacts")
            self.w.items(arguments.get("parameters"), f"{path}.parameters")

    def io(self, value: object, path: str) -> None:
        io = self.w.mapping(value, path)
        if io is not None:
            self.w.known(io, path, frozenset({"parameters", "artifacts", "result", "exitCode"}))
            self.artifacts(io.get("artifacts"), f"{path}.artifacts")
            for index, parameter in enumerate(
                self.w.items(io.get("parameters"), f"{path}.parameters")
            ):
                where = f"{path}.parameters[{index}]"
                source = self.w.mapping(
                    (self.w.mapping(parameter, where) or {}).get("valueFrom"), f"{where}.valueFrom"
                )
                if source is not None and "supplied" in source:
                    self.w.add(
                        f"{where}.valueFrom.supplied", "platform_stage", RULES["platform_stage"]
                    )

    def platform_reference(self, value: Mapping[str, Any], field: str, path: str) -> None:
        """A name (or a reference to a template by name) that belongs to the control stages."""
        if field in value and reserved_name(value[field]):
            self.w.add(f"{path}.{field}", "platform_stage", RULES["platform_stage"])

    def artifacts(self, value: object, path: str) -> None:
        for index, artifact in enumerate(self.w.items(value, path)):
            P.artifact(self.w, artifact, f"{path}[{index}]")

    def data(self, value: object, path: str) -> None:
        data = self.w.mapping(value, path)
        if data is None:
            return
        self.w.known(data, path, frozenset({"source", "transformation"}))
        source = self.w.mapping(data.get("source"), f"{path}.source")
        if source is not None:
            self.w.known(source, f"{path}.source", frozenset({"artifactPaths"}))
            if "artifactPaths" in source:
                P.artifact(self.w, source["artifactPaths"], f"{path}.source.artifactPaths")
