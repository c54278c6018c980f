"""The allowlist's rules for what ends up in a pod: containers, their resources and the Secrets
they reach, volumes, security contexts, pod metadata and artifact locations, plus the walk state
they report into (``compiler.pipelines.allowlist`` drives them).

Purely computational, no side effects. Each function takes the raw value at a path, reports
what it refuses into ``Walk`` and never raises: a value of the wrong shape is ``malformed``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from compiler.pipelines.stamping import RUNS_AS_ACCOUNTS, RUNS_AS_ANNOTATION, reserved_key
from compiler.tenants.provisioning import ARTIFACT_REPOSITORIES, ARTIFACT_REPOSITORY_KEY
from shared import quantity
from shared.stages import STAGE_ANNOTATION

# rule -> why it is refused. docs/security.md lists the same table (a test keeps them in step).
RULES: Final[Mapping[str, str]] = {
    "malformed": "the value does not have the shape Argo expects, so it cannot be checked",
    "unknown_field": "a field the allowlist does not know is refused until it has been judged safe",
    "document_kind": "only argoproj.io/v1alpha1 WorkflowTemplate documents are accepted",
    "foreign_namespace": "a namespace other than the tenant's own would leave the namespace",
    "host_namespaces": "the host's network, PID or IPC namespace (or a Windows host process) "
    "would expose the node",
    "host_path": "a hostPath volume reads or writes the node's filesystem",
    "host_port": "a hostPort (or hostIP) binds a port on the node's own network",
    "privileged": "a privileged container has the node's devices and capabilities",
    "privilege_escalation": "allowPrivilegeEscalation lets a process gain more privileges",
    "capabilities": "added Linux capabilities exceed the baseline Pod Security standard",
    "run_as_root": "running as root (runAsUser 0, runAsNonRoot false) is refused where set",
    "proc_mount": "an unmasked /proc exposes the node's kernel interfaces",
    "security_context": "SELinux users, roles and types, Unconfined seccomp or AppArmor, unsafe "
    "sysctls and Bidirectional mount propagation relax the sandbox",
    "service_account": "pods run only as the identities the platform stamps (no other service "
    "account, no mounted token except the Spark and training accounts)",
    "executor": "the executor identity is the platform's; a tenant may not choose it",
    "resource_template": "resource templates act on the Kubernetes API with the executor's rights",
    "http_template": "HTTP templates run in Argo's agent outside the network policy; use a "
    "container step instead",
    "plugin_template": "executor plugins run code with the controller's or agent's rights",
    "pod_spec_patch": "a pod spec patch can rewrite anything the allowlist checked",
    "scheduling": "node selection, affinity, tolerations, scheduler, priority and disruption "
    "budgets are the platform's: they reach nodes and workloads of other tenants",
    "volume_type": "only emptyDir, configMap, secret and claims of the template's own "
    "volumeClaimTemplates may be mounted",
    "pvc_claim": "a claim must come from the template's volumeClaimTemplates and may not bind "
    "or clone an existing volume",
    "platform_secret": "secrets named kubeopera-* hold the platform's credentials in the "
    "namespace (executor token, storage user)",
    "secret_reference": "a Secret may be referenced only when the tenant created it through "
    "workflow-manager (its data secrets); any other Secret in the namespace is not the tenant's",
    "platform_object": "objects named kubeopera-* and artifact-repositories are the platform's",
    "artifact_location": "artifacts live only under the tenant's artifacts/ prefix of the "
    "platform bucket, with the namespace's own credentials and endpoint",
    "artifact_repository": "artifact repositories other than S3 (git, http, gcs, azure, hdfs, "
    "oss, artifactory, plugin) are outside the tenant's storage",
    "artifact_repository_ref": "only the namespace's default artifact repository is used "
    "(ConfigMap artifact-repositories, its default key): Argo looks any other up in the "
    "controller's namespace too, where the platform's own repository is",
    "cluster_template_ref": "cluster-scoped templates are outside the namespace",
    "workflow_template_ref": "a WorkflowTemplate may not itself reference another whole template",
    "reserved_label": "labels under kubeopera.io and argoproj.io (and their subdomains, "
    "workflows.argoproj.io/ among them) steer the controllers and our records; only stamping "
    "sets them",
    "reserved_annotation": "annotations under kubeopera.io and argoproj.io (and their "
    "subdomains) steer the controllers and our records; only kubeopera.io/runs-as (spark or "
    "training) is the tenant's, on a template of spec.templates",
    "security_annotation": "AppArmor, seccomp and container-runtime annotations change a pod's "
    "sandbox: use securityContext.appArmorProfile and seccompProfile, which are checked",
    "resource_limit": "a container may not ask for more than the largest step: DATA_MAX_CPU, "
    "DATA_MAX_MEMORY, and ML_MAX_GPU GPUs on ML pipelines (none on data pipelines)",
    "extended_resource": "only cpu, memory, ephemeral-storage and nvidia.com/gpu may be "
    "requested: the namespace's quota counts no other device, and resource claims reach "
    "devices outside it",
    "probe_host": "a probe or lifecycle hook with a host is sent by the kubelet from the node",
    "platform_stage": "the ML control stages are the platform's: template, task and step names "
    "starting with wm- and references to them, outputs supplied through the Argo server "
    "(valueFrom.supplied) and the kubeopera.io/platform-stage annotation would let a template "
    "perform, skip or impersonate a stage",
}

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_PREFIX: Final = "kubeopera-"
# Maps and lists holding data, not Kubernetes fields: a "namespace" key in them is a label key or
# a loop item (which can only reach a namespace field through a placeholder, and a namespace
# field holding a placeholder is not the tenant's namespace, so it is refused where it is).
_SKIP_MAPS: Final = frozenset(
    {"labels", "annotations", "nodeSelector", "matchLabels", "labelsFrom", "withItems"}
)


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most of one resource a container may ask for, and the setting a refusal names."""

    amount: Decimal
    named: str  # "DATA_MAX_CPU (4)"


