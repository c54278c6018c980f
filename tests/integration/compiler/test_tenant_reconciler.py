"""The tenant provisioner as the compiler runs it: PostgreSQL records, the sim host cluster and
moto's IAM together. First use provisions everything once; the reconciler repairs drift (a
deleted quota, an edited policy, a lost credentials Secret) and rolls a changed specification
out to every tenant, recording each tenant's applied hash."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import boto3
import pytest
from prometheus_client import REGISTRY

from compiler.tenants.provisioning import ARTIFACT_CREDENTIALS_SECRET
from compiler.tenants.service import TenantProvisioner
from compiler.tenants.storage_users import StorageUsers
from shared.config import Settings
from shared.k8s import client_from_kubeconfig
from shared.k8s_objects import KubeObjects
from sim.kube.server import RunningCluster, start_cluster

BUCKET = "tenant-artifacts"


@dataclass
class Rig:
    cluster: RunningCluster
    pool: asyncpg.Pool
    iam_endpoint: str
    settings: Settings
    objects: KubeObjects

    def provisioner(self, settings: Settings | None = None) -> TenantProvisioner:
        settings = settings or self.settings
        storage = StorageUsers.from_settings(
            settings,
            endpoint_url=self.iam_endpoint,
            access_key_id="test",
            secret_access_key="test",
        )
        return TenantProvisioner(
            pool=self.pool, objects=self.objects, settings=settings, storage=storage
        )

    def get(self, plural: str, namespace: str, name: str, group: str = "") -> dict[str, Any]:
        store = self.cluster.store
        return store.get(store.resolve(group, "v1", plural), namespace, name)

    def delete(self, plural: str, namespace: str, name: str, group: str = "") -> None:
        store = self.cluster.store
        store.delete(store.resolve(group, "v1", plural), namespace, name)

    def key_ids(self, tenant: str) -> list[str]:
        iam = boto3.client(
            "iam",
            endpoint_url=self.iam_endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        user = f"wm-{tenant}"
        keys = iam.list_access_keys(UserName=user)["AccessKeyMetadata"]
        return [key["AccessKeyId"] for key in keys]


@pytest.fixture
async def rig(db: asyncpg.Pool, settings_factory: Any, moto_endpoint: str) -> AsyncIterator[Rig]:
    cluster = await start_cluster("tenants-test")
    # The chart creates the events namespace, where each tenant's sensor account goes.
    namespaces = cluster.store.resolve("", "v1", "namespaces")
    cluster.store.create(namespaces, None, {"metadata": {"name": "kubeopera-pipeline-events"}})
    api = await client_from_kubeconfig(cluster.kubeconfig)
    settings = settings_factory(
        ARTIFACT_BUCKET=BUCKET,
        AWS_REGION="us-east-1",
        ARTIFACT_IAM_USER_PATH="/kubeopera/tenants/",
        ARTIFACT_IAM_USER_PREFIX="wm-",
        ARTIFACT_IAM_BOUNDARY_ARN="arn:aws:iam::123456789012:policy/kubeopera-tenants",
    )
    try:
        yield Rig(cluster, db, moto_endpoint, settings, KubeObjects(api))
    finally:
        await api.close()
        await cluster.stop()


def secret_key_id(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["accessKey"]).decode()


async def test_first_use_provisions_namespace_user_and_key_once(rig: Rig) -> None:
    tenants = rig.provisioner()
    await tenants.ensure("acme")
    row = await rig.pool.fetchrow("SELECT * FROM tenants WHERE id = 'acme'")
    assert row["spec_hash"] == await tenants.spec_hash()
    assert row["storage_user"] == "wm-acme"
    assert row["last_error"] is None
    namespace = "kubeopera-data-acme"
    secret = rig.get("secrets", namespace, ARTIFACT_CREDENTIALS_SECRET)
    assert [secret_key_id(secret)] == rig.key_ids("acme") == [row["storage_key_id"]]
    repository = rig.get("configmaps", namespace, "artifact-repositories")
    assert BUCKET in repository["data"]["default-v1"]
    assert "tenants/acme/artifacts/" in repository["data"]["default-v1"]

    # Known and current: ensure does nothing, a reconcile pass changes nothing.
    await tenants.ensure("acme")
    outcome = await tenants.reconcile("acme")
    assert outcome.key_issued is False
    assert outcome.objects["created"] == outcome.objects["updated"] == 0
    assert rig.key_ids("acme") == [row["storage_key_id"]]


async def test_the_reconciler_repairs_drift_and_a_lost_secret(rig: Rig) -> None:
    tenants = rig.provisioner()
    for tenant in ("acme", "globex"):
        await tenants.ensure(tenant)
    old_key = rig.key_ids("acme")[0]
    rig.delete("resourcequotas", "kubeopera-data-acme", "kubeopera-quota")
    policy = rig.get(
        "networkpolicies", "kubeopera-data-globex", "kubeopera-egress", "networking.k8s.io"
    )
    policy["spec"]["egress"] = [{}]  # allow everything
    store = rig.cluster.store
    store.replace(
        store.resolve("networking.k8s.io", "v1", "networkpolicies"),
        "kubeopera-data-globex",
        "kubeopera-egress",
        policy,
    )
    rig.delete("secrets", "kubeopera-data-acme", ARTIFACT_CREDENTIALS_SECRET)

    outcomes = {outcome.tenant: outcome for outcome in await tenants.reconcile_all()}
    assert outcomes["acme"].objects["created"] == 1  # the quota
    assert outcomes["acme"].key_issued is True
    assert outcomes["globex"].objects["updated"] == 1  # the policy
    assert outcomes["globex"].key_issued is False
    assert rig.get("resourcequotas", "kubeopera-data-acme", "kubeopera-quota")
    repaired = rig.get(
        "networkpolicies", "kubeopera-data-globex", "kubeopera-egress", "networking.k8s.io"
    )
    assert repaired["spec"]["egress"] != [{}]
    # The lost key was replaced, and the old one retired: one key, the one in the Secret.
    secret = rig.get("secrets", "kubeopera-data-acme", ARTIFACT_CREDENTIALS_SECRET)
    assert rig.key_ids("acme") == [secret_key_id(secret)]
    assert secret_key_id(secret) != old_key


async def test_a_changed_specification_rolls_out_to_every_tenant(rig: Rig) -> None:
    before = rig.provisioner()
    for tenant in ("acme", "globex"):
        await before.ensure(tenant)
    old_hash = await before.spec_hash()

    changed = rig.settings.model_copy(update={"DATA_NS_QUOTA_PODS": 80})
    after = rig.provisioner(changed)
    new_hash = await after.spec_hash()
    assert new_hash != old_hash
    await after.reconcile_all()
    for tenant in ("acme", "globex"):
        quota = rig.get("resourcequotas", f"kubeopera-data-{tenant}", "kubeopera-quota")
        assert quota["spec"]["hard"]["pods"] == "80"
        row = await rig.pool.fetchrow("SELECT spec_hash FROM tenants WHERE id = $1", tenant)
        assert row["spec_hash"] == new_hash


async def test_a_failing_tenant_is_recorded_and_does_not_stop_the_others(rig: Rig) -> None:
    tenants = rig.provisioner()
    await tenants.ensure("acme")
    # An id that can never become a namespace (an old row, or one written by hand).
    await rig.pool.execute("INSERT INTO tenants (id) VALUES ('Not_A_Tenant')")
    failed, ok = _reconciles("failed"), _reconciles("ok")
    outcomes = await tenants.reconcile_all()
    assert [outcome.tenant for outcome in outcomes] == ["acme"]
    error = await rig.pool.fetchval("SELECT last_error FROM tenants WHERE id = 'Not_A_Tenant'")
    assert error
    # What the CompilerReconcileFailing alert counts: one failure, one success.
    assert (_reconciles("failed") - failed, _reconciles("ok") - ok) == (1, 1)


def _reconciles(outcome: str) -> float:
    sample = REGISTRY.get_sample_value(
        "wm_compiler_reconciles_total", {"what": "tenant", "outcome": outcome}
    )
    return sample or 0.0
