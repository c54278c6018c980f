"""The inputs of model serving, checked: the installation's (``ServingPlatform``, from the
settings), one model's (``ModelServing``, which the deploy stage fills from
``Release.serving``) and one deployment's (``Deployment``); and the names derived from them.
Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from shared import labels as L
from shared import quantity
from shared.config import PRIVATE_RANGES, Settings
from shared.identifiers import TENANT_ID
from shared.inference_routes import auth_service, check_auth_url
from shared.inference_tokens import DeploymentRef, check_deployment, check_domain, endpoint_host
from shared.serving import PREDICTOR_SUFFIX, Serving, isvc_name
from shared.stages import ENVIRONMENTS

RouteForm = Literal["ingress-nginx", "gateway-api"]
ROUTE_FORMS: Final = ("ingress-nginx", "gateway-api")

POD_SECURITY_LEVEL: Final = "baseline"
QUOTA_NAME: Final = "kubeopera-serve-quota"
LIMITS_NAME: Final = "kubeopera-serve-limits"
NETWORK_POLICY_NAME: Final = "kubeopera-serve"
STORAGE_ACCOUNT: Final = "kubeopera-model-reader"
STORAGE_SECRET: Final = "kubeopera-model-reader-s3"
# The key names KServe's shipped inferenceservice-config reads (credentials.s3).
ACCESS_KEY: Final = "AWS_ACCESS_KEY_ID"
SECRET_KEY: Final = "AWS_SECRET_ACCESS_KEY"
GPU_RESOURCE: Final = "nvidia.com/gpu"

KSERVE_PREFIX: Final = "serving.kserve.io/"
S3_ENDPOINT: Final = KSERVE_PREFIX + "s3-endpoint"
S3_USE_HTTPS: Final = KSERVE_PREFIX + "s3-usehttps"
S3_REGION: Final = KSERVE_PREFIX + "s3-region"
S3_VERIFY_SSL: Final = KSERVE_PREFIX + "s3-verifyssl"
VISIBILITY: Final = "networking.knative.dev/visibility"
CLUSTER_LOCAL: Final = "cluster-local"
# On each InferenceService and publishing object: the deployment it belongs to.
MODEL_LABEL: Final = "kubeopera.io/model"
ENVIRONMENT_LABEL: Final = "kubeopera.io/environment"

KNATIVE_NAMESPACE: Final = "knative-serving"
KNATIVE_SYSTEM_PODS: Final = ("activator", "autoscaler")  # their ``app`` label
QUEUE_PROXY_METRICS_PORT: Final = 9091
DNS_NAMESPACE: Final = "kube-system"
DNS_POD_LABELS: Final = {"k8s-app": "kube-dns"}

# Knative names the predictor's Service ``<isvc>-predictor`` and its revisions
# ``<isvc>-predictor-00001``; a revision name is a DNS label, so an InferenceService name has
# at most 63 - len("-predictor-00001") characters, and KServe wants it to start with a letter.
SERVICE_HOST: Final = re.compile(
    r"(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"\.svc(\.cluster\.local)?"
)
_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_FORMAT: Final = re.compile(r"[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class ServingPlatform:
    """What every deployment of the installation shares (the settings, checked once)."""

    bucket: str
    domain: str
    auth_url: str
    knative_gateway: str = "kourier-internal.kourier-system.svc.cluster.local"
    route: RouteForm = "ingress-nginx"
    gateway_namespace: str = "envoy-gateway-system"
    gateway: str = "workflow-manager-inference"
    ingress_class: str | None = None
    metrics_namespace: str = "monitoring"
    s3_endpoint: str = "s3.eu-north-1.amazonaws.com"  # host[:port], as KServe wants it
    s3_use_https: bool = True
    s3_verify_ssl: bool = True
    s3_region: str = "eu-north-1"
    # Where object storage may be when it is not a cluster Service or an address: anywhere
    # outside these ranges (the data namespaces' DATA_EGRESS_EXCEPT_CIDRS).
    storage_except_cidrs: tuple[str, ...] = PRIVATE_RANGES
    quota_cpu: str = "8"
    quota_memory: str = "16Gi"
    quota_gpu: int = 0

    def __post_init__(self) -> None:
        check_auth_url(self.auth_url)
        check_domain(self.domain)
        if self.route not in ROUTE_FORMS:
            raise ValueError(f"route: expected one of {', '.join(ROUTE_FORMS)}")
        if self.route == "gateway-api":
            auth_service(self.auth_url)
        knative_service(self.knative_gateway)
        for name in (self.gateway_namespace, self.metrics_namespace):
            if not TENANT_ID.fullmatch(name) and not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a namespace name")
        storage_port(self)
        quantity.cpu_millis(self.quota_cpu)
        quantity.memory_bytes(self.quota_memory)
        for cidr in self.storage_except_cidrs:
            ipaddress.ip_network(cidr, strict=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> ServingPlatform:
        """From the settings; ValueError naming what is missing or malformed."""
        if not settings.ARTIFACT_BUCKET:
            raise ValueError("ARTIFACT_BUCKET: model serving needs the registry's bucket")
        if not settings.ML_SERVING_DOMAIN:
            raise ValueError("ML_SERVING_DOMAIN: model serving needs the endpoints' domain")
        endpoint, https = (f"s3.{settings.AWS_REGION}.amazonaws.com", True)
        if settings.S3_ENDPOINT_URL:
            parts = urlsplit(settings.S3_ENDPOINT_URL)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("S3_ENDPOINT_URL: expected http(s)://<host>[:<port>]")
            endpoint, https = parts.netloc, parts.scheme == "https"
        namespace, _, gateway = settings.ML_SERVING_GATEWAY.partition("/")
        return cls(
            bucket=settings.ARTIFACT_BUCKET,
            domain=settings.ML_SERVING_DOMAIN,
            auth_url=settings.INFERENCE_AUTH_URL,
            knative_gateway=settings.KNATIVE_GATEWAY,
            route=settings.ML_SERVING_ROUTE,
            gateway_namespace=namespace,
            gateway=gateway,
            ingress_class=settings.ML_SERVING_INGRESS_CLASS,
            metrics_namespace=settings.ML_SERVING_METRICS_NAMESPACE,
            s3_endpoint=endpoint,
            s3_use_https=https,
            s3_verify_ssl=https,
            s3_region=settings.AWS_REGION,
            storage_except_cidrs=tuple(settings.DATA_EGRESS_EXCEPT_CIDRS),
            quota_cpu=settings.ML_SERVE_QUOTA_CPU,
            quota_memory=settings.ML_SERVE_QUOTA_MEMORY,
            quota_gpu=settings.ML_SERVE_QUOTA_GPU,
        )


@dataclass(frozen=True, slots=True)
class ModelServing:
    """How one model is served (the deploy stage fills it from ``Release.serving``).
    Requests equal limits unless the limits are given."""

    model_format: str
    model_format_version: str | None = None
    runtime: str | None = None
    cpu: str = "1"
    memory: str = "2Gi"
    cpu_limit: str | None = None
    memory_limit: str | None = None
    gpu: int = 0
    min_replicas: int = 1
    max_replicas: int = 1

    def __post_init__(self) -> None:
        if not _FORMAT.fullmatch(self.model_format):
            raise ValueError("model_format: expected a KServe model format such as sklearn")
        for name in (self.model_format_version, self.runtime):
            if name is not None and not _FORMAT.fullmatch(name):
                raise ValueError(f"{name!r}: expected lower-case letters, digits, '-', '.', '_'")
        if quantity.cpu_millis(self.cpu) <= 0 or quantity.memory_bytes(self.memory) <= 0:
            raise ValueError("cpu and memory must be positive")
        if quantity.cpu_millis(self.limits["cpu"]) < quantity.cpu_millis(self.cpu):
            raise ValueError("cpu_limit is below the cpu request")
        if quantity.memory_bytes(self.limits["memory"]) < quantity.memory_bytes(self.memory):
            raise ValueError("memory_limit is below the memory request")
        if self.gpu < 0 or not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("expected 0 <= min_replicas <= max_replicas, 1 <= max_replicas")

    @property
    def limits(self) -> dict[str, str]:
        return {"cpu": self.cpu_limit or self.cpu, "memory": self.memory_limit or self.memory}

    @classmethod
    def from_release(cls, serving: Serving) -> ModelServing:
        """How a release's ``serving`` block (validated at save) is served."""
        resources = serving.resources
        return cls(
            model_format=serving.model_format.name,
            model_format_version=serving.model_format.version,
            runtime=serving.runtime,
            cpu=str(resources.requests.cpu),
            memory=str(resources.requests.memory),
            cpu_limit=str(resources.limits.cpu),
            memory_limit=str(resources.limits.memory),
            gpu=resources.gpu,
            min_replicas=serving.min_replicas,
            max_replicas=serving.max_replicas,
        )