class Walk:
    """The state of one check: the context and every violation found so far (first wins).

    ``data_secrets`` are the Secrets a template may reference; ``ceilings`` map each resource a
    container may ask for to its largest amount (ephemeral-storage is unbounded here).
    """

    def __init__(
        self,
        *,
        namespace: str,
        artifact_bucket: str,
        artifact_prefix: str,
        data_secrets: frozenset[str],
        ceilings: Mapping[str, Ceiling],
    ) -> None:
        self.namespace = namespace
        self.artifact_bucket = artifact_bucket
        self.artifact_prefix = artifact_prefix
        self.data_secrets = data_secrets
        self.ceilings = ceilings
        self.found: dict[tuple[str, str], str] = {}
        self.claims: set[str] = set()

    def add(self, path: str, rule: str, message: str) -> None:
        self.found.setdefault((path or "$", rule), message)

    @staticmethod
    def join(path: str, key: object) -> str:
        text = str(key)
        if _IDENTIFIER.fullmatch(text):
            return f"{path}.{text}" if path else text
        quoted = text.replace("\\", "\\\\").replace('"', '\\"')
        return f'{path}["{quoted}"]'

    def mapping(self, value: object, path: str) -> Mapping[str, Any] | None:
        """The value as an object; None when absent or (reported) of another shape."""
        if value is None:
            return None
        if isinstance(value, Mapping):
            return value
        self.add(path, "malformed", f"expected an object, found {type(value).__name__}")
        return None

    def items(self, value: object, path: str) -> list[Any]:
        """The value as a list; empty when absent or (reported) of another shape."""
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self.add(path, "malformed", f"expected a list, found {type(value).__name__}")
        return []

    def known(self, value: Mapping[str, Any], path: str, allowed: frozenset[str]) -> None:
        for key in value:
            # namespace fields are judged wherever they are, by ``namespaces``.
            if key not in allowed and key != "namespace":
                self.add(self.join(path, key), "unknown_field", RULES["unknown_field"])

    @staticmethod
    def is_set(value: object) -> bool:
        """A switch that is on, or anything but an explicit false (YAML's yes, "true", 1)."""
        return value is not None and value is not False

    def namespaces(self, root: object, path: str) -> None:
        """Every field named ``namespace`` anywhere must be the tenant's (iteratively: no depth
        limit can crash it). Label, annotation and node-selector maps hold data, not fields."""
        # Only containers are walked and only their paths built: scalars hold no fields, and
        # joining a path for each of a large template's leaves was most of the cost.
        stack: list[tuple[object, str]] = [(root, path)]
        while stack:
            value, where = stack.pop()
            if isinstance(value, Mapping):
                for key, item in value.items():
                    if key == "namespace":
                        if item != self.namespace:
                            where_key = self.join(where, key)
                            self.add(where_key, "foreign_namespace", RULES["foreign_namespace"])
                    elif key not in _SKIP_MAPS and isinstance(item, Mapping | list):
                        stack.append((item, self.join(where, key)))
            elif isinstance(value, list):
                stack.extend(
                    (item, f"{where}[{index}]")
                    for index, item in enumerate(value)
                    if isinstance(item, Mapping | list)
                )


