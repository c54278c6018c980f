"""Tenant namespace provisioning against the Kubernetes API emulator, through the real client.

Proves the reconciliation is idempotent (a second pass writes nothing) and convergent (drift is
repaired, a changed spec rolls out, each tenant's applied hash is recorded), and that the
generic object client translates the API's answers into shared errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from compiler.tenants.provisioning import ProvisioningSpec, spec_hash, tenant_objects
from compiler.tenants.tenant_objects import applied_hash, discover_api_server, provision_tenant
from shared.errors import Conflict, DependencyDown, Invalid
from shared.k8s import client_from_kubeconfig
from shared.k8s_objects import KubeObjects
from sim.kube.server import RunningCluster, start_cluster
from sim.kube.types import ResourceType

TENANT = "acme"
NAMESPACE = "kubeopera-data-acme"
SPEC = ProvisioningSpec(
    quota_cpu="8",
    quota_memory="16Gi",
    quota_pods=50,
    quota_gpu=2,
    max_cpu="4",
    max_memory="8Gi",
    max_gpu=1,
    egress_ports=(443,),
    egress_except_cidrs=("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    artifact_bucket="kubeopera-artifacts",
    region="eu-north-1",
    s3_endpoint="s3.eu-north-1.amazonaws.com",
    tracking_host="mlflow.kubeopera-mlflow.svc.cluster.local",
    tracking_port=5000,
    api_server_cidrs=("10.96.0.1/32",),
    api_server_ports=(443,),
)
ENDPOINT_SLICES = ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)


def rtype(cluster: RunningCluster, api_version: str, plural: str) -> ResourceType:
    group, _, version = api_version.rpartition("/")
    return cluster.store.resolve(group, version, plural)


@pytest.fixture
async def cluster() -> AsyncIterator[RunningCluster]:
    running = await start_cluster("provisioning-test")
    # The chart creates the events namespace, where each tenant's sensor account goes.
    namespaces = running.store.resolve("", "v1", "namespaces")
    running.store.create(namespaces, None, {"metadata": {"name": SPEC.events_namespace}})
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def objects(cluster: RunningCluster) -> AsyncIterator[KubeObjects]:
    api: ApiClient = await client_from_kubeconfig(cluster.kubeconfig)
    try:
        yield KubeObjects(api)
    finally:
        await api.close()


def live(cluster: RunningCluster, kind: str, name: str) -> dict[str, Any]:
    plurals = {
        "ResourceQuota": ("v1", "resourcequotas"),
        "NetworkPolicy": ("networking.k8s.io/v1", "networkpolicies"),
        "ConfigMap": ("v1", "configmaps"),
        "Secret": ("v1", "secrets"),
        "ServiceAccount": ("v1", "serviceaccounts"),
        "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
        "Role": ("rbac.authorization.k8s.io/v1", "roles"),
    }
    api_version, plural = plurals[kind]
    return cluster.store.get(rtype(cluster, api_version, plural), NAMESPACE, name)


async def test_first_pass_creates_everything_and_records_the_hash(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    desired = tenant_objects(TENANT, SPEC)
    counts = await provision_tenant(objects, TENANT, SPEC)
    assert counts == {"created": len(desired), "updated": 0, "unchanged": 0}
    for obj in desired:
        stored = await objects.get(
            obj["apiVersion"],
            obj["kind"],
            obj["metadata"].get("namespace"),
            obj["metadata"]["name"],
        )
        assert stored is not None, obj["kind"]
        assert stored["metadata"]["labels"]["kubeopera.io/tenant"] == TENANT
    assert await applied_hash(objects, TENANT) == spec_hash(SPEC)
    namespaces = await objects.list(
        "v1", "Namespace", None, label_selector="app.kubernetes.io/managed-by=workflow-manager"
    )
    assert [namespace["metadata"]["name"] for namespace in namespaces] == [NAMESPACE]
    workload = live(cluster, "ServiceAccount", "kubeopera-workload")
    assert workload["automountServiceAccountToken"] is False


async def test_a_second_pass_writes_nothing(cluster: RunningCluster, objects: KubeObjects) -> None:
    await provision_tenant(objects, TENANT, SPEC)
    version = cluster.store.resource_version
    counts = await provision_tenant(objects, TENANT, SPEC)
    assert counts == {"created": 0, "updated": 0, "unchanged": len(tenant_objects(TENANT, SPEC))}
    assert cluster.store.resource_version == version


async def test_drift_is_repaired_and_only_drift(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    await provision_tenant(objects, TENANT, SPEC)
    store = cluster.store
    store.delete(rtype(cluster, "v1", "resourcequotas"), NAMESPACE, "kubeopera-quota")
    policies = rtype(cluster, "networking.k8s.io/v1", "networkpolicies")
    policy = store.get(policies, NAMESPACE, "kubeopera-egress")
    policy["spec"]["egress"] = [{}]  # someone opened all egress
    store.replace(policies, NAMESPACE, "kubeopera-egress", policy)
    configmaps = rtype(cluster, "v1", "configmaps")
    repositories = store.get(configmaps, NAMESPACE, "artifact-repositories")
    repositories["metadata"]["labels"]["team"] = "data"  # a label of someone else's: not drift
    store.replace(configmaps, NAMESPACE, "artifact-repositories", repositories)

    counts = await provision_tenant(objects, TENANT, SPEC)

    assert counts == {
        "created": 1,
        "updated": 1,
        "unchanged": len(tenant_objects(TENANT, SPEC)) - 2,
    }
    desired = {obj["metadata"]["name"]: obj for obj in tenant_objects(TENANT, SPEC)}
    assert (
        live(cluster, "NetworkPolicy", "kubeopera-egress")["spec"]
        == (desired["kubeopera-egress"]["spec"])
    )
    assert live(cluster, "ResourceQuota", "kubeopera-quota")["spec"]["hard"]["pods"] == "50"
    assert live(cluster, "ConfigMap", "artifact-repositories")["metadata"]["labels"]["team"] == (
        "data"
    )


async def test_a_removed_label_of_ours_is_put_back_keeping_the_others(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    await provision_tenant(objects, TENANT, SPEC)
    accounts = rtype(cluster, "v1", "serviceaccounts")
    account = cluster.store.get(accounts, NAMESPACE, "kubeopera-executor")
    del account["metadata"]["labels"]["kubeopera.io/tenant"]
    account["metadata"]["labels"]["extra"] = "kept"
    account["automountServiceAccountToken"] = True
    cluster.store.replace(accounts, NAMESPACE, "kubeopera-executor", account)

    counts = await provision_tenant(objects, TENANT, SPEC)

    assert counts["updated"] == 1
    repaired = live(cluster, "ServiceAccount", "kubeopera-executor")
    assert repaired["metadata"]["labels"]["kubeopera.io/tenant"] == TENANT
    assert repaired["metadata"]["labels"]["extra"] == "kept"
    assert repaired["automountServiceAccountToken"] is False
    assert repaired["metadata"]["uid"] == account["metadata"]["uid"]  # replaced, not recreated


async def test_replacing_keeps_fields_we_do_not_own(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    """The token controller's data on the executor's token Secret survives a repair."""
    await provision_tenant(objects, TENANT, SPEC)
    secrets = rtype(cluster, "v1", "secrets")
    name = "kubeopera-executor.service-account-token"
    token = cluster.store.get(secrets, NAMESPACE, name)
    token["data"] = {"token": "dG9rZW4="}
    del token["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    cluster.store.replace(secrets, NAMESPACE, name, token)

    counts = await provision_tenant(objects, TENANT, SPEC)

    assert counts["updated"] == 1
    repaired = live(cluster, "Secret", name)
    assert repaired["data"] == {"token": "dG9rZW4="}
    assert repaired["metadata"]["annotations"]["kubernetes.io/service-account.name"] == (
        "kubeopera-executor"
    )


async def test_a_changed_spec_updates_what_it_changes_and_the_hash(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    await provision_tenant(objects, TENANT, SPEC)
    larger = dataclasses.replace(SPEC, quota_cpu="16")

    counts = await provision_tenant(objects, TENANT, larger)

    assert counts == {
        "created": 0,
        "updated": 1,
        "unchanged": len(tenant_objects(TENANT, SPEC)) - 1,
    }
    hard = live(cluster, "ResourceQuota", "kubeopera-quota")["spec"]["hard"]
    assert hard["requests.cpu"] == hard["limits.cpu"] == "16"
    assert spec_hash(larger) != spec_hash(SPEC)
    assert await applied_hash(objects, TENANT) == spec_hash(larger)


async def test_a_spec_change_rolls_out_to_every_tenant(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    for tenant in ("acme", "globex"):
        await provision_tenant(objects, tenant, SPEC)
    wider = dataclasses.replace(SPEC, egress_ports=(443, 8443))

    for tenant in ("acme", "globex"):
        counts = await provision_tenant(objects, tenant, wider)
        assert counts["updated"] == 1
        assert await applied_hash(objects, tenant) == spec_hash(wider)
        policy = await objects.get(
            "networking.k8s.io/v1", "NetworkPolicy", f"kubeopera-data-{tenant}", "kubeopera-egress"
        )
        assert policy is not None
        assert policy["spec"]["egress"][-1]["ports"] == [
            {"protocol": "TCP", "port": 443},
            {"protocol": "TCP", "port": 8443},
        ]


async def test_a_malformed_tenant_touches_nothing(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    version = cluster.store.resource_version
    with pytest.raises(ValueError, match="tenant id"):
        await provision_tenant(objects, "Not_A_Tenant", SPEC)
    assert cluster.store.resource_version == version


def schema_1_rbac() -> list[tuple[str, dict[str, Any]]]:
    """(plural, body) of the per-account Roles and bindings that schema 1 created."""
    rules = {
        "kubeopera-executor": [
            {
                "apiGroups": ["argoproj.io"],
                "resources": ["workflowtaskresults"],
                "verbs": ["create"],
            }
        ],
        "kubeopera-spark": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
        "kubeopera-training": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
    }
    labels = {"app.kubernetes.io/managed-by": "workflow-manager", "kubeopera.io/tenant": TENANT}
    objects: list[tuple[str, dict[str, Any]]] = []
    for account, account_rules in rules.items():
        metadata = {"name": account, "labels": labels}
        objects.append(("roles", {"metadata": metadata, "rules": account_rules}))
        binding = {
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
        }
        objects.append(("rolebindings", binding))
    return objects


async def test_a_tenant_of_schema_1_moves_to_the_chart_roles(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    """Upgrade: the accounts' bindings (whose roleRef cannot change in place) are created
    again referring to the chart's ClusterRoles, and the Roles of their own are deleted."""
    store = cluster.store
    store.create(
        rtype(cluster, "v1", "namespaces"),
        None,
        {
            "metadata": {
                "name": NAMESPACE,
                "annotations": {"kubeopera.io/provisioning-spec-hash": "s1"},
            }
        },
    )
    for plural, body in schema_1_rbac():
        store.create(rtype(cluster, "rbac.authorization.k8s.io/v1", plural), NAMESPACE, body)
    old_uid = live(cluster, "RoleBinding", "kubeopera-spark")["metadata"]["uid"]

    await provision_tenant(objects, TENANT, SPEC)

    spark = live(cluster, "RoleBinding", "kubeopera-spark")
    assert spark["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "workflow-manager-tenant-spark",
    }
    assert spark["metadata"]["uid"] != old_uid  # created again: the API refuses the update
    assert live(cluster, "RoleBinding", "kubeopera-compiler")["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "workflow-manager-compiler",
            "namespace": "workflow-manager",
        }
    ]
    roles, _ = store.list(rtype(cluster, "rbac.authorization.k8s.io/v1", "roles"), NAMESPACE)
    assert roles == []
    assert await applied_hash(objects, TENANT) == spec_hash(SPEC)
    version = store.resource_version
    counts = await provision_tenant(objects, TENANT, SPEC)
    assert counts["created"] == counts["updated"] == 0
    assert store.resource_version == version


