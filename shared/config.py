"""Settings: every variable of the spec's configuration table, read from the environment only.

Values are validated when a process starts; a bad or missing value stops it with one line naming
the variable (``load_settings``). Nothing here reads the environment at import time.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BeforeValidator, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from shared import labels as L
from shared.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_LABEL_VALUE = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# host:port, or [IPv6]:port; a port from 1 to 65535.
_HOST_PORT = re.compile(
    r"^(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}"
    r"|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$"
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


def parse_duration(value: Any) -> float:
    """'2m' -> 120.0, '90s' -> 90.0, '1.5h' -> 5400.0, 30 -> 30.0. Purely computational."""
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.match(str(value))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a positive duration such as 30s, 2m or 1h, got {value!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration)]
# NoDecode: a comma-separated env value is ours to split, not JSON for pydantic-settings.
CsvInts = Annotated[list[int], NoDecode, BeforeValidator(_split_csv)]
CsvStrs = Annotated[list[str], NoDecode, BeforeValidator(_split_csv)]


class Settings(BaseSettings):
    """The whole configuration table of the spec, plus the operational knobs we add (documented
    in docs/configuration.md). One class serves every deployable; each checks at start the
    variables it cannot work without (``require``)."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", env_ignore_empty=True)

    # --- the spec's table -------------------------------------------------------------------
    DATABASE_URL: str
    API_KEY: SecretStr | None = None
    KUBEOPERA_API_BASE_URL: str | None = None
    KUBEOPERA_API_INTERNAL_KEY: SecretStr | None = None
    ARGO_DATA_SERVER_URL: str = "https://argo-data-server.kubeopera-argo-data.svc:2746"
    ARTIFACT_BUCKET: str | None = None
    AWS_REGION: str = "eu-north-1"
    ARTIFACT_IAM_USER_PATH: str | None = None
    ARTIFACT_IAM_USER_PREFIX: str | None = None
    ARTIFACT_IAM_BOUNDARY_ARN: str | None = None
    DATA_NS_QUOTA_CPU: str = "8"
    DATA_NS_QUOTA_MEMORY: str = "16Gi"
    DATA_NS_QUOTA_PODS: int = Field(default=50, ge=1)
    DATA_MAX_CPU: str = "4"
    DATA_MAX_MEMORY: str = "8Gi"
    DATA_EGRESS_PORTS: CsvInts = Field(default_factory=lambda: [443])
    DATA_EGRESS_EXCEPT_CIDRS: CsvStrs = Field(default_factory=lambda: list(PRIVATE_RANGES))
    EVENTS_NAMESPACE: str = "kubeopera-pipeline-events"
    EVENTS_PUBLIC_HOST: str | None = None
    GIT_SYNC_INTERVAL: Seconds = 120.0
    PUBLIC_UI_URL: str | None = None
    ML_MAX_GPU: int = Field(default=0, ge=0)
    ML_NS_QUOTA_GPU: int = Field(default=0, ge=0)
    MLFLOW_URL: str | None = None
    MLFLOW_ADMIN_USERNAME: str | None = None
    MLFLOW_ADMIN_PASSWORD: SecretStr | None = None
    ML_SERVING_DOMAIN: str | None = None
    KNATIVE_GATEWAY: str = "kourier-internal.kourier-system.svc.cluster.local"
    INFERENCE_AUTH_URL: str = "http://workflow-manager-inference-auth.workflow-manager.svc:8120/internal/v1/inference-auth"
    ML_SERVE_QUOTA_CPU: str = "8"
    ML_SERVE_QUOTA_MEMORY: str = "16Gi"
    ML_SERVE_QUOTA_GPU: int = Field(default=0, ge=0)
    PROMETHEUS_URL: str | None = None
    RUN_RETENTION_DAYS: int = Field(default=90, ge=1)
    HTTP_PORT: int = Field(default=8120, ge=1, le=65535)

    # --- operational knobs (ours; docs/configuration.md) -------------------------------------
    LOG_JSON: bool | None = None  # None: JSON unless stderr is a terminal
    LOG_LEVEL: str = "info"
    HEALTH_PORT: int = Field(default=8121, ge=0, le=65535)  # 0: pick a free port
    POD_NAME: str | None = None  # leader-election identity; hostname+pid when unset
    POD_NAMESPACE: str = "workflow-manager"  # where Leases live on the host cluster
    HOST_KUBECONFIG: str | None = None  # path to a kubeconfig for the host outside a cluster
    LEASE_DURATION: Seconds = 15.0
    LEASE_RENEW_PERIOD: Seconds = 5.0
    SHUTDOWN_GRACE: Seconds = 25.0
    DB_POOL_MIN: int = Field(default=1, ge=0)
    DB_POOL_MAX: int = Field(default=10, ge=1)
    S3_ENDPOINT_URL: str | None = None  # object storage other than AWS (moto, MinIO)
    IAM_ENDPOINT_URL: str | None = None  # IAM other than AWS's (moto in tests and the demo)
    INTERNAL_API_KEY: SecretStr | None = None  # deployable-to-deployable calls
    COMPILER_URL: str = "http://workflow-manager-compiler.workflow-manager.svc:8120"
    CLUSTER_REFRESH_INTERVAL: Seconds = 300.0
    REDIS_URL: str = "redis://127.0.0.1:6379/0"
    TENANT_RECONCILE_INTERVAL: Seconds = 300.0  # drift check of every tenant's provisioning
    # Drift check of every pipeline's CronWorkflow and event objects (a few API reads each).
    PIPELINE_RECONCILE_INTERVAL: Annotated[Seconds, Field(ge=1)] = 60.0
    PIPELINE_TEMPLATES_KEPT: int = Field(default=10, ge=10)  # newest templates kept per pipeline
    # The shortest time a pipeline's schedule may leave between two runs (1 minute to 1 day).
    SCHEDULE_MIN_INTERVAL: Annotated[Seconds, Field(ge=60, le=86400)] = 300.0
    # The chart's tenant ClusterRoles (<prefix>compiler, executor, spark, training), which the
    # compiler binds in each tenant namespace, the first to its own service account (in
    # POD_NAMESPACE). The chart sets both from its release name.
    TENANT_CLUSTER_ROLE_PREFIX: str = Field(default="workflow-manager-tenant-", min_length=1)
    COMPILER_SERVICE_ACCOUNT: str = Field(default="workflow-manager-compiler", min_length=1)
    # The data controller's instance ID (the label value routing a workflow to it).
    ARGO_DATA_INSTANCE_ID: str = L.DATA_CONTROLLER_INSTANCE_ID
    # inference_auth: how long tokens it verified keep answering from its cache once it can no
    # longer hear changes (PostgreSQL away); how long an unknown lookup id is remembered (in
    # process and in Redis); how long a Redis call may take before Redis counts as down.
    INFERENCE_AUTH_STALE_FOR: Seconds = 300.0
    INFERENCE_AUTH_NEGATIVE_TTL: Seconds = 30.0
    INFERENCE_AUTH_REDIS_TIMEOUT: Seconds = 0.1
    # Run notifications (the compiler's leader sends them): PagerDuty's Events API v2 endpoint,
    # and the only URL prefixes a tenant's Slack webhook may have (anything else would let a
    # tenant make the compiler POST into the cluster's network).
    PAGERDUTY_EVENTS_URL: str = "https://events.pagerduty.com/v2/enqueue"
    SLACK_WEBHOOK_URL_PREFIXES: CsvStrs = Field(
        default_factory=lambda: ["https://hooks.slack.com/"]
    )
    # Git sync (compiler): a CA bundle for https remotes other than the system's (a private Git
    # server's CA; the tests' and the demo's server), the directory fetches go to (a tmpfs: the
    # root filesystem is read-only), how long one repository may take, how much one fetch may
    # bring, and how many repositories a pass checks at once.
    GIT_CA_BUNDLE: str | None = None
    GIT_WORKDIR: str | None = None  # None: the system's temporary directory
    GIT_TIMEOUT: Seconds = 30.0
    GIT_FETCH_MAX_BYTES: int = Field(default=32 * 1024 * 1024, ge=1024 * 1024)
    GIT_SYNC_CONCURRENCY: int = Field(default=32, ge=1, le=256)
    # How many documents are fetched with git at once, by saves and the poller together.
    GIT_FETCH_CONCURRENCY: int = Field(default=4, ge=1, le=64)
    # Where a tenant's Git remote may not lead (compiler.gitsync.addresses): these ranges besides
    # every non-public address; and the installation's own Git servers, host:port exactly as
    # their URLs write them, reached whatever their addresses.
    GIT_DENY_CIDRS: CsvStrs = Field(default_factory=lambda: list(PRIVATE_RANGES))
    GIT_ALLOW_REMOTES: CsvStrs = Field(default_factory=list)
    # How many data secrets a tenant may have (every save reads them all).
    DATA_SECRETS_MAX_PER_TENANT: int = Field(default=100, ge=1, le=10000)
    # stagectl: how long a release waits for a person's approval before it is rejected as
    # expired; how many workflows it works on at once; how often it looks for approvals due to
    # expire and decisions it has not acted on (the NOTIFY it missed while away).
    STAGE_APPROVAL_TIMEOUT: Seconds = 72 * 3600.0
    STAGE_CONCURRENCY: int = Field(default=128, ge=1, le=1024)
    STAGE_SWEEP_INTERVAL: Seconds = 30.0
    # How often a waiting deploy stage looks at its deployment again (the reconciler's
    # observation; docs/operations.md, "Deployments").
    STAGE_DEPLOY_POLL: Seconds = 1.0
    # The key deployment tokens are sealed with until shown (shared/token_sealing.py: 32
    # bytes, base64; stagectl and the apiserver only). None: deployments get no token.
    DEPLOYMENT_TOKEN_KEY: SecretStr | None = None
    # Model serving (stagectl.serving): how a deployment is published, "ingress-nginx" (an
    # Ingress with auth-url) or "gateway-api" (an HTTPRoute with an Envoy Gateway
    # SecurityPolicy); the Gateway its HTTPRoutes attach to, as <namespace>/<name>; the
    # ingress class of its Ingresses (None: the cluster's default class); the namespace of
    # the Prometheus that scrapes the model servers' queue-proxy metrics.
    ML_SERVING_ROUTE: Literal["ingress-nginx", "gateway-api"] = "ingress-nginx"
    ML_SERVING_GATEWAY: str = "envoy-gateway-system/workflow-manager-inference"
    ML_SERVING_INGRESS_CLASS: str | None = None
    ML_SERVING_METRICS_NAMESPACE: str = "monitoring"

    @field_validator("LOG_LEVEL")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("expected one of debug, info, warning, error")
        return value.lower()

    @field_validator("ARGO_DATA_INSTANCE_ID")
    @classmethod
    def _label_value(cls, value: str) -> str:
        if not _LABEL_VALUE.match(value):
            raise ValueError("expected a label value: up to 63 letters, digits, '-', '_' or '.'")
        return value

    @field_validator("ML_SERVING_GATEWAY")
    @classmethod
    def _gateway(cls, value: str) -> str:
        namespace, slash, name = value.partition("/")
        if not slash or not _DNS_LABEL.match(namespace) or not _DNS_SUBDOMAIN.match(name):
            raise ValueError("expected <namespace>/<name> of a Gateway")
        return value

    @field_validator("ML_SERVING_METRICS_NAMESPACE")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError("expected a namespace name")
        return value

    @field_validator("GIT_DENY_CIDRS")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"expected CIDRs such as 10.0.0.0/8, got {cidr!r}") from None
        return value

    @field_validator("GIT_ALLOW_REMOTES")
    @classmethod
    def _host_ports(cls, value: list[str]) -> list[str]:
        for entry in value:
            host = entry.rpartition(":")[0]
            try:
                if not _HOST_PORT.match(entry):
                    raise ValueError
                if host.startswith("["):
                    ipaddress.IPv6Address(host[1:-1])
            except ValueError:
                raise ValueError(
                    f"expected host:port entries such as git.internal:443, got {entry!r}"
                ) from None
        return value

    @field_validator("DATABASE_URL")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if not value.startswith(("postgres://", "postgresql://")):
            raise ValueError("expected a postgresql:// URL")
        return value

    def require(self, *names: str) -> None:
        """Fail start-up with one line when a deployable needs a variable that is unset."""
        missing = [name for name in names if getattr(self, name) in (None, "")]
        if missing:
            raise ConfigError(f"{', '.join(missing)}: required by this deployable but not set")


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S] = Settings, **overrides: Any) -> S:  # type: ignore[assignment]
    """Read settings from the environment; raise ConfigError naming each bad variable."""
    try:
        return cls(**overrides)
    except SettingsError as exc:  # a value the environment source itself could not read
        named = re.search(r'field "([^"]+)"', str(exc))
        raise ConfigError(f"{named.group(1) if named else 'settings'}: cannot be parsed") from exc
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"]) or "settings"
            problems.append(f"{name}: {error['msg']}")
        raise ConfigError("; ".join(problems)) from exc


def settings_or_exit(cls: type[S] = Settings) -> S:  # type: ignore[assignment]
    """For __main__: print the one-line configuration error and exit with status 2."""
    try:
        return load_settings(cls)
    except ConfigError as exc:
        print(f"configuration error: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from exc