def _member(value: object, names: frozenset[str] | set[str] | Mapping[str, Any]) -> bool:
    """Membership for raw values, which may be unhashable (a list where a name belongs)."""
    return isinstance(value, str) and value in names


def _reserved(name: object) -> bool:
    return not isinstance(name, str) or name.startswith(RESERVED_PREFIX)


def _shown(value: object) -> str:
    """A tenant's value quoted in a message, never longer than a quantity can be."""
    text = str(value)
    return text if len(text) <= quantity.MAX_LENGTH else f"{text[: quantity.MAX_LENGTH]}..."


# --- containers ---------------------------------------------------------------------------------
_CONTAINER: Final = frozenset(
    {
        "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
        "volumeMounts", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
        "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
        "securityContext", "stdin", "stdinOnce", "tty", "restartPolicy", "resizePolicy",
        "mirrorVolumeMounts", "source", "dependencies",
    }
)  # fmt: skip
_CONTAINER_SECURITY: Final = frozenset(
    {
        "allowPrivilegeEscalation", "capabilities", "privileged", "procMount", "runAsGroup",
        "readOnlyRootFilesystem", "runAsNonRoot", "runAsUser", "seLinuxOptions",
        "seccompProfile", "windowsOptions", "appArmorProfile",
    }
)  # fmt: skip
_POD_SECURITY: Final = frozenset(
    {
        "fsGroup", "fsGroupChangePolicy", "runAsGroup", "runAsNonRoot", "runAsUser",
        "seLinuxOptions", "seccompProfile", "supplementalGroups", "supplementalGroupsPolicy",
        "sysctls", "windowsOptions", "appArmorProfile", "seLinuxChangePolicy",
    }
)  # fmt: skip
# The baseline Pod Security standard's SELinux types and safe sysctls.
_SELINUX_TYPES: Final = frozenset(
    {"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
_SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    }
)  # fmt: skip


