"""compiler.tenants.provisioning: every object of a tenant namespace, the spec hash, and drift."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from compiler.tenants.provisioning import (
    SPEC_SCHEMA_VERSION,
    ProvisioningSpec,
    obsolete_objects,
    s3_endpoint,
    spec_hash,
    tenant_namespace,
    tenant_objects,
    tracking_server,
)
from shared.config import Settings
from shared.errors import ConfigError
from tests.unit.compiler._specs import BARE, NAMESPACE, NO_GPU, SPEC, TENANT, objects, one

OURS = {"app.kubernetes.io/managed-by": "workflow-manager", "kubeopera.io/tenant": TENANT}


def settings(**values: Any) -> Settings:
    return Settings(DATABASE_URL="postgresql://u@h/db", ARTIFACT_BUCKET="bucket", **values)


def repository(spec: ProvisioningSpec = SPEC, tenant: str = TENANT) -> dict[str, Any]:
    config = objects(spec, tenant)[("ConfigMap", "artifact-repositories")]
    loaded: dict[str, Any] = yaml.safe_load(config["data"]["default-v1"])
    return loaded


# --- the objects ------------------------------------------------------------------------------
def test_every_object_in_apply_order() -> None:
    assert [(o["kind"], o["metadata"]["name"]) for o in tenant_objects(TENANT, SPEC)] == [
        ("Namespace", NAMESPACE),
        ("RoleBinding", "kubeopera-compiler"),
        ("NetworkPolicy", "kubeopera-egress"),
        ("ResourceQuota", "kubeopera-quota"),
        ("LimitRange", "kubeopera-limits"),
        ("ServiceAccount", "kubeopera-workload"),
        ("ServiceAccount", "kubeopera-executor"),
        ("ServiceAccount", "kubeopera-spark"),
        ("ServiceAccount", "kubeopera-training"),
        ("Secret", "kubeopera-executor.service-account-token"),
        ("RoleBinding", "kubeopera-executor"),
        ("RoleBinding", "kubeopera-spark"),
        ("RoleBinding", "kubeopera-training"),
        ("ConfigMap", "artifact-repositories"),
        ("ServiceAccount", "kubeopera-sensor-acme"),
        ("RoleBinding", "kubeopera-sensor"),
    ]


@pytest.mark.parametrize("spec", [SPEC, NO_GPU, BARE], ids=["gpu", "no-gpu", "bare"])
def test_every_object_carries_our_labels_and_lives_in_the_namespace(
    spec: ProvisioningSpec,
) -> None:
    for obj in tenant_objects(TENANT, spec):
        assert obj["metadata"]["labels"].items() >= OURS.items(), obj["kind"]
        if obj["metadata"]["name"] == "kubeopera-sensor-acme":  # the one outside it
            assert obj["metadata"]["namespace"] == "kubeopera-pipeline-events"
        elif obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_the_tenants_sensors_run_as_its_own_account_bound_here_only() -> None:
    account = one("ServiceAccount", "kubeopera-sensor-acme")
    # The sensor pod calls the API (Argo's CLI submits the workflow): its token is mounted.
    assert "automountServiceAccountToken" not in account
    assert one("RoleBinding", "kubeopera-sensor") == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "kubeopera-sensor", "namespace": NAMESPACE, "labels": OURS},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "workflow-manager-tenant-sensor",
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": "kubeopera-sensor-acme",
                "namespace": "kubeopera-pipeline-events",
            }
        ],
    }
    events = dataclasses.replace(SPEC, events_namespace="events")
    assert one("ServiceAccount", "kubeopera-sensor-acme", events)["metadata"]["namespace"] == (
        "events"
    )


@pytest.mark.parametrize("spec", [SPEC, NO_GPU, BARE], ids=["gpu", "no-gpu", "bare"])
def test_every_object_is_valid_against_the_kubernetes_schema(spec: ProvisioningSpec) -> None:
    for obj in tenant_objects(TENANT, spec):
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


def test_the_schema_check_is_strict() -> None:
    policy = copy.deepcopy(one("NetworkPolicy", "kubeopera-egress"))
    policy["spec"]["egres"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(policy, "1.37.0", strict=True)


def test_the_namespace_enforces_baseline_pod_security() -> None:
    namespace = one("Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"] == {
        **OURS,
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    assert "namespace" not in namespace["metadata"]


@pytest.mark.parametrize(
    ("spec", "gpu"), [(SPEC, "4"), (NO_GPU, "0")], ids=["gpu-quota", "zero-forbids-gpus"]
)
def test_the_quota_comes_from_the_spec(spec: ProvisioningSpec, gpu: str) -> None:
    assert one("ResourceQuota", "kubeopera-quota", spec)["spec"] == {
        "hard": {
            "requests.cpu": "8",
            "limits.cpu": "8",
            "requests.memory": "16Gi",
            "limits.memory": "16Gi",
            "pods": "50",
            "requests.nvidia.com/gpu": gpu,
        }
    }


def test_limits_give_defaults_and_the_largest_step() -> None:
    [container] = one("LimitRange", "kubeopera-limits")["spec"]["limits"]
    assert container == {
        "type": "Container",
        "default": {"cpu": "500m", "memory": "512Mi"},
        "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
        "max": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"},
    }


def test_no_gpu_maximum_when_steps_may_not_have_gpus() -> None:
    [container] = one("LimitRange", "kubeopera-limits", NO_GPU)["spec"]["limits"]
    assert container["max"] == {"cpu": "4", "memory": "8Gi"}


def test_no_account_mounts_a_token_by_itself() -> None:
    accounts = [
        o
        for o in tenant_objects(TENANT, SPEC)
        if o["kind"] == "ServiceAccount" and o["metadata"]["namespace"] == NAMESPACE
    ]
    assert len(accounts) == 4
    assert all(account["automountServiceAccountToken"] is False for account in accounts)


def test_argo_finds_the_executor_token_through_the_account() -> None:
    executor = one("ServiceAccount", "kubeopera-executor")
    token_name = executor["metadata"]["annotations"][
        "workflows.argoproj.io/service-account-token.name"
    ]
    token = one("Secret", token_name)
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "kubeopera-executor"
    }
    assert "data" not in token  # the token controller fills it
    assert "annotations" not in one("ServiceAccount", "kubeopera-workload")["metadata"]


@pytest.mark.parametrize(
    ("account", "role"),
    [
        ("kubeopera-executor", "workflow-manager-tenant-executor"),
        ("kubeopera-spark", "workflow-manager-tenant-spark"),
        ("kubeopera-training", "workflow-manager-tenant-training"),
    ],
)
def test_each_api_calling_account_is_bound_to_its_tenant_cluster_role(
    account: str, role: str
) -> None:
    """The rules are the chart's (tests/unit/chart/test_rbac.py evaluates them)."""
    binding = one("RoleBinding", account)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]


