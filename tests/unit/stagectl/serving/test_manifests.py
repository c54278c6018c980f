"""stagectl.serving.manifests and params: every object of model serving, validated against its
upstream schema (kubernetes-validate strict, the CRDs in crds/) over many inputs, and what each
object must say."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.config import Settings
from shared.inference_routes import deployment_of_path
from shared.inference_tokens import DeploymentRef, parse_host
from shared.serving import MAX_ISVC_NAME, isvc_name
from shared.stages import ENVIRONMENTS
from stagectl.serving import manifests as M
from stagectl.serving.params import (
    Deployment,
    ModelServing,
    ServingPlatform,
    fits_quota,
    predictor_host,
)
from tests.unit.stagectl.serving._schemas import Invalid, validate

AUTH_URL = (
    "http://workflow-manager-inference-auth.workflow-manager.svc:8120/internal/v1/inference-auth"
)
PLATFORM = ServingPlatform(bucket="wm-artifacts", domain="models.example.com", auth_url=AUTH_URL)
GATEWAY_API = ServingPlatform(
    bucket="wm-artifacts", domain="models.example.com", auth_url=AUTH_URL, route="gateway-api"
)
SERVING = ModelServing("sklearn", runtime="kserve-sklearnserver")
DEPLOYMENT = Deployment("acme", "churn", "staging", "tenants/acme/models/churn/3/", SERVING)
NS = "kubeopera-serve-acme"
OURS = {"app.kubernetes.io/managed-by": "workflow-manager", "kubeopera.io/tenant": "acme"}

tenants = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?\Z")
models = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,44}[a-z0-9])?\Z")
environments = st.sampled_from(ENVIRONMENTS)
names = st.from_regex(r"\A[a-z][a-z0-9-]{0,20}[a-z0-9]\Z")
cpus = st.sampled_from(["100m", "250m", "1", "2", "1500m"])
memories = st.sampled_from(["128Mi", "512Mi", "1Gi", "2Gi", "4G"])
servings = st.builds(
    ModelServing,
    model_format=st.sampled_from(["sklearn", "xgboost", "onnx", "pytorch", "tensorflow"]),
    model_format_version=st.none() | st.sampled_from(["1", "2.1", "1.3.0"]),
    runtime=st.none() | names,
    cpu=cpus,
    memory=memories,
    gpu=st.integers(0, 4),
    min_replicas=st.integers(0, 1),
    max_replicas=st.integers(1, 10),
)
endpoints = st.sampled_from(
    [
        ("s3.eu-north-1.amazonaws.com", True),
        ("minio.minio.svc:9000", False),
        ("minio.storage.svc.cluster.local", True),
        ("10.1.2.3:9000", False),
        ("storage.example.net:8443", True),
    ]
)
auth_urls = st.sampled_from(
    [
        AUTH_URL,
        "https://check.auth-ns.svc.cluster.local/internal/v1/inference-auth",
        "http://wm-inference-auth.kubeopera-serve-acme.svc:80/internal/v1/inference-auth",
    ]
)
gateways = st.sampled_from(
    [
        "kourier-internal.kourier-system.svc.cluster.local",
        "knative-local-gateway.istio-system.svc",
    ]
)


@st.composite
def platforms(draw: st.DrawFn) -> ServingPlatform:
    endpoint, https = draw(endpoints)
    return ServingPlatform(
        bucket=draw(st.sampled_from(["wm-artifacts", "tcr.pipeline-artifacts"])),
        domain=draw(st.sampled_from(["models.example.com", "m.io", "serve.corp.internal"])),
        auth_url=draw(auth_urls),
        knative_gateway=draw(gateways),
        route=draw(st.sampled_from(["ingress-nginx", "gateway-api"])),
        gateway_namespace=draw(names),
        gateway=draw(names),
        ingress_class=draw(st.none() | names),
        metrics_namespace=draw(names),
        s3_endpoint=endpoint,
        s3_use_https=https,
        s3_verify_ssl=draw(st.booleans()),
        s3_region=draw(st.sampled_from(["eu-north-1", "us-east-1"])),
        quota_cpu=draw(st.sampled_from(["8", "16", "500m"])),
        quota_memory=draw(st.sampled_from(["16Gi", "64Gi", "1Gi"])),
        quota_gpu=draw(st.integers(0, 8)),
    )


@st.composite
def deployments(draw: st.DrawFn) -> Deployment:
    tenant, model = draw(tenants), draw(models)
    version = draw(st.integers(1, 10**8))
    return Deployment(
        tenant,
        model,
        draw(environments),
        f"tenants/{tenant}/models/{model}/{version}/",
        draw(servings),
    )


def every_object(deployment: Deployment, platform: ServingPlatform) -> list[dict[str, Any]]:
    return [
        *M.namespace_objects(deployment.tenant, platform),
        M.storage_secret(
            deployment.tenant, platform, access_key_id="AKIAEXAMPLE", secret_access_key="s/e+c"
        ),
        M.inference_service(deployment, platform),
        *M.publishing_objects(deployment, platform),
        *M.reference_grants(deployment.tenant, platform),
    ]


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objects}


# --- every object against its schema --------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(deployment=deployments(), platform=platforms())
def test_every_object_is_valid_for_its_upstream_schema(
    deployment: Deployment, platform: ServingPlatform
) -> None:
    for obj in every_object(deployment, platform):
        assert validate(obj) == 0, obj["kind"]  # every CEL rule evaluated, none skipped


@pytest.mark.parametrize("route", ["ingress-nginx", "gateway-api"])
def test_each_route_form_builds_its_own_kinds(route: str) -> None:
    platform = PLATFORM if route == "ingress-nginx" else GATEWAY_API
    kinds = [o["kind"] for o in every_object(DEPLOYMENT, platform)]
    shared = ["Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "ServiceAccount"]
    publish = (
        ["Service", "Ingress"]
        if route == "ingress-nginx"
        else ["HTTPRoute", "SecurityPolicy", "ReferenceGrant", "ReferenceGrant"]
    )
    assert kinds == [*shared, "Secret", "InferenceService", *publish]


def test_the_schema_check_refuses_what_the_server_would_refuse_or_drop() -> None:
    isvc = M.inference_service(DEPLOYMENT, PLATFORM)
    typo = copy.deepcopy(isvc)
    typo["spec"]["predictor"]["model"]["storageURI"] = typo["spec"]["predictor"]["model"].pop(
        "storageUri"
    )
    with pytest.raises(Invalid, match="storageURI"):
        validate(typo)
    wrong_type = copy.deepcopy(isvc)
    wrong_type["spec"]["predictor"]["minReplicas"] = "1"
    with pytest.raises(Invalid):
        validate(wrong_type)
    route, policy = M.publishing_objects(DEPLOYMENT, GATEWAY_API)
    no_port = copy.deepcopy(policy)
    del no_port["spec"]["extAuth"]["http"]["backendRefs"][0]["port"]
    with pytest.raises(Invalid, match="Must have port"):  # a CEL rule of the CRD
        validate(no_port)
    twice = copy.deepcopy(route)
    twice["spec"]["rules"][0]["filters"].append(twice["spec"]["rules"][0]["filters"][0])
    with pytest.raises(Invalid, match="cannot be repeated"):
        validate(twice)
    quota = M.resource_quota("acme", PLATFORM)
    quota["spec"]["hardd"] = quota["spec"].pop("hard")
    with pytest.raises(Exception, match="hardd"):
        validate(quota)


# --- the namespace and what it shares -------------------------------------------------------
def test_the_namespace_is_baseline_and_the_platforms() -> None:
    ns = M.namespace("acme")
    assert ns["metadata"]["name"] == NS
    assert ns["metadata"]["labels"] == {
        **OURS,
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "baseline",
        "pod-security.kubernetes.io/warn-version": "latest",
        "pod-security.kubernetes.io/audit": "baseline",
        "pod-security.kubernetes.io/audit-version": "latest",
    }
    for obj in M.namespace_objects("acme", PLATFORM)[1:]:
        assert obj["metadata"]["namespace"] == NS
        assert obj["metadata"]["labels"] == OURS


@pytest.mark.parametrize("tenant", ["", "Acme", "a_b", "-a", "x" * 49, "a.b"])
def test_a_malformed_tenant_builds_nothing(tenant: str) -> None:
    with pytest.raises(ValueError, match="not a tenant id"):
        M.namespace_objects(tenant, PLATFORM)


def test_the_quota_comes_from_the_settings() -> None:
    platform = ServingPlatform(
        bucket="b-1", domain="m.io", auth_url=AUTH_URL, quota_cpu="4", quota_memory="8Gi",
        quota_gpu=2,
    )  # fmt: skip
    assert M.resource_quota("acme", platform)["spec"]["hard"] == {
        "requests.cpu": "4",
        "limits.cpu": "4",
        "requests.memory": "8Gi",
        "limits.memory": "8Gi",
        "requests.nvidia.com/gpu": "2",
    }
    limits = M.limit_range("acme", platform)["spec"]["limits"][0]
    assert limits["max"] == {"cpu": "4", "memory": "8Gi"}
    assert set(limits) == {"type", "default", "defaultRequest", "max"}


def test_the_network_policy_admits_the_gateway_knative_and_the_scraper_only() -> None:
    spec = M.network_policy("acme", PLATFORM)["spec"]
    assert spec["podSelector"] == {}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    name = "kubernetes.io/metadata.name"
    assert spec["ingress"] == [
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {name: "kourier-system"}}},
                {
                    "namespaceSelector": {"matchLabels": {name: "knative-serving"}},
                    "podSelector": {
                        "matchExpressions": [
                            {"key": "app", "operator": "In", "values": ["activator", "autoscaler"]}
                        ]
                    },
                },
            ]
        },
        {
            "from": [{"namespaceSelector": {"matchLabels": {name: "monitoring"}}}],
            "ports": [{"protocol": "TCP", "port": 9091}],
        },
    ]
    dns, storage = spec["egress"]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {name: "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert {p["port"] for p in dns["ports"]} == {53}
    # AWS S3: public addresses only, on 443.
    assert storage == {
        "to": [
            {
                "ipBlock": {
                    "cidr": "0.0.0.0/0",
                    "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"],
                }
            }
        ],
        "ports": [{"protocol": "TCP", "port": 443}],
    }


@pytest.mark.parametrize(
    ("endpoint", "https", "peer", "port"),
    [
        (
            "minio.minio.svc:9000",
            False,
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}},
            9000,
        ),
        ("10.1.2.3", False, {"ipBlock": {"cidr": "10.1.2.3/32"}}, 80),
        ("[fd00::1]:9000", True, {"ipBlock": {"cidr": "fd00::1/128"}}, 9000),
    ],
)
def test_egress_reaches_the_configured_object_storage_only(
    endpoint: str, https: bool, peer: dict[str, Any], port: int
) -> None:
    platform = ServingPlatform(
        bucket="b-1", domain="m.io", auth_url=AUTH_URL, s3_endpoint=endpoint, s3_use_https=https
    )
    storage = M.network_policy("acme", platform)["spec"]["egress"][1]
    assert storage == {"to": [peer], "ports": [{"protocol": "TCP", "port": port}]}


def test_the_storage_account_carries_kserves_annotations_and_lists_the_secret() -> None:
    platform = ServingPlatform(
        bucket="b-1", domain="m.io", auth_url=AUTH_URL, s3_endpoint="minio.minio.svc:9000",
        s3_use_https=False, s3_verify_ssl=False, s3_region="us-east-1",
    )  # fmt: skip
    account = M.storage_service_account("acme", platform)
    assert account["metadata"]["annotations"] == {
        "serving.kserve.io/s3-endpoint": "minio.minio.svc:9000",
        "serving.kserve.io/s3-usehttps": "0",
        "serving.kserve.io/s3-region": "us-east-1",
        "serving.kserve.io/s3-verifyssl": "0",
    }
    assert account["secrets"] == [{"name": "kubeopera-model-reader-s3"}]
    assert account["automountServiceAccountToken"] is False
    secret = M.storage_secret("acme", platform, access_key_id="AKIA1", secret_access_key="s3cr/t")
    assert secret["metadata"]["name"] == "kubeopera-model-reader-s3"
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "AWS_ACCESS_KEY_ID": "AKIA1",
        "AWS_SECRET_ACCESS_KEY": "s3cr/t",
    }
    assert "s3cr/t" not in repr(account)


# --- the InferenceService -------------------------------------------------------------------
def test_the_inference_service_serves_the_registry_copy_cluster_local() -> None:
    isvc = M.inference_service(DEPLOYMENT, PLATFORM)
    assert isvc["metadata"]["name"] == "churn-staging"
    assert isvc["metadata"]["namespace"] == NS
    assert isvc["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    assert isvc["spec"] == {
        "predictor": {
            "serviceAccountName": "kubeopera-model-reader",
            "minReplicas": 1,
            "maxReplicas": 1,
            "model": {
                "modelFormat": {"name": "sklearn"},
                "runtime": "kserve-sklearnserver",
                "storageUri": "s3://wm-artifacts/tenants/acme/models/churn/3/",
                "resources": {
                    "requests": {"cpu": "1", "memory": "2Gi"},
                    "limits": {"cpu": "1", "memory": "2Gi"},
                },
            },
        }
    }


def test_gpus_are_requested_and_limited() -> None:
    serving = ModelServing(
        "pytorch", model_format_version="2", cpu="2", memory="8Gi", cpu_limit="4", gpu=1,
        min_replicas=0, max_replicas=3,
    )  # fmt: skip
    deployment = Deployment(
        "acme", "vision", "production", "tenants/acme/models/vision/7/", serving
    )
    predictor = M.inference_service(deployment, PLATFORM)["spec"]["predictor"]
    assert predictor["minReplicas"] == 0
    assert predictor["maxReplicas"] == 3
    assert predictor["model"]["modelFormat"] == {"name": "pytorch", "version": "2"}
    assert "runtime" not in predictor["model"]
    assert predictor["model"]["resources"] == {
        "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
    }


@given(model=models, environment=environments, other=models)
def test_inference_service_names_fit_knative_and_never_collide(
    model: str, environment: str, other: str
) -> None:
    name = isvc_name(model, environment)
    assert len(name) <= MAX_ISVC_NAME
    assert name[0].isalpha()
    assert name[-1].isalnum()
    assert len(f"{name}-predictor-00001") <= 63
    for env in ENVIRONMENTS:
        if (other, env) != (model, environment):
            assert isvc_name(other, env) != name


def test_a_short_name_is_kept_and_a_long_one_shortened() -> None:
    assert isvc_name("churn", "production") == "churn-production"
    long = isvc_name("a" * 46, "production")
    assert long.endswith("-production")
    assert len(long) == MAX_ISVC_NAME
    assert isvc_name("1st", "staging").startswith("m1st-")


@pytest.mark.parametrize(
    ("tenant", "model", "environment", "prefix"),
    [
        ("acme", "churn", "canary", "tenants/acme/models/churn/3/"),  # not an environment
        ("acme", "churn", "staging", "tenants/other/models/churn/3/"),  # another tenant's
        ("acme", "churn", "staging", "tenants/acme/artifacts/churn/3/"),
        ("acme", "churn", "staging", "tenants/acme/models/churn/3"),
        ("acme", "churn", "staging", "tenants/acme/models/churn/0/"),
        ("acme", "churn", "staging", "tenants/acme/models/churn/3/../../x/"),
        ("acme", "Churn", "staging", "tenants/acme/models/Churn/3/"),
    ],
)
def test_a_deployment_serves_only_its_own_registry_copy(
    tenant: str, model: str, environment: str, prefix: str
) -> None:
    with pytest.raises(ValueError, match=r"environment|storage_prefix|model") as raised:
        Deployment(tenant, model, environment, prefix, SERVING)
    assert "model:" in str(raised.value) or model == "churn"


@pytest.mark.parametrize(
    "fields",
    [
        {"model_format": "SKLearn"},
        {"model_format": "sklearn", "cpu": "0"},
        {"model_format": "sklearn", "cpu": "2", "cpu_limit": "1"},
        {"model_format": "sklearn", "memory": "2Gi", "memory_limit": "1Gi"},
        {"model_format": "sklearn", "min_replicas": 2, "max_replicas": 1},
        {"model_format": "sklearn", "max_replicas": 0, "min_replicas": 0},
        {"model_format": "sklearn", "gpu": -1},
        {"model_format": "sklearn", "runtime": "a b"},
        {"model_format": "sklearn", "cpu": "lots"},
    ],
)
def test_malformed_serving_settings_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"model_format|cpu|memory|replicas|expected|quantity"):
        ModelServing(**fields)


def test_what_can_never_fit_the_quota_is_named() -> None:
    assert fits_quota(ModelServing("sklearn", cpu="2", max_replicas=4), PLATFORM) is None
    assert "ML_SERVE_QUOTA_CPU" in str(
        fits_quota(ModelServing("sklearn", cpu="3", max_replicas=3), PLATFORM)
    )
    assert "ML_SERVE_QUOTA_MEMORY" in str(
        fits_quota(ModelServing("sklearn", memory="9Gi", max_replicas=2), PLATFORM)
    )
    assert "ML_SERVE_QUOTA_GPU" in str(fits_quota(ModelServing("sklearn", gpu=1), PLATFORM))


# --- publishing -----------------------------------------------------------------------------
def test_ingress_nginx_checks_the_deployment_and_sends_the_predictors_host() -> None:
    service, ingress = M.publishing_objects(DEPLOYMENT, PLATFORM)
    assert service["spec"] == {
        "type": "ExternalName",
        "externalName": "kourier-internal.kourier-system.svc.cluster.local",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}],
    }
    annotations = ingress["metadata"]["annotations"]
    auth = annotations["nginx.ingress.kubernetes.io/auth-url"]
    path = "/" + auth.split("/", 3)[3]
    assert deployment_of_path(path) == DeploymentRef("acme", "churn", "staging")
    # the token is replaced by the check's answer, which never carries one
    assert "Authorization" in annotations["nginx.ingress.kubernetes.io/auth-response-headers"]
    assert (
        annotations["nginx.ingress.kubernetes.io/upstream-vhost"]
        == "churn-staging-predictor.kubeopera-serve-acme.svc.cluster.local"
    )
    rule = ingress["spec"]["rules"][0]
    assert parse_host(rule["host"], domain="models.example.com") == DEPLOYMENT.ref
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": service["metadata"]["name"], "port": {"number": 80}}
    assert ingress["metadata"]["namespace"] == service["metadata"]["namespace"] == NS


def test_gateway_api_routes_through_the_gateway_with_the_check_on_the_route() -> None:
    platform = ServingPlatform(
        bucket="b-1", domain="models.example.com", auth_url=AUTH_URL, route="gateway-api",
        gateway_namespace="edge", gateway="public",
    )  # fmt: skip
    route, policy = M.publishing_objects(DEPLOYMENT, platform)
    assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "edge"}]
    assert route["spec"]["hostnames"] == ["churn-staging.acme.models.example.com"]
    (rule,) = route["spec"]["rules"]
    assert rule["filters"] == [
        {
            "type": "URLRewrite",
            "urlRewrite": {"hostname": predictor_host(DEPLOYMENT)},
        }
    ]
    assert rule["backendRefs"] == [
        {"name": "kourier-internal", "namespace": "kourier-system", "port": 80}
    ]
    assert policy["spec"]["targetRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": route["metadata"]["name"],
        }
    ]
    assert deployment_of_path(policy["spec"]["extAuth"]["http"]["path"]) == DEPLOYMENT.ref
    grants = {g["metadata"]["namespace"]: g["spec"] for g in M.reference_grants("acme", platform)}
    assert grants == {
        "kourier-system": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": NS}],
            "to": [{"group": "", "kind": "Service", "name": "kourier-internal"}],
        },
        "workflow-manager": {
            "from": [{"group": "gateway.envoyproxy.io", "kind": "SecurityPolicy", "namespace": NS}],
            "to": [{"group": "", "kind": "Service", "name": "workflow-manager-inference-auth"}],
        },
    }
    assert M.reference_grants("acme", PLATFORM) == []


def test_no_grant_where_nothing_crosses_a_namespace() -> None:
    platform = ServingPlatform(
        bucket="b-1", domain="m.io", route="gateway-api",
        auth_url="http://check.kubeopera-serve-acme.svc/internal/v1/inference-auth",
    )  # fmt: skip
    assert [g["metadata"]["namespace"] for g in M.reference_grants("acme", platform)] == [
        "kourier-system"
    ]


# --- the settings ---------------------------------------------------------------------------
def base_settings(**values: Any) -> Settings:
    defaults = {"ARTIFACT_BUCKET": "wm-artifacts", "ML_SERVING_DOMAIN": "models.example.com"}
    return Settings(DATABASE_URL="postgresql://u@h/db", **{**defaults, **values})


def test_the_platform_from_the_settings() -> None:
    platform = ServingPlatform.from_settings(
        base_settings(
            ML_SERVING_ROUTE="gateway-api",
            ML_SERVING_GATEWAY="edge/public",
            S3_ENDPOINT_URL="http://minio.minio.svc:9000",
            ML_SERVE_QUOTA_CPU="4",
        )
    )
    assert (platform.route, platform.gateway_namespace, platform.gateway) == (
        "gateway-api", "edge", "public",
    )  # fmt: skip
    assert (platform.s3_endpoint, platform.s3_use_https) == ("minio.minio.svc:9000", False)
    assert platform.quota_cpu == "4"
    aws = ServingPlatform.from_settings(base_settings(AWS_REGION="us-east-1"))
    assert (aws.route, aws.s3_endpoint, aws.s3_use_https) == (
        "ingress-nginx", "s3.us-east-1.amazonaws.com", True,
    )  # fmt: skip


@pytest.mark.parametrize(
    "values",
    [
        {"ML_SERVING_DOMAIN": None},
        {"S3_ENDPOINT_URL": "minio:9000"},
        {"KNATIVE_GATEWAY": "kourier.example.com"},
        {
            "ML_SERVING_ROUTE": "gateway-api",
            "INFERENCE_AUTH_URL": "http://auth.example.com/internal/v1/inference-auth",
        },
    ],
)
def test_settings_serving_cannot_use_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(
        ValueError, match=r"ML_SERVING_DOMAIN|S3_ENDPOINT_URL|KNATIVE_GATEWAY|INFERENCE"
    ):
        ServingPlatform.from_settings(base_settings(**values))


@pytest.mark.parametrize(
    "values",
    [
        {"ML_SERVING_ROUTE": "istio"},
        {"ML_SERVING_GATEWAY": "public"},
        {"ML_SERVING_GATEWAY": "Edge/public"},
        {"ML_SERVING_METRICS_NAMESPACE": "Monitoring"},
    ],
)
def test_malformed_serving_settings_stop_the_process(values: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="ML_SERVING"):
        base_settings(**values)