def container(w: Walk, value: object, path: str) -> None:
    item = w.mapping(value, path)
    if item is None:
        return
    w.known(item, path, _CONTAINER | {"volumeDevices"})
    if "volumeDevices" in item:
        w.add(f"{path}.volumeDevices", "volume_type", RULES["volume_type"])
    for index, port in enumerate(w.items(item.get("ports"), f"{path}.ports")):
        entry = w.mapping(port, f"{path}.ports[{index}]") or {}
        for field in ("hostPort", "hostIP"):
            if entry.get(field) not in (None, 0, ""):
                w.add(f"{path}.ports[{index}].{field}", "host_port", RULES["host_port"])
    for index, env in enumerate(w.items(item.get("env"), f"{path}.env")):
        source = w.mapping(
            (w.mapping(env, f"{path}.env[{index}]") or {}).get("valueFrom"),
            f"{path}.env[{index}].valueFrom",
        )
        if source is not None and "secretKeyRef" in source:
            secret_ref(w, source["secretKeyRef"], f"{path}.env[{index}].valueFrom.secretKeyRef")
    for index, env_from in enumerate(w.items(item.get("envFrom"), f"{path}.envFrom")):
        entry = w.mapping(env_from, f"{path}.envFrom[{index}]") or {}
        if "secretRef" in entry:
            secret_ref(w, entry["secretRef"], f"{path}.envFrom[{index}].secretRef")
    for index, mount in enumerate(w.items(item.get("volumeMounts"), f"{path}.volumeMounts")):
        volume_mount(w, mount, f"{path}.volumeMounts[{index}]")
    resources(w, item.get("resources"), f"{path}.resources")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        handler(w, item.get(probe), f"{path}.{probe}")
    lifecycle = w.mapping(item.get("lifecycle"), f"{path}.lifecycle") or {}
    for hook, action in lifecycle.items():
        handler(w, action, w.join(f"{path}.lifecycle", hook))
    if "securityContext" in item:
        container_security(w, item["securityContext"], f"{path}.securityContext")


def handler(w: Walk, value: object, path: str) -> None:
    """Probes and lifecycle hooks: the kubelet sends them from the node, so never to a host."""
    action = w.mapping(value, path) or {}
    for kind in ("httpGet", "tcpSocket"):
        target = w.mapping(action.get(kind), f"{path}.{kind}") or {}
        if target.get("host") not in (None, ""):
            w.add(f"{path}.{kind}.host", "probe_host", RULES["probe_host"])


def volume_mount(w: Walk, value: object, path: str) -> None:
    mount = w.mapping(value, path) or {}
    if mount.get("mountPropagation") not in (None, "None", "HostToContainer"):
        w.add(f"{path}.mountPropagation", "security_context", RULES["security_context"])


def secret_ref(w: Walk, value: object, path: str, field: str = "name") -> None:
    """A reference to a Secret: only to one of the tenant's data secrets, never the platform's.

    An allowlist of names, not a denylist of the platform's prefix: a Secret the tenant did not
    create through workflow-manager (one a platform component or an operator put in the
    namespace, or one not there yet) is refused too.
    """
    reference = w.mapping(value, path)
    if reference is None:
        return
    name = reference.get(field)
    if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
        w.add(f"{path}.{field}", "platform_secret", RULES["platform_secret"])
    elif not _member(name, w.data_secrets):
        message = (
            f"{RULES['secret_reference']}; {_shown(name)!r} is not one of them"
            if w.data_secrets
            else f"{RULES['secret_reference']}; this tenant has none yet"
        )
        w.add(f"{path}.{field}", "secret_reference", message)


# Everything a container may ask for: ``Walk.ceilings`` bounds each but ephemeral-storage, which
# the kubelet bounds by evicting the pod.
EPHEMERAL_STORAGE: Final = "ephemeral-storage"


def resources(w: Walk, value: object, path: str) -> None:
    """Requests and limits within the largest step, and no device the quota does not count."""
    requirements = w.mapping(value, path)
    if requirements is None:
        return
    w.known(requirements, path, frozenset({"requests", "limits", "claims"}))
    if "claims" in requirements:
        w.add(f"{path}.claims", "extended_resource", RULES["extended_resource"])
    for side in ("requests", "limits"):
        where = f"{path}.{side}"
        for name, amount in (w.mapping(requirements.get(side), where) or {}).items():
            _resource_amount(w, name, amount, w.join(where, name))