def test_no_role_is_created_any_more_and_the_old_ones_are_named_for_removal() -> None:
    assert [name for kind, name in objects() if kind == "Role"] == []
    assert obsolete_objects(TENANT) == [
        ("rbac.authorization.k8s.io/v1", "Role", NAMESPACE, account)
        for account in ("kubeopera-executor", "kubeopera-spark", "kubeopera-training")
    ]


def test_the_compiler_binds_itself_its_own_cluster_role() -> None:
    spec = dataclasses.replace(
        SPEC,
        cluster_role_prefix="wm-tenant-",
        compiler_account="wm-compiler",
        compiler_namespace="platform",
    )
    binding = one("RoleBinding", "kubeopera-compiler", spec)
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "wm-tenant-compiler",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "wm-compiler", "namespace": "platform"}
    ]
    assert one("RoleBinding", "kubeopera-spark", spec)["roleRef"]["name"] == "wm-tenant-spark"


def test_the_workload_account_has_no_role() -> None:
    bindings = [obj for (kind, _), obj in objects().items() if kind == "RoleBinding"]
    subjects = [subject["name"] for obj in bindings for subject in obj["subjects"]]
    assert "kubeopera-workload" not in subjects


def test_the_default_artifact_repository() -> None:
    config = one("ConfigMap", "artifact-repositories")
    assert config["metadata"]["annotations"] == {
        "workflows.argoproj.io/default-artifact-repository": "default-v1"
    }
    assert repository() == {
        "archiveLogs": True,
        "s3": {
            "bucket": "kubeopera-artifacts",
            "endpoint": "s3.eu-north-1.amazonaws.com",
            "region": "eu-north-1",
            "keyFormat": "tenants/acme/artifacts/{{workflow.name}}/{{pod.name}}",
            "accessKeySecret": {"name": "kubeopera-artifact-credentials", "key": "accessKey"},
            "secretKeySecret": {"name": "kubeopera-artifact-credentials", "key": "secretKey"},
        },
    }