async def test_a_binding_pointed_at_another_role_is_created_again(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    await provision_tenant(objects, TENANT, SPEC)
    bindings = rtype(cluster, "rbac.authorization.k8s.io/v1", "rolebindings")
    hijacked = live(cluster, "RoleBinding", "kubeopera-executor")
    cluster.store.delete(bindings, NAMESPACE, "kubeopera-executor")
    del hijacked["metadata"]["resourceVersion"], hijacked["metadata"]["uid"]
    hijacked["roleRef"] = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "admin",
    }
    cluster.store.create(bindings, NAMESPACE, hijacked)

    counts = await provision_tenant(objects, TENANT, SPEC)

    assert counts["updated"] == 1
    assert live(cluster, "RoleBinding", "kubeopera-executor")["roleRef"]["name"] == (
        "workflow-manager-tenant-executor"
    )


class LaggingGrant(KubeObjects):
    """The API server's authorizer learns of the compiler's new binding only after ``lag``
    refused requests (as its informer would, a moment later)."""

    def __init__(self, api: ApiClient, lag: int) -> None:
        super().__init__(api)
        self.lag = lag
        self.granted = False

    async def create(self, obj: Any) -> dict[str, Any]:
        created = await super().create(obj)
        if obj["kind"] == "RoleBinding" and obj["metadata"]["name"] == "kubeopera-compiler":
            self.granted = True
        return created

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        if self.granted and namespace == NAMESPACE and kind != "RoleBinding" and self.lag:
            self.lag -= 1
            raise DependencyDown("the cluster refused our credentials", details={"status": 403})
        return await super().get(api_version, kind, namespace, name)


