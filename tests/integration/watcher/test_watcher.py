"""The watcher end to end: simulated clusters with Argo → informers → PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import trustme
from structlog.testing import capture_logs

from sim.kube.server import kubeconfig_yaml
from sim.world import World
from tests.integration.faults import CuttableProxy
from tests.integration.watcher.harness import (
    RunningWatcher,
    cluster_state,
    dag_workflow,
    db_state,
    eventually,
    submit,
    workflows,
)

StartWatcher = Callable[..., Awaitable[RunningWatcher]]
TENANT_NS = "kubeopera-data-acme"


async def notify_refresh(pool: asyncpg.Pool) -> None:
    await pool.execute("NOTIFY cluster_refresh")


async def host_id(pool: asyncpg.Pool) -> str:
    value: str = await pool.fetchval("SELECT id FROM clusters WHERE is_host")
    return value


async def test_runs_appear_progress_and_finish_on_two_clusters(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool
) -> None:
    host, other = world.clusters
    await start_watcher()
    submit(host.store, TENANT_NS, dag_workflow("nightly-etl"))
    submit(other.store, "argo", dag_workflow("broken", fail=True))

    async def finished() -> bool:
        rows = await db.fetch("SELECT name, phase FROM runs WHERE finished_at IS NOT NULL")
        return {(r["name"], r["phase"]) for r in rows} == {
            ("nightly-etl", "Succeeded"),
            ("broken", "Failed"),
        }

    await eventually(finished, what="both runs finished in PostgreSQL")
    run = await db.fetchrow("SELECT * FROM runs WHERE name = 'nightly-etl'")
    assert run["tenant"] == "acme"
    assert run["cluster_id"] == await host_id(db)
    assert run["parameters"] == {"day": "2026-12-02"}
    assert run["progress_done"] == run["progress_total"] == 2
    assert run["node_count"] >= 3
    other_run = await db.fetchrow("SELECT * FROM runs WHERE name = 'broken'")
    assert other_run["cluster_id"] == other.id
    assert other_run["region"] == other.region
    assert other_run["tenant"] is None
    # Every phase the run went through was published as a change, in order.
    phases = [
        r["phase"]
        for r in await db.fetch(
            "SELECT phase FROM run_changes WHERE name = 'nightly-etl' ORDER BY seq"
        )
    ]
    assert "Running" in phases
    assert phases[-1] == "Succeeded"
    assert phases.index("Running") < phases.index("Succeeded")


async def test_deleted_workflow_keeps_its_history(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool
) -> None:
    host = world.host
    await start_watcher()
    submit(host.store, TENANT_NS, dag_workflow("short-lived", ticks=1))

    async def finished() -> bool:
        phase = await db.fetchval("SELECT phase FROM runs WHERE name = 'short-lived'")
        return phase == "Succeeded"

    await eventually(finished, what="run finished")
    host.store.delete(workflows(host.store), TENANT_NS, "short-lived")

    async def gone() -> bool:
        return bool(
            await db.fetchval("SELECT deleted_at IS NOT NULL FROM runs WHERE name='short-lived'")
        )

    await eventually(gone, what="run marked gone from its cluster")
    row = await db.fetchrow("SELECT phase, node_count FROM runs WHERE name = 'short-lived'")
    assert row["phase"] == "Succeeded"
    assert row["node_count"] >= 3
    kinds = await db.fetch("SELECT kind FROM run_changes WHERE name = 'short-lived' ORDER BY seq")
    assert kinds[-1]["kind"] == "deleted"


async def test_clusters_added_and_removed_live(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool
) -> None:
    host, other = world.clusters
    world.unregister(other)
    await start_watcher(informing=1)
    submit(other.store, "argo", dag_workflow("before-registration", ticks=1))
    submit(host.store, TENANT_NS, dag_workflow("on-host", ticks=1))

    async def host_seen() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM runs WHERE name = 'on-host'"))

    await eventually(host_seen, what="host run ingested")
    assert await db.fetchval("SELECT count(*) FROM runs WHERE cluster_id = $1", other.id) == 0

    world.register(other)
    await notify_refresh(db)

    async def other_seen() -> bool:
        return bool(
            await db.fetchval(
                "SELECT count(*) FROM runs WHERE cluster_id = $1 AND phase = 'Succeeded'",
                other.id,
            )
        )

    await eventually(other_seen, what="the added cluster's run ingested")

    world.unregister(other)
    await notify_refresh(db)

    async def removed() -> bool:
        return bool(
            await db.fetchval("SELECT removed_at IS NOT NULL FROM clusters WHERE id = $1", other.id)
        )

    await eventually(removed, what="cluster marked removed")
    await asyncio.sleep(0.5)  # let a stopped informer prove it is stopped
    submit(other.store, "argo", dag_workflow("after-removal", ticks=1))
    await asyncio.sleep(1.0)
    assert await db.fetchval("SELECT count(*) FROM runs WHERE name = 'after-removal'") == 0
    # History stays.
    assert await db.fetchval("SELECT count(*) FROM runs WHERE cluster_id = $1", other.id) == 1


async def test_host_adopts_its_registered_identity_with_its_history(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool
) -> None:
    host = world.host
    await start_watcher()
    for index in range(3):
        submit(host.store, TENANT_NS, dag_workflow(f"host-run-{index}", ticks=1))

    async def ingested() -> bool:
        return await db.fetchval("SELECT count(*) FROM runs WHERE phase = 'Succeeded'") == 3

    await eventually(ingested, what="host runs ingested")
    provisional = await host_id(db)
    assert provisional == f"host-{host.kube_system_uid}"
    before = await db.fetch("SELECT id, uid FROM runs ORDER BY id")

    world.register(host)  # listed with a null kubeconfig, like production
    await notify_refresh(db)

    async def adopted() -> bool:
        return await host_id(db) == host.id

    await eventually(adopted, what="registered identity adopted")
    submit(host.store, TENANT_NS, dag_workflow("after-adoption", ticks=1))

    async def new_run_under_new_id() -> bool:
        return bool(
            await db.fetchval(
                "SELECT count(*) FROM runs WHERE name = 'after-adoption' AND cluster_id = $1",
                host.id,
            )
        )

    await eventually(new_run_under_new_id, what="new run under the registered id")
    after = await db.fetch("SELECT id, uid, cluster_id, region FROM runs ORDER BY id")
    assert [(r["id"], r["uid"]) for r in after[:3]] == [(r["id"], r["uid"]) for r in before]
    assert {r["cluster_id"] for r in after} == {host.id}
    assert {r["region"] for r in after} == {host.region}
    assert await db.fetchval("SELECT count(*) FROM clusters WHERE id LIKE 'host-%'") == 0
    assert len(after) == 4  # no duplicate, no loss


async def test_leader_killed_mid_stream_other_replica_takes_over(
    world: World,
    start_watcher: StartWatcher,
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
) -> None:
    """Replica A is a real process, SIGKILLed while runs stream in: it releases nothing, its
    Leases must expire, and replica B then informs on every cluster; nothing is lost."""
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(world.host.kubeconfig)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "HOST_KUBECONFIG": str(kubeconfig),
        "KUBEOPERA_API_BASE_URL": world.registry_url,
        "KUBEOPERA_API_INTERNAL_KEY": world.registry_key,
        "POD_NAME": "replica-a",
        "LEASE_DURATION": "2",
        "LEASE_RENEW_PERIOD": "0.5",
        "HEALTH_PORT": "0",
        "LOG_LEVEL": "warning",
    }
    replica_a = await asyncio.create_subprocess_exec(sys.executable, "-m", "watcher", env=env)
    try:

        async def a_holds_every_cluster() -> bool:
            return cluster_leases(world).count("replica-a") == len(world.clusters)

        await eventually(a_holds_every_cluster, within=30, what="replica A leading every cluster")
        second = await start_watcher("replica-b", informing=None)
        stream = asyncio.create_task(_stream_of_runs(world, count=15, prefix="mid"))
        await asyncio.sleep(0.5)
        assert "replica-a" in cluster_leases(world)  # killed while leading: leases must expire
        replica_a.kill()  # SIGKILL: no release, no goodbye
        await replica_a.wait()
        await stream
    finally:
        if replica_a.returncode is None:
            replica_a.kill()
            await replica_a.wait()

    async def b_informs_on_every_cluster() -> bool:
        return second.informing() == len(world.clusters)

    await eventually(b_informs_on_every_cluster, within=30, what="replica B took every cluster")
    assert cluster_leases(world).count("replica-b") == len(world.clusters)

    async def converged() -> bool:
        for cluster in world.clusters:
            cluster_id = await db.fetchval(
                "SELECT id FROM clusters WHERE kube_system_uid = $1 OR id = $2",
                cluster.kube_system_uid,
                cluster.id,
            )
            if cluster_state(cluster.store) != await db_state(db, cluster_id):
                return False
        return all(
            phase in ("Succeeded", "Failed")
            for cluster in world.clusters
            for _, phase in cluster_state(cluster.store).values()
        )

    await eventually(converged, within=40, what="PostgreSQL equal to every cluster")


def cluster_leases(world: World) -> list[str]:
    """Holders of the per-cluster watcher Leases on the host."""
    store = world.host.store
    leases, _ = store.list(store.resolve("coordination.k8s.io", "v1", "leases"), "workflow-manager")
    return [
        (lease.get("spec") or {}).get("holderIdentity") or ""
        for lease in leases
        if (lease.get("metadata", {}).get("labels") or {}).get("workflow-manager.io/lease-role")
        == "shard"
    ]


async def test_postgresql_outage_during_ingest_loses_nothing(
    world: World,
    start_watcher: StartWatcher,
    db: asyncpg.Pool,
    database_url: str,
) -> None:
    proxy = CuttableProxy(target_host="127.0.0.1", target_port=5432)
    await proxy.start()
    try:
        dbname = database_url.rpartition("/")[2]
        proxied = f"postgresql://postgres@127.0.0.1:{proxy.port}/{dbname}"
        await start_watcher(DATABASE_URL=proxied)
        await _stream_of_runs(world, count=5, prefix="pre")
        proxy.cut()
        await _stream_of_runs(world, count=10, prefix="during")
        await asyncio.sleep(2.0)  # runs progress and finish while PostgreSQL is away
        proxy.restore()

        async def converged() -> bool:
            for cluster in world.clusters:
                cid = await db.fetchval(
                    "SELECT id FROM clusters WHERE kube_system_uid = $1 OR id = $2",
                    cluster.kube_system_uid,
                    cluster.id,
                )
                state = cluster_state(cluster.store)
                if any(p not in ("Succeeded", "Failed") for _, p in state.values()):
                    return False
                if state != await db_state(db, cid):
                    return False
            return True

        await eventually(converged, within=40, what="every run committed after the outage")
    finally:
        await proxy.stop()


async def _stream_of_runs(world: World, *, count: int, prefix: str) -> None:
    for index in range(count):
        cluster = world.clusters[index % len(world.clusters)]
        namespace = TENANT_NS if index % 2 else "argo"
        workflow: dict[str, Any] = dag_workflow(f"{prefix}-{index}", fail=index % 5 == 0, ticks=2)
        submit(cluster.store, namespace, workflow)
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("page_size", [3, 500])
async def test_relist_after_410_loses_nothing_and_invents_nothing(
    world: World, page_size: int
) -> None:
    from kubernetes_asyncio.config import new_client_from_config_dict

    from shared.k8s_informer import (
        ChangeQueue,
        Deleted,
        InformerOptions,
        Seen,
        WorkflowInformer,
    )
    from shared.runs import ClusterRef

    host = world.host
    for index in range(7):
        submit(host.store, TENANT_NS, dag_workflow(f"wf-{index}", ticks=1))

    async def settled() -> bool:
        phases = [p for _, p in (cluster_state(host.store)).values()]
        return all(p == "Succeeded" for p in phases)

    await eventually(settled, what="sample runs finished")
    host.store.delete(workflows(host.store), TENANT_NS, "wf-3")
    host.store.compact()  # every older resourceVersion now answers 410
    queue = ChangeQueue()
    informer = WorkflowInformer(
        cluster=ClusterRef("c", "host"),
        api_client=await new_client_from_config_dict(host.running.kubeconfig_dict),
        queue=queue,
        known={
            (TENANT_NS, "wf-3"): Seen("uid-of-deleted", 1),
            (TENANT_NS, "ghost"): Seen("uid-of-ghost", 2),
        },
        options=InformerOptions(page_size=page_size, watch_timeout=2),
    )
    informer.state.resource_version = "1"
    task = asyncio.create_task(informer.run())
    try:

        async def relisted() -> bool:
            return informer.state.synced

        await eventually(relisted, what="relist after 410")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await informer.api_client.close()
    batch = {key: pending.value for key, pending in queue.take(1000)}
    present = {
        (w["metadata"]["name"], w["metadata"]["uid"])
        for w in host.store.list(workflows(host.store), TENANT_NS)[0]
    }
    updates = {(k[2], k[3]) for k, v in batch.items() if not isinstance(v, Deleted)}
    deletions = {(k[2], k[3]) for k, v in batch.items() if isinstance(v, Deleted)}
    assert updates == present  # nothing lost, nothing invented
    assert deletions == {("wf-3", "uid-of-deleted"), ("ghost", "uid-of-ghost")}


async def test_metrics_follow_ingest(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool
) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    await start_watcher()
    cluster_id = world.clusters[1].id
    events_before = sample("wm_watcher_events_total", cluster=cluster_id, type="ADDED")
    lag_before = sample("wm_watcher_lag_seconds_count")
    argo_lag_before = sample("wm_watcher_argo_lag_seconds_count")
    argo_lag_sum_before = sample("wm_watcher_argo_lag_seconds_sum")
    commits_before = sample("wm_watcher_upsert_seconds_count")
    submit(world.clusters[1].store, "argo", dag_workflow("measured", ticks=1))

    async def done() -> bool:
        return await db.fetchval("SELECT phase FROM runs WHERE name = 'measured'") == "Succeeded"

    await eventually(done, what="run finished")
    assert sample("wm_watcher_events_total", cluster=cluster_id, type="ADDED") > events_before
    assert sample("wm_watcher_events_total", cluster=cluster_id, type="MODIFIED") > 0
    assert sample("wm_watcher_lag_seconds_count") > lag_before
    # Argo's times are whole seconds: each change is committed within a few of them.
    argo_lags = sample("wm_watcher_argo_lag_seconds_count") - argo_lag_before
    assert argo_lags > 0
    mean = (sample("wm_watcher_argo_lag_seconds_sum") - argo_lag_sum_before) / argo_lags
    assert mean < 5
    assert sample("wm_watcher_upsert_seconds_count") > commits_before
    assert sample("wm_watcher_relists_total", cluster=cluster_id) >= 1
    assert sample("wm_watcher_clusters_watched") == 2
    assert sample("wm_watcher_queue_depth") >= 0


async def test_cluster_status_records_argo_and_last_event(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool
) -> None:
    watcher = await start_watcher()
    submit(world.clusters[1].store, "argo", dag_workflow("seen", ticks=1))

    async def seen() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM runs WHERE name = 'seen'"))

    await eventually(seen, what="run ingested")
    await watcher.parts[0].fleet.report_status()
    rows = await db.fetch(
        "SELECT id, argo_reachable, argo_version, last_event_at FROM clusters ORDER BY id"
    )
    assert len(rows) == 2
    assert all(row["argo_reachable"] for row in rows)
    assert all(row["argo_version"] for row in rows)
    other = next(row for row in rows if row["id"] == world.clusters[1].id)
    assert other["last_event_at"] is not None

    # An Argo server that stops answering is recorded as unreachable, not as an error.
    cluster = world.clusters[1]
    cluster.store.register_proxy("argo", "argo-server", "2746", cluster.server.handle)()
    await watcher.parts[0].fleet.report_status()
    reachable = await db.fetchval(
        "SELECT argo_reachable FROM clusters WHERE id = $1", world.clusters[1].id
    )
    assert reachable is False


async def test_a_refused_certificate_is_one_clear_line_per_retry_until_fixed(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool
) -> None:
    other = world.clusters[1]
    untrusted = kubeconfig_yaml(other.name, other.url, other.running.token, ca=trustme.CA())
    world.registry.registry.add(replace(other.record(), kubeconfig=untrusted))
    submit(other.store, "argo", dag_workflow("behind-tls", ticks=1))
    with capture_logs() as captured:
        await start_watcher(informing=1)

        async def retried() -> bool:
            return len(failures(captured, other.id)) >= 2

        await eventually(retried, what="two failed attempts on the cluster with the wrong CA")
    refused = failures(captured, other.id)
    assert {line["error"] for line in refused} == {"certificate_refused"}
    assert refused[0]["reason"].startswith(f"cluster {other.name!r}: the API server's TLS ")
    assert "not signed by a CA the kubeconfig trusts" in refused[0]["reason"]
    assert not [line for line in captured if "exc_info" in line or line["log_level"] == "error"]

    world.register(other)  # the registry now carries the right CA
    await notify_refresh(db)

    async def ingested() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM runs WHERE name = 'behind-tls'"))

    await eventually(ingested, what="the run ingested once the kubeconfig is fixed")


async def test_an_unusable_kubeconfig_is_one_clear_line_not_a_traceback(
    world: World, start_watcher: StartWatcher
) -> None:
    other = world.clusters[1]
    broken = other.kubeconfig.replace(
        "certificate-authority-data: ", "certificate-authority-data: x"
    )
    world.registry.registry.add(replace(other.record(), kubeconfig=broken))
    with capture_logs() as captured:
        await start_watcher(informing=1)

        async def reported() -> bool:
            return any(line["event"] == "cluster_kubeconfig_unusable" for line in captured)

        await eventually(reported, what="the unusable kubeconfig reported")
    line = next(line for line in captured if line["event"] == "cluster_kubeconfig_unusable")
    assert (line["cluster"], line["error"]) == (other.id, "invalid")
    assert (
        line["reason"]
        == f"kubeconfig cluster {other.name!r}: certificate-authority-data is not base64"
    )
    assert not [line for line in captured if "exc_info" in line or line["log_level"] == "error"]


def failures(captured: list[dict[str, Any]], cluster_id: str) -> list[dict[str, Any]]:
    return [
        line
        for line in captured
        if line["event"] == "watch_failed" and line.get("cluster") == cluster_id
    ]