@pytest.mark.parametrize("tenant", ["acme", "globex", "a", "t-1"])
def test_artifacts_stay_under_the_tenant_prefix(tenant: str) -> None:
    key_format = repository(tenant=tenant)["s3"]["keyFormat"]
    assert key_format.startswith(f"tenants/{tenant}/artifacts/")


def test_the_repository_is_an_argo_artifact_repository_with_nothing_dropped() -> None:
    models = pytest.importorskip("hera.workflows.models")
    for spec in (SPEC, dataclasses.replace(SPEC, s3_insecure=True)):
        document = repository(spec)
        parsed = models.ArtifactRepository.model_validate(document)
        assert parsed.model_dump(by_alias=True, exclude_none=True) == document


def test_an_insecure_endpoint_is_said_so() -> None:
    assert repository(dataclasses.replace(SPEC, s3_insecure=True))["s3"]["insecure"] is True
    assert "insecure" not in repository()["s3"]


@pytest.mark.parametrize(
    "tenant",
    ["", "Acme", "-acme", "acme-", "a_b", "a.b", "a" * 49, "kube system", "acme/x"],
)
def test_a_malformed_tenant_id_is_refused(tenant: str) -> None:
    with pytest.raises(ValueError, match="tenant id"):
        tenant_objects(tenant, SPEC)


def test_the_longest_tenant_id_still_names_a_namespace() -> None:
    namespace = tenant_namespace("a" * 48)
    assert len(namespace) == 63
    kubernetes_validate.validate(tenant_objects("a" * 48, SPEC)[0], "1.37.0", strict=True)


# --- the spec ---------------------------------------------------------------------------------
def test_from_settings_takes_every_variable() -> None:
    spec = ProvisioningSpec.from_settings(
        settings(
            DATA_NS_QUOTA_CPU="16",
            DATA_NS_QUOTA_MEMORY="64Gi",
            DATA_NS_QUOTA_PODS=80,
            DATA_MAX_CPU="250m",
            DATA_MAX_MEMORY="256Mi",
            ML_MAX_GPU=1,
            ML_NS_QUOTA_GPU=3,
            DATA_EGRESS_PORTS="8443,443,443",
            DATA_EGRESS_EXCEPT_CIDRS="192.168.0.0/16,10.0.0.0/8",
            AWS_REGION="eu-west-1",
            S3_ENDPOINT_URL="http://127.0.0.1:9000",
            MLFLOW_URL="https://mlflow.tracking.svc",
            TENANT_CLUSTER_ROLE_PREFIX="wm-tenant-",
            COMPILER_SERVICE_ACCOUNT="wm-compiler",
            POD_NAMESPACE="platform",
        ),
        api_server_cidrs=("172.18.0.2/32",),
        api_server_ports=(6443,),
    )
    assert spec == ProvisioningSpec(
        quota_cpu="16",
        quota_memory="64Gi",
        quota_pods=80,
        quota_gpu=3,
        max_cpu="250m",
        max_memory="256Mi",
        max_gpu=1,
        egress_ports=(443, 8443),
        egress_except_cidrs=("10.0.0.0/8", "192.168.0.0/16"),
        artifact_bucket="bucket",
        region="eu-west-1",
        s3_endpoint="127.0.0.1:9000",
        s3_insecure=True,
        tracking_host="mlflow.tracking.svc",
        tracking_port=443,
        api_server_cidrs=("172.18.0.2/32",),
        api_server_ports=(6443,),
        # the defaults are kept within the largest step
        default_cpu="250m",
        default_memory="256Mi",
        default_request_cpu="100m",
        default_request_memory="128Mi",
        cluster_role_prefix="wm-tenant-",
        compiler_account="wm-compiler",
        compiler_namespace="platform",
    )