@dataclass(frozen=True, slots=True)
class Deployment:
    """One model of a tenant in one environment, serving the registry copy under
    ``storage_prefix`` (``stagectl.stages.register.version_prefix``:
    ``tenants/<t>/models/<m>/<n>/``)."""

    tenant: str
    model: str
    environment: str
    storage_prefix: str
    serving: ModelServing
    # The model's file under storage_prefix (model_versions.model_file): the storageUri names
    # it, so the storage initializer downloads the model and not the scorecard and lineage
    # beside it. None: the whole prefix.
    model_file: str | None = None

    def __post_init__(self) -> None:
        check_deployment(tenant=self.tenant, model=self.model, environment=self.environment)
        if self.environment not in ENVIRONMENTS:
            raise ValueError(f"environment: expected one of {', '.join(ENVIRONMENTS)}")
        models = f"tenants/{self.tenant}/models/{self.model}/"
        rest = self.storage_prefix.removeprefix(models)
        if rest == self.storage_prefix or not re.fullmatch(r"[1-9][0-9]{0,8}/", rest):
            raise ValueError(f"storage_prefix: expected {models}<version>/")
        if self.model_file is not None and not re.fullmatch(
            r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", self.model_file
        ):
            raise ValueError("model_file: expected a file name")

    @property
    def ref(self) -> DeploymentRef:
        return DeploymentRef(self.tenant, self.model, self.environment)


