"""Whole simulated worlds: pod logs archived to S3 (moto) before pod GC, and `python -m sim`
writing kubeconfigs that work."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp
import boto3
from kubernetes_asyncio import client, config

from sim.world import start_world
from tests.integration.sim._argo import (
    NS,
    _client,
    argo,
    create,
    dag_spec,
    drive,
    node_by_display,
    workflow,
)


async def test_logs_archived_to_s3_before_pod_gc(moto_endpoint: str) -> None:
    world = await start_world(
        1, tick=0.01, autostart=False, pod_gc_delay=0, s3_endpoint=moto_endpoint, bucket="logs"
    )
    try:
        host = world.host
        async with await _client(host) as kube:
            name = (await create(kube, workflow(dag_spec())))["metadata"]["name"]
            done = await drive(host, kube, name)
            a = node_by_display(done, "a")
            pod = f"{name}-a-{a['id'].rsplit('-', 1)[1]}"
            key = f"{name}/{pod}/main.log"
            assert {"name": "main-logs", "s3": {"key": key}} in a["outputs"]["artifacts"]
            assert done["status"]["artifactRepositoryRef"]["default"] is True
            for _ in range(3):
                await host.argo.step()
            pods = await client.CoreV1Api(kube).list_namespaced_pod(NS)
            assert pods.items == []
            s3 = boto3.client(
                "s3",
                endpoint_url=moto_endpoint,
                aws_access_key_id="t",
                aws_secret_access_key="t",
                region_name="us-east-1",
            )
            body = s3.get_object(Bucket="logs", Key=key)["Body"].read().decode()
            assert "step-a" in body
            status, text = await argo(
                host,
                "GET",
                f"api/v1/workflows/{NS}/{name}/log?podName={pod}&logOptions.container=main",
            )
            assert (status, text) == (200, "")
    finally:
        await world.stop()


REPO = Path(__file__).resolve().parents[3]


async def test_python_m_sim_writes_working_kubeconfigs(tmp_path: Path, moto_endpoint: str) -> None:
    args = ["-m", "sim", "--clusters", "2", "--state-dir", str(tmp_path), "--tick", "0.05"]
    args += ["--serving", "--s3-endpoint", moto_endpoint, "--bucket", "sim-world"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        ready = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        assert ready.startswith(b"sim world ready"), ready
        described = json.loads((tmp_path / "world.json").read_text())
        assert [c["name"] for c in described["clusters"]] == ["host", "cluster-1"]
        assert [c["registered"] for c in described["clusters"]] == [False, True]
        assert described["argo_data_server"] == {
            "namespace": "kubeopera-argo-data",
            "service": "argo-data-server",
            "port": "2746",
            "instance_id": "kubeopera-data",
            "url": "https://argo-data-server.kubeopera-argo-data.svc:2746",
        }
        for cluster in described["clusters"]:
            api = await config.new_client_from_config(cluster["kubeconfig"])
            async with api:
                core = client.CoreV1Api(api)
                names = {n.metadata.name for n in (await core.list_namespace()).items}
                assert {"kube-system", "default", "argo"} <= names
                kube_system = await core.read_namespace("kube-system")
                assert kube_system.metadata.uid == cluster["kube_system_uid"]
        host = next(c for c in described["clusters"] if c["host"])
        async with await config.new_client_from_config(host["kubeconfig"]) as api:
            # What KNATIVE_GATEWAY names exists on the host, as a Knative install leaves it.
            service = await client.CoreV1Api(api).read_namespaced_service(
                "kourier-internal", "kourier-system"
            )
            assert service.metadata.name == "kourier-internal"
        serving = described["serving"]
        assert serving["knative_gateway"] == "kourier-internal.kourier-system.svc.cluster.local"
        registry = described["registry"]
        async with aiohttp.ClientSession() as session:
            url = f"{registry['url']}/internal/v1/clusters"
            headers = {"X-Internal-Key": registry["key"]}
            async with session.get(url, headers=headers) as response:
                assert [c["name"] for c in await response.json()] == ["cluster-1"]
            # The host's serving gateway answers on its own host, and 404 for an unknown one.
            async with session.get(f"{serving['gateway']}/ready") as response:
                assert (response.status, await response.text()) == (200, "LIVE")
            unknown = {"Host": "nothing-predictor.nowhere.svc.cluster.local"}
            async with session.get(serving["gateway"], headers=unknown) as response:
                assert response.status == 404
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=10) == 0