def test_from_settings_defaults() -> None:
    spec = ProvisioningSpec.from_settings(settings())
    assert (spec.quota_cpu, spec.quota_memory, spec.quota_pods, spec.quota_gpu) == (
        "8",
        "16Gi",
        50,
        0,
    )
    assert (spec.max_cpu, spec.max_memory, spec.max_gpu) == ("4", "8Gi", 0)
    assert spec.egress_ports == (443,)
    assert spec.egress_except_cidrs == ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
    assert (spec.s3_endpoint, spec.s3_insecure) == ("s3.eu-north-1.amazonaws.com", False)
    assert (spec.tracking_host, spec.tracking_port) == (None, None)
    assert (spec.default_cpu, spec.default_memory) == ("500m", "512Mi")
    assert (spec.cluster_role_prefix, spec.compiler_account, spec.compiler_namespace) == (
        "workflow-manager-tenant-",
        "workflow-manager-compiler",
        "workflow-manager",
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ARTIFACT_BUCKET": None}, "ARTIFACT_BUCKET"),
        ({"DATA_MAX_CPU": "16"}, "max_cpu"),
        ({"DATA_MAX_MEMORY": "32Gi"}, "max_memory"),
        ({"DATA_MAX_CPU": "four"}, "CPU quantity"),
        ({"DATA_NS_QUOTA_MEMORY": "lots"}, "memory quantity"),
        ({"ML_MAX_GPU": 2, "ML_NS_QUOTA_GPU": 1}, "max_gpu"),
        ({"DATA_EGRESS_EXCEPT_CIDRS": "10.0.0.1/8"}, "host bits"),
        ({"DATA_EGRESS_EXCEPT_CIDRS": "not-a-cidr"}, "does not appear"),
        ({"DATA_EGRESS_PORTS": "0"}, "ports are between"),
        ({"S3_ENDPOINT_URL": "ftp://x"}, "S3_ENDPOINT_URL"),
        ({"MLFLOW_URL": "mlflow:5000"}, "MLFLOW_URL"),
        ({"MLFLOW_URL": "http://mlflow:99999"}, "MLFLOW_URL"),
    ],
)
def test_an_inconsistent_configuration_is_a_config_error(
    values: dict[str, Any], message: str
) -> None:
    base: dict[str, Any] = {"DATABASE_URL": "postgresql://u@h/db", "ARTIFACT_BUCKET": "bucket"}
    with pytest.raises(ConfigError, match=message):
        ProvisioningSpec.from_settings(Settings(**{**base, **values}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"default_cpu": "8"}, "default_cpu .* at most max_cpu"),
        ({"default_request_memory": "1Gi"}, "default_request_memory .* at most default_memory"),
        ({"quota_pods": 0}, "quota_pods is at least 1"),
        ({"api_server_ports": ()}, "needs api_server_ports"),
        ({"tracking_port": None}, "go together"),
        ({"artifact_bucket": ""}, "required"),
        ({"api_server_ports": (70000,)}, "ports are between"),
        ({"cluster_role_prefix": ""}, "cluster_role_prefix, .* are required"),
        ({"compiler_account": ""}, "compiler_account, .* are required"),
        ({"events_namespace": ""}, "events_namespace are required"),
    ],
)
def test_an_inconsistent_spec_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SPEC, **change)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (None, ("s3.eu-north-1.amazonaws.com", False)),
        ("https://minio.storage.svc:9000", ("minio.storage.svc:9000", False)),
        ("http://127.0.0.1:5000/", ("127.0.0.1:5000", True)),
        ("https://s3.example.com", ("s3.example.com", False)),
        ("http://[::1]:9000", ("[::1]:9000", True)),
        ("https://user:pw@s3.example.com", ("s3.example.com", False)),
    ],
)
def test_the_s3_endpoint(url: str | None, expected: tuple[str, bool]) -> None:
    assert s3_endpoint(url, "eu-north-1") == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (None, (None, None)),
        ("http://mlflow.t.svc:5000", ("mlflow.t.svc", 5000)),
        ("https://mlflow.example.com", ("mlflow.example.com", 443)),
        ("http://mlflow.example.com/path", ("mlflow.example.com", 80)),
    ],
)
def test_the_tracking_server(url: str | None, expected: tuple[str | None, int | None]) -> None:
    assert tracking_server(url) == expected