def serving_namespace(tenant: str) -> str:
    """``kubeopera-serve-<tenant>``; ValueError for a malformed tenant id."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise ValueError(f"{tenant!r} is not a tenant id (a DNS label of at most 48 characters)")
    return f"{L.SERVE_NAMESPACE_PREFIX}{tenant}"


def knative_service(gateway: str) -> tuple[str, str]:
    """(name, namespace) of the Knative gateway's Service from ``KNATIVE_GATEWAY``."""
    match = SERVICE_HOST.fullmatch(gateway.lower().rstrip("."))
    if match is None:
        raise ValueError(
            "KNATIVE_GATEWAY: expected the gateway Service's <service>.<namespace>.svc"
            "[.cluster.local] name"
        )
    return match.group("name"), match.group("namespace")


def storage_port(platform: ServingPlatform) -> int:
    parts = urlsplit(f"//{platform.s3_endpoint}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or (port is not None and not 0 < port < 65536):
        raise ValueError("the S3 endpoint: expected <host>[:<port>]")
    return port or (443 if platform.s3_use_https else 80)


def predictor_host(deployment: Deployment) -> str:
    """The predictor's cluster-local host, which the Knative gateway routes on."""
    name = isvc_name(deployment.model, deployment.environment)
    return f"{name}{PREDICTOR_SUFFIX}.{serving_namespace(deployment.tenant)}.svc.cluster.local"


def deployment_host(deployment: Deployment, platform: ServingPlatform) -> str:
    return endpoint_host(
        tenant=deployment.tenant,
        model=deployment.model,
        environment=deployment.environment,
        domain=platform.domain,
    )


def fits_quota(serving: ModelServing, platform: ServingPlatform) -> str | None:
    """Why ``max_replicas`` model servers of this size cannot fit the namespace's quota
    (None when they can). Sidecars and other deployments share it too: this only refuses
    what can never run."""
    limits = serving.limits
    replicas = serving.max_replicas
    if quantity.cpu_millis(limits["cpu"]) * replicas > quantity.cpu_millis(platform.quota_cpu):
        return f"{replicas} x cpu {limits['cpu']} exceeds ML_SERVE_QUOTA_CPU {platform.quota_cpu}"
    if quantity.memory_bytes(limits["memory"]) * replicas > quantity.memory_bytes(
        platform.quota_memory
    ):
        return (
            f"{replicas} x memory {limits['memory']} exceeds ML_SERVE_QUOTA_MEMORY "
            f"{platform.quota_memory}"
        )
    if serving.gpu * replicas > platform.quota_gpu:
        return f"{replicas} x gpu {serving.gpu} exceeds ML_SERVE_QUOTA_GPU {platform.quota_gpu}"
    return None
