"""Actions, logs and artifacts against simulated clusters with Argo, real PostgreSQL and moto
S3: the apiserver reaches clusters through the registry's kubeconfigs like in production."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from shared.clusters import provisional_host_id
from shared.runs import ClusterRef
from sim.argo.samples import install_samples
from sim.kube.types import ApiError
from sim.world import SimCluster, World, start_world
from tests.integration.apiserver.conftest import ADMIN, Api, AppFactory, add_cluster, headers
from watcher.normalise import normalise

BUCKET = "wm-artifacts"
NS = "kubeopera-data-acme"


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")


@pytest.fixture
async def world(moto_endpoint: str) -> AsyncIterator[World]:
    running = await start_world(
        2,
        tick=0.01,
        autostart=False,
        s3_endpoint=moto_endpoint,
        bucket=BUCKET,
        pod_gc_delay=3600,
    )
    for cluster in running.clusters:
        install_samples(cluster.store, bucket=BUCKET)
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
def cluster(world: World) -> SimCluster:
    return world.clusters[1]


@pytest.fixture
async def api(make_api: AppFactory, world: World, moto_endpoint: str) -> Api:
    return await make_api(
        registry=(world.registry_url, world.registry_key),
        host_kubeconfig=world.host.kubeconfig,
        s3=(moto_endpoint, BUCKET),
    )


def _types(cluster: SimCluster) -> Any:
    return cluster.store.resolve("argoproj.io", "v1alpha1", "workflows")


def submit(cluster: SimCluster, *, fail: bool = False, ns: str = NS, ticks: int = 2) -> str:
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "etl-daily-", "namespace": ns},
        "spec": {
            "workflowTemplateRef": {"name": "etl-daily"},
            "arguments": {
                "parameters": [
                    {"name": "fail", "value": "true" if fail else "false"},
                    {"name": "ticks", "value": str(ticks)},
                ]
            },
        },
    }
    return str(cluster.store.create(_types(cluster), ns, workflow)["metadata"]["name"])


def live(cluster: SimCluster, name: str, ns: str = NS) -> dict[str, Any]:
    return cluster.store.get(_types(cluster), ns, name)


async def sync(api: Api, cluster: SimCluster, name: str, ns: str = NS) -> None:
    """Write the run as the watcher would (normalise + the watcher's store)."""
    await add_cluster(api.pool, cluster.id, region=cluster.region, provider="sim")
    ref = ClusterRef(cluster.id, cluster.name, cluster.region, "sim")
    await api.store.write_batch([normalise(live(cluster, name, ns), ref)])


def run_path(cluster: SimCluster, name: str, ns: str = NS) -> str:
    return f"/api/v1/workflows/{cluster.id}/{ns}/{name}"


async def actions_of(api: Api, cluster: SimCluster, name: str) -> list[dict[str, Any]]:
    _, body = await api.get(run_path(cluster, name))
    return list(body["actions"])


async def test_stop_and_terminate_patch_the_owning_cluster(api: Api, cluster: SimCluster) -> None:
    name = submit(cluster, ticks=50)
    await cluster.argo.step()
    await cluster.argo.step()
    await sync(api, cluster, name)
    response = await api.client.post(run_path(cluster, name) + "/stop", headers=headers())
    assert response.status == 200, await response.text()
    assert live(cluster, name)["spec"]["shutdown"] == "Stop"
    response = await api.client.post(run_path(cluster, name) + "/terminate", headers=headers())
    assert response.status == 200
    assert live(cluster, name)["spec"]["shutdown"] == "Terminate"
    await cluster.argo.run_until_settled()
    response = await api.client.post(run_path(cluster, name) + "/stop", headers=headers())
    assert response.status == 409
    actions = await actions_of(api, cluster, name)
    assert [(a["action"], a["outcome"]) for a in actions] == [
        ("stop", "failed"),
        ("terminate", "succeeded"),
        ("stop", "succeeded"),
    ]
    assert actions[0]["actor"] == "alice@acme"
    assert actions[0]["detail"]["error"] == "conflict"
    # Without workflows.act: 403 naming the permission.
    response = await api.client.post(
        run_path(cluster, name) + "/stop", headers=headers(permissions="workflows.read")
    )
    assert response.status == 403


async def test_retry_in_place_then_resubmit_when_gone(api: Api, cluster: SimCluster) -> None:
    name = submit(cluster, fail=True)
    await cluster.argo.run_until_settled()
    assert live(cluster, name)["status"]["phase"] == "Failed"
    await sync(api, cluster, name)
    response = await api.client.post(run_path(cluster, name) + "/retry", headers=headers())
    body = await response.json()
    assert response.status == 200, body
    assert body["outcome"] == "retried"
    assert body["workflow"]["name"] == name
    assert live(cluster, name)["status"]["phase"] != "Failed"
    # Gone from the cluster: resubmitted from its template with the same parameters.
    cluster.store.delete(_types(cluster), NS, name)
    response = await api.client.post(run_path(cluster, name) + "/retry", headers=headers())
    body = await response.json()
    assert response.status == 200, body
    assert body["outcome"] == "resubmitted"
    assert body["mode"] == "from_template"
    new = live(cluster, body["workflow"]["name"])
    assert new["spec"]["workflowTemplateRef"] == {"name": "etl-daily"}
    params = {p["name"]: p["value"] for p in new["spec"]["arguments"]["parameters"]}
    assert params["fail"] == "true"
    assert params["ticks"] == "2"
    assert new["metadata"]["labels"]["workflows.argoproj.io/resubmitted-from-workflow"] == name


async def test_retry_without_a_template_is_refused_and_recorded(
    api: Api, cluster: SimCluster
) -> None:
    name = submit(cluster, fail=True)
    await cluster.argo.run_until_settled()
    await sync(api, cluster, name)
    cluster.store.delete(_types(cluster), NS, name)
    cluster.store.delete(
        cluster.store.resolve("argoproj.io", "v1alpha1", "workflowtemplates"), NS, "etl-daily"
    )
    response = await api.client.post(run_path(cluster, name) + "/retry", headers=headers())
    body = await response.json()
    assert response.status == 409
    assert body["details"]["reason"] == "template_missing"
    actions = await actions_of(api, cluster, name)
    assert actions[0]["outcome"] == "failed"


async def test_submit_from_a_template(api: Api, cluster: SimCluster) -> None:
    await add_cluster(api.pool, cluster.id)
    path = f"/api/v1/workflow-templates/{cluster.id}/{NS}/etl-daily/submit"
    response = await api.client.post(
        path, headers=headers(), json={"parameters": {"date": "2025-02-02", "ticks": 1}}
    )
    body = await response.json()
    assert response.status == 201, body
    created = live(cluster, body["workflow"]["name"])
    params = {p["name"]: p["value"] for p in created["spec"]["arguments"]["parameters"]}
    assert params == {"date": "2025-02-02", "ticks": "1"}
    response = await api.client.post(
        f"/api/v1/workflow-templates/{cluster.id}/{NS}/nope/submit", headers=headers(), json={}
    )
    assert response.status == 404
    response = await api.client.post(
        f"/api/v1/workflow-templates/{cluster.id}/kubeopera-data-globex/etl-daily/submit",
        headers=headers(),
        json={},
    )
    assert response.status == 404  # another tenant's namespace: indistinguishable from none
    response = await api.client.post(path, headers=headers(), json={"parameters": [1]})
    assert response.status == 400
    response = await api.client.post(
        f"/api/v1/workflow-templates/nope/{NS}/etl-daily/submit", headers=headers(), json={}
    )
    assert response.status == 404


async def test_a_tenant_run_submitted_on_the_host_runs_on_the_data_controller(
    api: Api, world: World
) -> None:
    host = world.host
    host_id = provisional_host_id(host.kube_system_uid)  # unregistered: known by its identity
    await add_cluster(api.pool, host_id, provider="sim", is_host=True)
    path = f"/api/v1/workflow-templates/{host_id}/{NS}/etl-daily/submit"
    response = await api.client.post(path, headers=headers(), json={"parameters": {"ticks": 1}})
    body = await response.json()
    assert response.status == 201, body
    name = body["workflow"]["name"]
    labels = live(host, name)["metadata"]["labels"]
    assert labels["workflows.argoproj.io/controller-instanceid"] == "kubeopera-data"
    # The CI/CD controller finishes a workflow created after it, and has passed over it.
    later = submit(host, ns="argo", ticks=1)
    await host.argo.run_until_settled()
    assert live(host, later, "argo")["status"]["phase"] == "Succeeded"
    assert "status" not in live(host, name)
    assert host.data_argo is not None
    await host.data_argo.run_until_settled()
    assert live(host, name)["status"]["phase"] == "Succeeded"


async def finished_run_and_extract_node(api: Api, cluster: SimCluster) -> tuple[str, Any]:
    """A sample workflow run to its end and recorded; its name and its ``extract`` node."""
    name = submit(cluster)
    await cluster.argo.run_until_settled()
    await sync(api, cluster, name)
    _, run = await api.get(run_path(cluster, name))
    return name, next(n for n in run["graph"]["nodes"] if n.get("displayName") == "extract")


async def test_logs_from_the_pod_then_the_archive_and_artifacts(
    api: Api, cluster: SimCluster
) -> None:
    name, extract = await finished_run_and_extract_node(api, cluster)
    response = await api.client.get(
        run_path(cluster, name) + f"/logs/{extract['id']}", headers=headers()
    )
    text = await response.text()
    assert response.status == 200
    assert response.headers["X-Log-Source"] == "pod"
    assert "extracting 2024-01-01" in text
    follow = await api.client.get(
        run_path(cluster, name) + f"/logs/{extract['id']}",
        headers=headers(),
        params={"follow": "true"},
    )
    assert "extracting" in await follow.text()  # the step ended: the stream ends
    # Pod garbage-collected: the archived log from object storage.
    cluster.store.delete(cluster.store.resolve("", "v1", "pods"), NS, extract["podName"])
    response = await api.client.get(
        run_path(cluster, name) + f"/logs/{extract['id']}", headers=headers()
    )
    assert response.status == 200
    assert response.headers["X-Log-Source"] == "archive"
    assert "extracting 2024-01-01" in await response.text()
    # The artifact, streamed with its length.
    response = await api.client.get(
        run_path(cluster, name) + f"/artifacts/{extract['id']}/raw", headers=headers()
    )
    data = await response.read()
    assert response.status == 200, data
    assert data.startswith(b"simulated artifact raw")
    assert int(response.headers["Content-Length"]) == len(data)
    for bad in (f"/artifacts/{extract['id']}/nope", "/artifacts/no-node/raw", "/logs/no-node"):
        response = await api.client.get(run_path(cluster, name) + bad, headers=headers())
        assert response.status == 404, bad


async def test_streamed_logs_and_artifacts_carry_the_request_id(
    api: Api, cluster: SimCluster
) -> None:
    name, extract = await finished_run_and_extract_node(api, cluster)
    for suffix, params in (
        (f"/logs/{extract['id']}", {"follow": "true"}),
        (f"/logs/{extract['id']}", {}),
        (f"/artifacts/{extract['id']}/raw", {}),
    ):
        response = await api.client.get(
            run_path(cluster, name) + suffix,
            headers={**headers(), "X-Request-Id": f"req{suffix}"},
            params=params,
        )
        await response.read()
        assert response.status == 200, suffix
        assert response.headers["X-Request-Id"] == f"req{suffix}", suffix


async def test_an_unreachable_cluster_is_503(api: Api, world: World, cluster: SimCluster) -> None:
    name = submit(cluster, ticks=50)
    await cluster.argo.step()
    await sync(api, cluster, name)
    world.unregister(cluster)
    await api.services.connections.invalidate()
    response = await api.client.post(run_path(cluster, name) + "/stop", headers=headers())
    assert response.status == 503
    assert (await response.json())["error"] == "dependency_unavailable"
    _, body = await api.get(run_path(cluster, name), as_=ADMIN)
    assert body["actions"][0]["outcome"] == "failed"


async def test_artifact_outside_the_namespace_prefix_is_refused(
    api: Api, cluster: SimCluster
) -> None:
    name = submit(cluster)
    await cluster.argo.run_until_settled()
    workflow = live(cluster, name)
    for node in workflow["status"]["nodes"].values():
        for artifact in (node.get("outputs") or {}).get("artifacts") or []:
            artifact["s3"] = {"key": "kubeopera-data-globex/secret.csv"}
    await add_cluster(api.pool, cluster.id)
    ref = ClusterRef(cluster.id, cluster.name, cluster.region, "sim")
    await api.store.write_batch([normalise(workflow, ref)])
    _, run = await api.get(run_path(cluster, name))
    extract = next(n for n in run["graph"]["nodes"] if n.get("displayName") == "extract")
    response = await api.client.get(
        run_path(cluster, name) + f"/artifacts/{extract['id']}/raw", headers=headers()
    )
    assert response.status == 403
    assert (await response.json())["details"]["reason"] == "outside_prefix"


_ = ApiError