# --- the hash ---------------------------------------------------------------------------------
def test_the_hash_is_a_stable_sha256() -> None:
    digest = spec_hash(SPEC)
    assert len(digest) == 64
    assert int(digest, 16) >= 0
    assert digest == spec_hash(dataclasses.replace(SPEC))
    assert SPEC_SCHEMA_VERSION >= 1


@pytest.mark.parametrize(
    "change",
    [
        {"quota_cpu": "9"},
        {"quota_memory": "17Gi"},
        {"quota_pods": 51},
        {"quota_gpu": 5},
        {"max_cpu": "3"},
        {"max_memory": "7Gi"},
        {"max_gpu": 1},
        {"egress_ports": (443, 80)},
        {"egress_except_cidrs": ("10.0.0.0/8",)},
        {"artifact_bucket": "other"},
        {"region": "us-east-1"},
        {"s3_endpoint": "minio:9000"},
        {"s3_insecure": True},
        {"tracking_host": None, "tracking_port": None},
        {"tracking_port": 5001},
        {"api_server_cidrs": ("172.18.0.3/32",)},
        {"api_server_ports": (443,)},
        {"default_cpu": "400m"},
        {"default_memory": "256Mi"},
        {"default_request_cpu": "50m"},
        {"default_request_memory": "64Mi"},
        {"cluster_role_prefix": "wm-tenant-"},
        {"compiler_account": "wm-compiler"},
        {"compiler_namespace": "platform"},
    ],
)
def test_every_field_changes_the_hash(change: dict[str, Any]) -> None:
    assert spec_hash(dataclasses.replace(SPEC, **change)) != spec_hash(SPEC)


def test_the_hash_changes_with_the_schema_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import compiler.tenants.provisioning as provisioning

    before = spec_hash(SPEC)
    monkeypatch.setattr(provisioning, "SPEC_SCHEMA_VERSION", SPEC_SCHEMA_VERSION + 1)
    assert spec_hash(SPEC) != before


_PORTS = st.lists(st.integers(min_value=1, max_value=65535), min_size=1, max_size=6)
_CIDRS = st.lists(
    st.sampled_from(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fd00::/8"]),
    max_size=5,
)


@given(ports=_PORTS, cidrs=_CIDRS, shuffle=st.randoms())
def test_the_hash_ignores_order_and_repetition(
    ports: list[int], cidrs: list[str], shuffle: Any
) -> None:
    one_way = dataclasses.replace(SPEC, egress_ports=tuple(ports), egress_except_cidrs=tuple(cidrs))
    shuffled_ports, shuffled_cidrs = ports * 2, cidrs * 2
    shuffle.shuffle(shuffled_ports)
    shuffle.shuffle(shuffled_cidrs)
    other_way = dataclasses.replace(
        SPEC, egress_ports=tuple(shuffled_ports), egress_except_cidrs=tuple(shuffled_cidrs)
    )
    assert spec_hash(one_way) == spec_hash(other_way)
    assert tenant_objects(TENANT, one_way) == tenant_objects(TENANT, other_way)


@given(a=_PORTS, b=_PORTS)
def test_different_port_sets_hash_differently(a: list[int], b: list[int]) -> None:
    first = dataclasses.replace(SPEC, egress_ports=tuple(a))
    second = dataclasses.replace(SPEC, egress_ports=tuple(b))
    assert (spec_hash(first) == spec_hash(second)) == (set(a) == set(b))