def _resource_amount(w: Walk, name: object, amount: object, path: str) -> None:
    ceiling = w.ceilings.get(name) if isinstance(name, str) else None
    if ceiling is None and name != EPHEMERAL_STORAGE:
        w.add(path, "extended_resource", RULES["extended_resource"])
        return
    if isinstance(amount, str) and "{{" in amount:
        # Known only at run time, where the namespace's LimitRange holds it to the same maximum;
        # a resource allowed none at all is refused now, whatever the placeholder becomes.
        if ceiling is not None and ceiling.amount == 0:
            w.add(path, "resource_limit", f"none may be asked for: {ceiling.named}")
        return
    value = quantity.parse_or_none(amount)
    if value is None or value < 0:
        w.add(path, "malformed", f"{_shown(amount)!r} is not a quantity such as 500m, 2 or 512Mi")
    elif ceiling is not None and value > ceiling.amount:
        w.add(path, "resource_limit", f"{_shown(amount)} is above {ceiling.named}")


def _common_security(w: Walk, context: Mapping[str, Any], path: str) -> None:
    if "runAsUser" in context and (
        not isinstance(context["runAsUser"], int) or context["runAsUser"] == 0
    ):
        w.add(f"{path}.runAsUser", "run_as_root", RULES["run_as_root"])
    if "runAsNonRoot" in context and context["runAsNonRoot"] is not True:
        w.add(f"{path}.runAsNonRoot", "run_as_root", RULES["run_as_root"])
    selinux = w.mapping(context.get("seLinuxOptions"), f"{path}.seLinuxOptions") or {}
    for field in ("user", "role"):
        if selinux.get(field) not in (None, ""):
            w.add(f"{path}.seLinuxOptions.{field}", "security_context", RULES["security_context"])
    if selinux.get("type") not in (None, "", *_SELINUX_TYPES):
        w.add(f"{path}.seLinuxOptions.type", "security_context", RULES["security_context"])
    for field in ("seccompProfile", "appArmorProfile"):
        profile = w.mapping(context.get(field), f"{path}.{field}") or {}
        if profile.get("type") == "Unconfined":
            w.add(f"{path}.{field}.type", "security_context", RULES["security_context"])
    windows = w.mapping(context.get("windowsOptions"), f"{path}.windowsOptions") or {}
    if w.is_set(windows.get("hostProcess")):
        w.add(f"{path}.windowsOptions.hostProcess", "host_namespaces", RULES["host_namespaces"])


def container_security(w: Walk, value: object, path: str) -> None:
    context = w.mapping(value, path)
    if context is None:
        return
    w.known(context, path, _CONTAINER_SECURITY)
    _common_security(w, context, path)
    if w.is_set(context.get("privileged")):
        w.add(f"{path}.privileged", "privileged", RULES["privileged"])
    if w.is_set(context.get("allowPrivilegeEscalation")):
        w.add(
            f"{path}.allowPrivilegeEscalation",
            "privilege_escalation",
            RULES["privilege_escalation"],
        )
    capabilities = w.mapping(context.get("capabilities"), f"{path}.capabilities") or {}
    w.known(capabilities, f"{path}.capabilities", frozenset({"add", "drop"}))
    if capabilities.get("add") not in (None, []):
        w.add(f"{path}.capabilities.add", "capabilities", RULES["capabilities"])
    if context.get("procMount") not in (None, "Default"):
        w.add(f"{path}.procMount", "proc_mount", RULES["proc_mount"])


def pod_security(w: Walk, value: object, path: str) -> None:
    context = w.mapping(value, path)
    if context is None:
        return
    w.known(context, path, _POD_SECURITY)
    _common_security(w, context, path)
    for index, sysctl in enumerate(w.items(context.get("sysctls"), f"{path}.sysctls")):
        entry = w.mapping(sysctl, f"{path}.sysctls[{index}]") or {}
        if not _member(entry.get("name"), _SAFE_SYSCTLS):
            w.add(f"{path}.sysctls[{index}].name", "security_context", RULES["security_context"])


# Annotation prefixes that configure a pod's sandbox: the pre-field AppArmor and seccomp
# annotations, and the container runtimes' own (CRI-O's, containerd's CRI, Kata's), which can
# add devices or change namespaces where a runtime class allows them. None is judged by the
# allowlist's security-context rules; the fields (appArmorProfile, seccompProfile) are.
SECURITY_ANNOTATION_PREFIXES: Final = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
    "io.kubernetes.cri-o.",
    "io.kubernetes.cri.",
    "io.katacontainers.",
)