async def test_a_grant_not_yet_in_force_is_waited_for(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    lagging = LaggingGrant(objects._api, lag=3)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    counts = await provision_tenant(lagging, TENANT, SPEC, sleep=sleep)

    assert slept == [0.1, 0.2, 0.4]
    assert counts == {"created": len(tenant_objects(TENANT, SPEC)), "updated": 0, "unchanged": 0}


async def test_a_refusal_is_not_waited_for_when_no_grant_was_made(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    """With its binding in place, a 403 means a missing right: it fails the pass at once."""
    await provision_tenant(objects, TENANT, SPEC)
    lagging = LaggingGrant(objects._api, lag=1)
    lagging.granted = True
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    with pytest.raises(DependencyDown):
        await provision_tenant(
            lagging, TENANT, dataclasses.replace(SPEC, quota_pods=9), sleep=sleep
        )
    assert slept == []


async def test_a_grant_that_never_comes_fails_the_pass(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    lagging = LaggingGrant(objects._api, lag=100)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    with pytest.raises(DependencyDown, match="refused"):
        await provision_tenant(lagging, TENANT, SPEC, sleep=sleep)
    assert slept == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert await applied_hash(objects, TENANT) is None


class RacingObjects(KubeObjects):
    """Someone else writes the object between our read and our write, once."""

    def __init__(self, api: ApiClient, cluster: RunningCluster) -> None:
        super().__init__(api)
        self.cluster = cluster
        self.raced = False

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        found = await super().get(api_version, kind, namespace, name)
        if kind == "ResourceQuota" and not self.raced:
            self.raced = True
            quotas = rtype(self.cluster, "v1", "resourcequotas")
            other = self.cluster.store.get(quotas, namespace, name)
            other["metadata"]["annotations"] = {"touched": "yes"}
            self.cluster.store.replace(quotas, namespace, name, other)
        return found


async def test_a_conflicting_write_is_retried_from_a_fresh_read(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    await provision_tenant(objects, TENANT, SPEC)
    racing = RacingObjects(objects._api, cluster)

    quota = next(
        obj
        for obj in tenant_objects(TENANT, dataclasses.replace(SPEC, quota_pods=9))
        if obj["kind"] == "ResourceQuota"
    )
    outcome = await racing.apply(quota)

    assert racing.raced
    assert outcome == "updated"
    quota = live(cluster, "ResourceQuota", "kubeopera-quota")
    assert quota["spec"]["hard"]["pods"] == "9"
    assert quota["metadata"]["annotations"] == {"touched": "yes"}  # their write was not lost


async def test_the_api_server_is_discovered_from_its_service_and_endpoints(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    services = rtype(cluster, "v1", "services")
    cluster.store.delete(services, "default", "kubernetes")  # the emulator starts with one
    assert await discover_api_server(objects) == ((), ())  # nothing to find: no rule
    cluster.store.register(ENDPOINT_SLICES)
    cluster.store.create(
        services,
        "default",
        {
            "metadata": {"name": "kubernetes"},
            "spec": {
                "clusterIP": "10.96.0.1",
                "clusterIPs": ["10.96.0.1"],
                "ports": [{"name": "https", "port": 443, "protocol": "TCP"}],
            },
        },
    )
    cluster.store.create(
        ENDPOINT_SLICES,
        "default",
        {
            "metadata": {
                "name": "kubernetes",
                "labels": {"kubernetes.io/service-name": "kubernetes"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["172.18.0.3"]}, {"addresses": ["172.18.0.2"]}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        },
    )

    cidrs, ports = await discover_api_server(objects)

    assert cidrs == ("10.96.0.1/32", "172.18.0.2/32", "172.18.0.3/32")
    assert ports == (443, 6443)
    spec = dataclasses.replace(SPEC, api_server_cidrs=cidrs, api_server_ports=ports)
    await provision_tenant(objects, TENANT, spec)
    egress = live(cluster, "NetworkPolicy", "kubeopera-egress")["spec"]["egress"]
    assert {
        "to": [{"ipBlock": {"cidr": cidr}} for cidr in cidrs],
        "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}],
    } in egress


async def test_the_object_client_answers_in_shared_terms(
    cluster: RunningCluster, objects: KubeObjects
) -> None:
    assert await objects.get("v1", "ConfigMap", "default", "missing") is None
    assert await objects.delete("v1", "ConfigMap", "default", "missing") is False
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "one", "namespace": "default", "labels": {"app": "x"}},
        "data": {"k": "v"},
    }
    created = await objects.create(config)
    assert created["metadata"]["uid"]
    with pytest.raises(Conflict):
        await objects.create(config)
    stale = {**created, "data": {"k": "w"}}
    await objects.replace(stale)
    with pytest.raises(Conflict):
        await objects.replace(stale)  # its resourceVersion is now stale
    with pytest.raises(Invalid):
        await objects.create({**config, "metadata": {"name": "Not Valid", "namespace": "default"}})
    for index in range(3):
        await objects.create(
            {**config, "metadata": {"name": f"more-{index}", "namespace": "default"}}
        )
    labelled = await objects.list("v1", "ConfigMap", "default", label_selector="app=x")
    assert [item["metadata"]["name"] for item in labelled] == ["one"]
    assert labelled[0]["kind"] == "ConfigMap"
    assert len(await objects.list("v1", "ConfigMap", "default")) >= 4
    generated = await objects.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"generateName": "run-", "namespace": "default"},
        }
    )
    assert generated["metadata"]["name"].startswith("run-")
    with pytest.raises(ValueError, match=r"metadata\.name or metadata\.generateName"):
        await objects.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert await objects.delete("v1", "ConfigMap", "default", "one") is True
    assert await objects.get("v1", "ConfigMap", "default", "one") is None
