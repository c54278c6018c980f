"""What a tenant's pipeline namespace must contain, and whether a live object still matches it.

Purely computational, no side effects: ``tenant_objects`` turns a tenant id and a
``ProvisioningSpec`` (the settings that shape every tenant namespace) into full manifests in apply
order; ``drifted`` says whether a live object has left what we want; ``replacement`` builds the
body that puts it back. ``compiler.tenants.tenant_objects`` does the I/O.

The namespace ``kubeopera-data-<tenant>`` holds:

- Pod Security ``baseline`` enforced (``latest`` version), so no pod of the tenant's may use host
  namespaces, host paths, privilege or added capabilities whatever the allowlist missed;
- ``kubeopera-quota``: CPU and memory requests and limits, pods, and ``requests.nvidia.com/gpu``
  always (a quota of 0 GPUs is what forbids them), and ``kubeopera-limits``: defaults for
  containers that state no resources (Argo's own init and wait containers among them; a quota
  on requests and limits refuses any pod without them) and the largest single step as the
  maximum, with a GPU maximum only when GPUs are allowed at all;
- ``kubeopera-compiler``: the RoleBinding granting the compiler's own service account the
  chart's tenant-compiler ClusterRole in this namespace, applied right after the namespace,
  before anything the compiler writes there through it (see "Rights" below);
- the four accounts of ``compiler.pipelines.stamping``, none of which mounts a token by itself.
  A pod gets a token only where its spec asks: Argo mounts the executor's token into its own
  containers only (through the Secret ``kubeopera-executor.service-account-token``, which Argo
  finds through the account's annotation; since Kubernetes 1.24 nothing creates such a Secret for
  us), and the stamper asks for the Spark or training token only on the templates that run as them.
  Each account that calls the API is bound to the chart's tenant ClusterRole with the least it
  needs: the executor creates and patches ``workflowtaskresults`` (Argo's documented minimum), Spark
  drivers manage their executors' pods, services, config maps and volume claims, PyTorch
  launchers their workers' pods and services;
- ``kubeopera-egress``: traffic in only from the namespace itself; traffic out only to cluster
  DNS, the namespace itself, the Kubernetes API server, the shared tracking server, and
  ``DATA_EGRESS_PORTS`` (TCP) anywhere outside ``DATA_EGRESS_EXCEPT_CIDRS``;
- the namespace's default artifact repository (``artifact-repositories``), writing under
  ``tenants/<tenant>/artifacts/`` with the tenant's own storage credentials and archiving logs;
- ``kubeopera-sensor``: the RoleBinding granting the tenant's sensor account the chart's
  tenant-sensor ClusterRole here (create and list workflows, get templates: what Argo Events'
  ``argoWorkflow`` trigger needs to submit). The account itself, ``kubeopera-sensor-<tenant>``,
  lives in ``EVENTS_NAMESPACE`` beside the tenant's sensors (``compiler.automation``), one per
  tenant, so that no sensor of one tenant can create anything in another tenant's namespace.

Reaching the API server and the tracking server: ``compiler.tenants.network_policy``.

Rights: the compiler binds, never grants. The ClusterRoles (``<prefix>compiler``, ``executor``,
``spark``, ``training``, ``sensor``; the prefix is ``TENANT_CLUSTER_ROLE_PREFIX``) ship with the
chart, and the compiler holds the ``bind`` verb on exactly those, so Kubernetes lets it create these
RoleBindings without holding what they grant (it would have to hold all of it to create a Role
or bind anything else). Cluster-wide it may only create namespaces and RoleBindings, which the
chart's admission policy confines to ``kubeopera-data-*``. Schema 1 gave each account a Role of
its own: ``obsolete_objects`` names them, for the caller to delete when a namespace takes a
new spec. A binding's ``roleRef`` cannot change in place; ``shared.k8s_drift.recreated``
says when one must be deleted and created again.

The spec hash covers the spec and ``SPEC_SCHEMA_VERSION``: bump the version whenever this module
builds different objects from the same spec, so that the change rolls out to every tenant.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import yaml

from compiler.tenants.network_policy import egress_rules
from shared import labels as L
from shared import storage
from shared.errors import ConfigError
from shared.identifiers import TENANT_ID
from shared.manifests import tenant_object
from shared.quantity import cpu_millis, memory_bytes

# The namespace's accounts (the stamper names them on every template it stamps).
WORKLOAD_SERVICE_ACCOUNT: Final = "kubeopera-workload"
EXECUTOR_SERVICE_ACCOUNT: Final = "kubeopera-executor"
SPARK_SERVICE_ACCOUNT: Final = "kubeopera-spark"
TRAINING_SERVICE_ACCOUNT: Final = "kubeopera-training"

if TYPE_CHECKING:
    from shared.config import Settings

# Bump when the objects built from the same spec change (see the module docstring). 2: the
# accounts' bindings refer to the chart's tenant ClusterRoles, and the compiler binds itself.
# 3: the tenant's sensor account and its binding.
SPEC_SCHEMA_VERSION: Final = 3

# A tenant id: a DNS label short enough that "kubeopera-data-<tenant>" is one (<= 63).

QUOTA_NAME: Final = "kubeopera-quota"
LIMITS_NAME: Final = "kubeopera-limits"
NETWORK_POLICY_NAME: Final = "kubeopera-egress"
ARTIFACT_REPOSITORIES: Final = "artifact-repositories"  # the name Argo looks for
ARTIFACT_REPOSITORY_KEY: Final = "default-v1"
ARTIFACT_CREDENTIALS_SECRET: Final = "kubeopera-artifact-credentials"
ACCESS_KEY: Final = "accessKey"
SECRET_KEY: Final = "secretKey"
# Argo's discovery-by-name convention for a service account's token Secret.
EXECUTOR_TOKEN_SECRET: Final = f"{EXECUTOR_SERVICE_ACCOUNT}.service-account-token"
GPU_RESOURCE: Final = "nvidia.com/gpu"
POD_SECURITY_LEVEL: Final = "baseline"
RBAC_GROUP: Final = "rbac.authorization.k8s.io"
RBAC_VERSION: Final = f"{RBAC_GROUP}/v1"
# The compiler's own RoleBinding in each tenant namespace, and its ClusterRole after the prefix.
COMPILER_BINDING: Final = "kubeopera-compiler"
COMPILER_ROLE: Final = "compiler"
# Each account that calls the API, and its tenant ClusterRole after the prefix (the chart holds
# the rules: least for each, see the module docstring).
ACCOUNT_ROLES: Final[Mapping[str, str]] = {
    EXECUTOR_SERVICE_ACCOUNT: "executor",
    SPARK_SERVICE_ACCOUNT: "spark",
    TRAINING_SERVICE_ACCOUNT: "training",
}
# The tenant's sensors' account (in the events namespace), its binding here, and its role.
SENSOR_ACCOUNT_PREFIX: Final = "kubeopera-sensor-"
SENSOR_BINDING: Final = "kubeopera-sensor"
SENSOR_ROLE: Final = "sensor"
DEFAULT_EVENTS_NAMESPACE: Final = "kubeopera-pipeline-events"
DEFAULT_CLUSTER_ROLE_PREFIX: Final = "workflow-manager-tenant-"
DEFAULT_COMPILER_ACCOUNT: Final = "workflow-manager-compiler"
DEFAULT_COMPILER_NAMESPACE: Final = "workflow-manager"
# What a container that states no resources gets: small, since Argo's own init and wait
# containers are among them, and never above the largest step.
DEFAULT_CPU: Final = "500m"
DEFAULT_MEMORY: Final = "512Mi"
DEFAULT_REQUEST_CPU: Final = "100m"
DEFAULT_REQUEST_MEMORY: Final = "128Mi"


def _cpu_at_most(value: str, ceiling: str) -> str:
    return value if cpu_millis(value) <= cpu_millis(ceiling) else ceiling


def _memory_at_most(value: str, ceiling: str) -> str:
    return value if memory_bytes(value) <= memory_bytes(ceiling) else ceiling


def _cidr(value: str) -> str:
    return str(ipaddress.ip_network(value.strip(), strict=True))


@dataclass(frozen=True, slots=True)
class ProvisioningSpec:
    """Every input that shapes a tenant namespace; equal specs build equal objects.

    Collections are normalised (sorted, deduplicated, canonical CIDRs) so that the same
    configuration written in another order has the same hash. ValueError for an inconsistent
    spec (a default above the maximum, a step above the namespace's quota, a bad CIDR or port).
    """

    quota_cpu: str
    quota_memory: str
    quota_pods: int
    quota_gpu: int
    max_cpu: str
    max_memory: str
    max_gpu: int
    egress_ports: tuple[int, ...]
    egress_except_cidrs: tuple[str, ...]
    artifact_bucket: str
    region: str
    s3_endpoint: str
    s3_insecure: bool = False
    tracking_host: str | None = None
    tracking_port: int | None = None
    api_server_cidrs: tuple[str, ...] = ()
    api_server_ports: tuple[int, ...] = ()
    # Resources of a container that states none (from_settings keeps them within the maxima).
    default_cpu: str = DEFAULT_CPU
    default_memory: str = DEFAULT_MEMORY
    default_request_cpu: str = DEFAULT_REQUEST_CPU
    default_request_memory: str = DEFAULT_REQUEST_MEMORY
    # Whom and what the namespace's RoleBindings name (see "Rights" in the module docstring).
    cluster_role_prefix: str = DEFAULT_CLUSTER_ROLE_PREFIX
    compiler_account: str = DEFAULT_COMPILER_ACCOUNT
    compiler_namespace: str = DEFAULT_COMPILER_NAMESPACE
    # Where the tenant's event sources, sensors and sensor account live (EVENTS_NAMESPACE).
    events_namespace: str = DEFAULT_EVENTS_NAMESPACE

    def __post_init__(self) -> None:
        if not (
            self.cluster_role_prefix
            and self.compiler_account
            and self.compiler_namespace
            and self.events_namespace
        ):
            raise ValueError(
                "cluster_role_prefix, compiler_account, compiler_namespace and events_namespace "
                "are required"
            )
        for name in ("egress_ports", "api_server_ports"):
            ports = tuple(sorted(set(getattr(self, name))))
            if any(not 1 <= port <= 65535 for port in ports):
                raise ValueError(f"{name}: ports are between 1 and 65535")
            object.__setattr__(self, name, ports)
        for name in ("egress_except_cidrs", "api_server_cidrs"):
            cidrs = tuple(sorted({_cidr(cidr) for cidr in getattr(self, name)}))
            object.__setattr__(self, name, cidrs)
        if self.api_server_cidrs and not self.api_server_ports:
            raise ValueError("api_server_cidrs needs api_server_ports")
        if (self.tracking_host is None) != (self.tracking_port is None):
            raise ValueError("tracking_host and tracking_port go together")
        if self.tracking_port is not None and not 1 <= self.tracking_port <= 65535:
            raise ValueError("tracking_port: ports are between 1 and 65535")
        if self.quota_pods < 1 or self.quota_gpu < 0 or self.max_gpu < 0:
            raise ValueError("quota_pods is at least 1; GPU counts are not negative")
        if not self.artifact_bucket or not self.s3_endpoint or not self.region:
            raise ValueError("artifact_bucket, s3_endpoint and region are required")
        steps = (
            ("default_request_cpu", "default_cpu", cpu_millis),
            ("default_cpu", "max_cpu", cpu_millis),
            ("max_cpu", "quota_cpu", cpu_millis),
            ("default_request_memory", "default_memory", memory_bytes),
            ("default_memory", "max_memory", memory_bytes),
            ("max_memory", "quota_memory", memory_bytes),
        )
        for smaller, larger, amount in steps:
            small, large = getattr(self, smaller), getattr(self, larger)
            if amount(small) <= 0 or amount(small) > amount(large):
                raise ValueError(f"{smaller} ({small}) must be positive and at most {larger}")
        if self.max_gpu > self.quota_gpu:
            raise ValueError(f"max_gpu ({self.max_gpu}) is above quota_gpu ({self.quota_gpu})")

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        api_server_cidrs: tuple[str, ...] = (),
        api_server_ports: tuple[int, ...] = (),
    ) -> ProvisioningSpec:
        """The spec of this deployment; the API server's endpoints are discovered by the caller.

        Raises ConfigError naming the variables when they do not make a consistent spec.
        """
        settings.require("ARTIFACT_BUCKET")
        endpoint, insecure = s3_endpoint(settings.S3_ENDPOINT_URL, settings.AWS_REGION)
        tracking_host, tracking_port = tracking_server(settings.MLFLOW_URL)
        max_cpu, max_memory = settings.DATA_MAX_CPU, settings.DATA_MAX_MEMORY
        try:
            default_cpu = _cpu_at_most(DEFAULT_CPU, max_cpu)
            default_memory = _memory_at_most(DEFAULT_MEMORY, max_memory)
            return cls(
                quota_cpu=settings.DATA_NS_QUOTA_CPU,
                quota_memory=settings.DATA_NS_QUOTA_MEMORY,
                quota_pods=settings.DATA_NS_QUOTA_PODS,
                quota_gpu=settings.ML_NS_QUOTA_GPU,
                max_cpu=max_cpu,
                max_memory=max_memory,
                max_gpu=settings.ML_MAX_GPU,
                egress_ports=tuple(settings.DATA_EGRESS_PORTS),
                egress_except_cidrs=tuple(settings.DATA_EGRESS_EXCEPT_CIDRS),
                artifact_bucket=str(settings.ARTIFACT_BUCKET),
                region=settings.AWS_REGION,
                s3_endpoint=endpoint,
                s3_insecure=insecure,
                tracking_host=tracking_host,
                tracking_port=tracking_port,
                api_server_cidrs=api_server_cidrs,
                api_server_ports=api_server_ports,
                default_cpu=default_cpu,
                default_memory=default_memory,
                default_request_cpu=_cpu_at_most(DEFAULT_REQUEST_CPU, default_cpu),
                default_request_memory=_memory_at_most(DEFAULT_REQUEST_MEMORY, default_memory),
                cluster_role_prefix=settings.TENANT_CLUSTER_ROLE_PREFIX,
                compiler_account=settings.COMPILER_SERVICE_ACCOUNT,
                compiler_namespace=settings.POD_NAMESPACE,
                events_namespace=settings.EVENTS_NAMESPACE,
            )
        except ValueError as exc:
            raise ConfigError(
                "DATA_NS_QUOTA_*, DATA_MAX_*, ML_*_GPU, DATA_EGRESS_*: "
                f"no consistent tenant namespace specification ({exc})"
            ) from exc


def s3_endpoint(url: str | None, region: str) -> tuple[str, bool]:
    """(host[:port], insecure) Argo's S3 client is given: S3_ENDPOINT_URL's, else AWS's."""
    if not url:
        return f"s3.{region}.amazonaws.com", False
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("S3_ENDPOINT_URL: expected an http(s) URL with a host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return (f"{host}:{parts.port}" if parts.port else host), parts.scheme == "http"


def tracking_server(url: str | None) -> tuple[str | None, int | None]:
    """(host, port) of MLFLOW_URL, the port defaulting to the scheme's; (None, None) unset."""
    if not url:
        return None, None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("MLFLOW_URL: expected an http(s) URL with a host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError("MLFLOW_URL: the port is not a number between 0 and 65535") from exc
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def spec_hash(spec: ProvisioningSpec) -> str:
    """sha256 of the spec and the schema version, over canonical JSON: equal specs, equal hash."""
    document = {"schema": SPEC_SCHEMA_VERSION, "spec": dataclasses.asdict(spec)}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def tenant_namespace(tenant: str) -> str:
    """``kubeopera-data-<tenant>``; ValueError for a tenant id that is not a short DNS label."""
    if not isinstance(tenant, str) or not TENANT_ID.match(tenant):
        raise ValueError(f"{tenant!r} is not a tenant id (a DNS label of at most 48 characters)")
    return f"{L.DATA_NAMESPACE_PREFIX}{tenant}"


def _binding(
    name: str,
    *,
    tenant: str,
    namespace: str,
    cluster_role: str,
    account: str,
    account_namespace: str,
) -> dict[str, Any]:
    return tenant_object(
        RBAC_VERSION,
        "RoleBinding",
        name,
        tenant=tenant,
        namespace=namespace,
        roleRef={"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": cluster_role},
        subjects=[{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
    )


def compiler_binding(tenant: str, namespace: str, spec: ProvisioningSpec) -> dict[str, Any]:
    """``kubeopera-compiler``: the compiler's own rights in the namespace, bound to itself."""
    return _binding(
        COMPILER_BINDING,
        tenant=tenant,
        namespace=namespace,
        cluster_role=f"{spec.cluster_role_prefix}{COMPILER_ROLE}",
        account=spec.compiler_account,
        account_namespace=spec.compiler_namespace,
    )


def sensor_account(tenant: str) -> str:
    """The service account a tenant's sensors run as, in the events namespace."""
    return f"{SENSOR_ACCOUNT_PREFIX}{tenant}"


def _sensor_objects(tenant: str, namespace: str, spec: ProvisioningSpec) -> list[dict[str, Any]]:
    """The tenant's sensor account (in the events namespace) and its binding here."""
    account = tenant_object(
        "v1",
        "ServiceAccount",
        sensor_account(tenant),
        tenant=tenant,
        namespace=spec.events_namespace,
    )
    binding = _binding(
        SENSOR_BINDING,
        tenant=tenant,
        namespace=namespace,
        cluster_role=f"{spec.cluster_role_prefix}{SENSOR_ROLE}",
        account=sensor_account(tenant),
        account_namespace=spec.events_namespace,
    )
    return [account, binding]


def obsolete_objects(tenant: str) -> list[tuple[str, str, str, str]]:
    """(apiVersion, kind, namespace, name) of what an earlier schema created in a tenant's
    namespace and nothing creates any more: the accounts' own Roles of schema 1."""
    namespace = tenant_namespace(tenant)
    return [(RBAC_VERSION, "Role", namespace, account) for account in ACCOUNT_ROLES]


def _resource_objects(tenant: str, namespace: str, spec: ProvisioningSpec) -> list[dict[str, Any]]:
    hard = {
        "requests.cpu": spec.quota_cpu,
        "limits.cpu": spec.quota_cpu,
        "requests.memory": spec.quota_memory,
        "limits.memory": spec.quota_memory,
        "pods": str(spec.quota_pods),
        f"requests.{GPU_RESOURCE}": str(spec.quota_gpu),
    }
    maximum = {"cpu": spec.max_cpu, "memory": spec.max_memory}
    if spec.max_gpu > 0:
        maximum[GPU_RESOURCE] = str(spec.max_gpu)
    container = {
        "type": "Container",
        "default": {"cpu": spec.default_cpu, "memory": spec.default_memory},
        "defaultRequest": {"cpu": spec.default_request_cpu, "memory": spec.default_request_memory},
        "max": maximum,
    }
    quota = tenant_object("v1", "ResourceQuota", QUOTA_NAME, tenant=tenant, namespace=namespace)
    limits = tenant_object("v1", "LimitRange", LIMITS_NAME, tenant=tenant, namespace=namespace)
    quota["spec"] = {"hard": hard}
    limits["spec"] = {"limits": [container]}
    return [quota, limits]


def _identity_objects(tenant: str, namespace: str, spec: ProvisioningSpec) -> list[dict[str, Any]]:
    accounts = [
        tenant_object(
            "v1",
            "ServiceAccount",
            account,
            tenant=tenant,
            namespace=namespace,
            annotations=(
                {L.ARGO_SERVICE_ACCOUNT_TOKEN_NAME: EXECUTOR_TOKEN_SECRET}
                if account == EXECUTOR_SERVICE_ACCOUNT
                else None
            ),
            automountServiceAccountToken=False,
        )
        for account in (
            WORKLOAD_SERVICE_ACCOUNT,
            EXECUTOR_SERVICE_ACCOUNT,
            SPARK_SERVICE_ACCOUNT,
            TRAINING_SERVICE_ACCOUNT,
        )
    ]
    token = tenant_object(
        "v1",
        "Secret",
        EXECUTOR_TOKEN_SECRET,
        tenant=tenant,
        namespace=namespace,
        annotations={"kubernetes.io/service-account.name": EXECUTOR_SERVICE_ACCOUNT},
        type="kubernetes.io/service-account-token",
    )
    bindings = [
        _binding(
            account,
            tenant=tenant,
            namespace=namespace,
            cluster_role=f"{spec.cluster_role_prefix}{role}",
            account=account,
            account_namespace=namespace,
        )
        for account, role in ACCOUNT_ROLES.items()
    ]
    return [*accounts, token, *bindings]


def network_policy(tenant: str, namespace: str, spec: ProvisioningSpec) -> dict[str, Any]:
    """``kubeopera-egress``: what the namespace's pods may reach, and who may reach them."""
    egress = egress_rules(
        api_server_cidrs=spec.api_server_cidrs,
        api_server_ports=spec.api_server_ports,
        tracking_host=spec.tracking_host,
        tracking_port=spec.tracking_port,
        egress_ports=spec.egress_ports,
        egress_except_cidrs=spec.egress_except_cidrs,
    )
    return tenant_object(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        NETWORK_POLICY_NAME,
        tenant=tenant,
        namespace=namespace,
        spec={
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": egress,
        },
    )


def artifact_prefix(tenant: str) -> str:
    """Where a tenant's pipeline artifacts live in ARTIFACT_BUCKET."""
    return storage.tenant_artifacts(tenant)


def artifact_repository(tenant: str, spec: ProvisioningSpec) -> dict[str, Any]:
    """The namespace's default ArtifactRepository (Argo's shape), before YAML encoding."""
    s3: dict[str, Any] = {
        "bucket": spec.artifact_bucket,
        "endpoint": spec.s3_endpoint,
        "region": spec.region,
        "keyFormat": f"{artifact_prefix(tenant)}{{{{workflow.name}}}}/{{{{pod.name}}}}",
        "accessKeySecret": {"name": ARTIFACT_CREDENTIALS_SECRET, "key": ACCESS_KEY},
        "secretKeySecret": {"name": ARTIFACT_CREDENTIALS_SECRET, "key": SECRET_KEY},
    }
    if spec.s3_insecure:
        s3["insecure"] = True
    return {"archiveLogs": True, "s3": s3}


def tenant_objects(tenant: str, spec: ProvisioningSpec) -> list[dict[str, Any]]:
    """Every object of a tenant's namespace, in apply order (the Namespace first).

    The compiler's own binding comes next: it is what lets the compiler write the rest. The
    network policy and quota come before anything that could run a pod; each account before its
    token Secret (the token controller deletes a token whose account is missing) and its
    binding. The sensor account is the one object outside the namespace (in the events
    namespace). ValueError for a malformed tenant id.
    """
    namespace = tenant_namespace(tenant)
    namespace_object = tenant_object("v1", "Namespace", namespace, tenant=tenant, namespace=None)
    namespace_object["metadata"]["labels"].update(
        {L.POD_SECURITY_ENFORCE: POD_SECURITY_LEVEL, L.POD_SECURITY_ENFORCE_VERSION: "latest"}
    )
    repository = yaml.safe_dump(
        artifact_repository(tenant, spec), sort_keys=True, default_flow_style=False
    )
    repositories = tenant_object(
        "v1",
        "ConfigMap",
        ARTIFACT_REPOSITORIES,
        tenant=tenant,
        namespace=namespace,
        annotations={L.ARGO_DEFAULT_ARTIFACT_REPOSITORY: ARTIFACT_REPOSITORY_KEY},
        data={ARTIFACT_REPOSITORY_KEY: repository},
    )
    return [
        namespace_object,
        compiler_binding(tenant, namespace, spec),
        network_policy(tenant, namespace, spec),
        *_resource_objects(tenant, namespace, spec),
        *_identity_objects(tenant, namespace, spec),
        repositories,
        *_sensor_objects(tenant, namespace, spec),
    ]


def credentials_secret(tenant: str, access_key_id: str, secret_access_key: str) -> dict[str, Any]:
    """The Secret holding the tenant's storage key, which the artifact repository names."""
    return tenant_object(
        "v1",
        "Secret",
        ARTIFACT_CREDENTIALS_SECRET,
        tenant=tenant,
        namespace=tenant_namespace(tenant),
        type="Opaque",
        data={
            ACCESS_KEY: base64.b64encode(access_key_id.encode()).decode(),
            SECRET_KEY: base64.b64encode(secret_access_key.encode()).decode(),
        },
    )