def pod_metadata(w: Walk, value: object, path: str, *, runs_as: bool = False) -> None:
    """A pod's labels and annotations: none under the reserved domains (a pod labelled as
    another run's, or annotated as the controller annotates its own), none that changes the
    sandbox. ``runs_as``: a template of ``spec.templates``, whose ``kubeopera.io/runs-as``
    stamping reads (``compiler.pipelines.stamping``)."""
    metadata = w.mapping(value, path)
    if metadata is None:
        return
    w.known(metadata, path, frozenset({"labels", "annotations"}))
    for key in w.mapping(metadata.get("labels"), f"{path}.labels") or {}:
        if reserved_key(key):
            w.add(w.join(f"{path}.labels", key), "reserved_label", RULES["reserved_label"])
    annotations = w.mapping(metadata.get("annotations"), f"{path}.annotations") or {}
    for key, annotation in annotations.items():
        where = w.join(f"{path}.annotations", key)
        if str(key).lower() == STAGE_ANNOTATION:
            w.add(where, "platform_stage", RULES["platform_stage"])
        elif runs_as and key == RUNS_AS_ANNOTATION:
            if not _member(annotation, RUNS_AS_ACCOUNTS):
                accounts = " or ".join(sorted(RUNS_AS_ACCOUNTS))
                w.add(where, "reserved_annotation", f"{RUNS_AS_ANNOTATION} is {accounts}")
        elif reserved_key(key):
            w.add(where, "reserved_annotation", RULES["reserved_annotation"])
        elif str(key).lower().startswith(SECURITY_ANNOTATION_PREFIXES):
            w.add(where, "security_annotation", RULES["security_annotation"])


def memoize(w: Walk, value: object, path: str) -> None:
    """The controller writes the memo cache ConfigMap with its own rights: never a platform one."""
    memo = w.mapping(value, path)
    if memo is None:
        return
    cache = w.mapping(memo.get("cache"), f"{path}.cache") or {}
    config_map = w.mapping(cache.get("configMap"), f"{path}.cache.configMap") or {}
    name = config_map.get("name")
    if "name" in config_map and (_reserved(name) or name == ARTIFACT_REPOSITORIES):
        w.add(f"{path}.cache.configMap.name", "platform_object", RULES["platform_object"])


# --- volumes --------------------------------------------------------------------------------
_VOLUME_KINDS: Final = frozenset({"emptyDir", "configMap", "secret", "persistentVolumeClaim"})


def volume(w: Walk, value: object, path: str) -> None:
    item = w.mapping(value, path)
    if item is None:
        return
    for key in item:
        if key == "hostPath":
            w.add(f"{path}.hostPath", "host_path", RULES["host_path"])
        elif key not in _VOLUME_KINDS and key != "name":
            w.add(w.join(path, key), "volume_type", RULES["volume_type"])
    if "secret" in item:
        secret_ref(w, item["secret"], f"{path}.secret", "secretName")
    if "persistentVolumeClaim" in item:
        claim = w.mapping(item["persistentVolumeClaim"], f"{path}.persistentVolumeClaim") or {}
        if not _member(claim.get("claimName"), w.claims):
            w.add(f"{path}.persistentVolumeClaim.claimName", "pvc_claim", RULES["pvc_claim"])


def claim_template(w: Walk, value: object, path: str) -> None:
    claim = w.mapping(value, path)
    if claim is None:
        return
    name = (w.mapping(claim.get("metadata"), f"{path}.metadata") or {}).get("name")
    if isinstance(name, str):
        w.claims.add(name)
    spec = w.mapping(claim.get("spec"), f"{path}.spec") or {}
    for field in ("volumeName", "selector", "dataSource", "dataSourceRef"):
        if field in spec:
            w.add(f"{path}.spec.{field}", "pvc_claim", RULES["pvc_claim"])


# --- artifacts --------------------------------------------------------------------------------
_OTHER_REPOSITORIES: Final = (
    "git", "http", "artifactory", "hdfs", "oss", "gcs", "azure", "plugin",
)  # fmt: skip
_LOCATION: Final = frozenset({"s3", "raw", "archiveLogs", *_OTHER_REPOSITORIES})
_ARTIFACT: Final = _LOCATION | {
    "name", "path", "mode", "from", "fromExpression", "archive", "optional", "subPath",
    "recurseMode", "globalName", "deleted", "artifactGC",
}  # fmt: skip


def artifact(w: Walk, value: object, path: str) -> None:
    item = w.mapping(value, path)
    if item is None:
        return
    w.known(item, path, _ARTIFACT)
    location(w, item, path, archive=False)
    gc = w.mapping(item.get("artifactGC"), f"{path}.artifactGC")
    if gc is not None:
        w.known(
            gc, f"{path}.artifactGC", frozenset({"strategy", "podMetadata", "serviceAccountName"})
        )
        if "serviceAccountName" in gc:
            w.add(
                f"{path}.artifactGC.serviceAccountName", "service_account", RULES["service_account"]
            )
        pod_metadata(w, gc.get("podMetadata"), f"{path}.artifactGC.podMetadata")


def artifact_repository_ref(w: Walk, value: object, path: str) -> None:
    """Only the namespace's default repository, which the platform provisioned: Argo looks a
    ConfigMap (or a key) it does not find in the workflow's namespace up in the controller's,
    where the platform's own repository and credentials are."""
    reference = w.mapping(value, path)
    if reference is None:
        return
    w.known(reference, path, frozenset({"configMap", "key"}))
    for field, default in (("configMap", ARTIFACT_REPOSITORIES), ("key", ARTIFACT_REPOSITORY_KEY)):
        if field in reference and reference[field] != default:
            w.add(f"{path}.{field}", "artifact_repository_ref", RULES["artifact_repository_ref"])


def artifact_gc(w: Walk, value: object, path: str) -> None:
    gc = w.mapping(value, path)
    if gc is None:
        return
    allowed = {"strategy", "forceFinalizerRemoval", "podMetadata", "serviceAccountName"}
    w.known(gc, path, frozenset(allowed | {"podSpecPatch"}))
    if "serviceAccountName" in gc:
        w.add(f"{path}.serviceAccountName", "service_account", RULES["service_account"])
    if "podSpecPatch" in gc:
        w.add(f"{path}.podSpecPatch", "pod_spec_patch", RULES["pod_spec_patch"])
    pod_metadata(w, gc.get("podMetadata"), f"{path}.podMetadata")


def location(w: Walk, value: object, path: str, *, archive: bool) -> None:
    """An artifact's (or archiveLocation's) place: S3 in the tenant's prefix, or inline raw."""
    item = w.mapping(value, path)
    if item is None:
        return
    if archive:
        w.known(item, path, _LOCATION)
    for kind in _OTHER_REPOSITORIES:
        if kind in item:
            w.add(f"{path}.{kind}", "artifact_repository", RULES["artifact_repository"])
    if "s3" not in item:
        return
    s3 = w.mapping(item["s3"], f"{path}.s3")
    if s3 is None:
        return
    for field in s3:
        if field not in ("bucket", "key"):
            w.add(w.join(f"{path}.s3", field), "artifact_location", RULES["artifact_location"])
    if "bucket" in s3 and s3["bucket"] != w.artifact_bucket:
        w.add(f"{path}.s3.bucket", "artifact_location", RULES["artifact_location"])
    key = s3.get("key")
    if "key" not in s3:
        w.add(f"{path}.s3", "artifact_location", "an S3 location needs a key in the tenant prefix")
    elif (
        not isinstance(key, str) or not key.startswith(w.artifact_prefix) or ".." in key.split("/")
    ):
        w.add(f"{path}.s3.key", "artifact_location", RULES["artifact_location"])
