"""The compiler process as it runs (``compiler.runner.run``): the Git poller is spawned under
its own lease (``wm-compiler-git``) and picks a pushed commit up by itself, within
GIT_SYNC_INTERVAL, with no sync asked for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from compiler import runner
from shared.k8s import client_from_kubeconfig
from shared.k8s_objects import KubeObjects
from shared.tasks import Supervisor, run_service
from sim.git_server import GitServer
from sim.ports import free_port
from sim.world import start_world
from tests.integration.compiler.git_stack import allowed, git_body, template, write_credentials
from tests.integration.compiler.pipeline_stack import INTERNAL_KEY


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_the_leader_polls_every_interval_and_a_pushed_commit_becomes_a_version(
    db: asyncpg.Pool,
    settings_factory: Callable[..., Any],
    git_server: GitServer,
    tmp_path: Path,
) -> None:
    world = await start_world(1, tick=0.01, autostart=False, pod_gc_delay=0)
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(world.host.kubeconfig)
    port = free_port()
    settings = settings_factory(
        HOST_KUBECONFIG=str(kubeconfig),
        HTTP_PORT=port,
        HEALTH_PORT=0,
        INTERNAL_API_KEY=INTERNAL_KEY,
        ARTIFACT_BUCKET="artifacts",
        POD_NAME="compiler-a",
        GIT_CA_BUNDLE=str(git_server.ca_file),
        GIT_ALLOW_REMOTES=allowed(git_server),
        GIT_SYNC_INTERVAL=1.0,
    )
    stop = asyncio.Event()

    async def main(workers: Supervisor) -> None:
        await runner.run(settings, workers)

    service = asyncio.create_task(run_service(main, grace=5.0, signals=(), stop=stop))
    first = git_server.create("etl", {"pipelines/etl.yaml": template("1")})
    try:
        kube = await client_from_kubeconfig(world.host.kubeconfig)
        try:
            await write_credentials(KubeObjects(kube))
        finally:
            await kube.close()
        url = f"http://127.0.0.1:{port}/internal/v1/pipelines/data"
        async with aiohttp.ClientSession(headers={"X-Internal-Key": INTERNAL_KEY}) as http:

            async def serving() -> bool:
                try:
                    async with http.post(f"{url}/validate", json={}) as response:
                        return response.status == 400
                except aiohttp.ClientError:
                    return False

            await eventually(serving, within=30, what="the compiler's internal API")
            call = {
                "tenant": "acme",
                "actor": "alice@acme",
                "pipeline": git_body(git_server, "etl"),
            }
            async with http.post(url, json=call) as response:
                saved = await response.json()
                assert response.status == 201, saved
        assert saved["commit"] == first
        second = git_server.commit("etl", {"pipelines/etl.yaml": template("2")})

        async def synced() -> bool:
            commit = await db.fetchval(
                "SELECT commit FROM pipeline_versions WHERE pipeline_id = $1 AND version = 2",
                saved["id"],
            )
            return bool(commit == second)

        await eventually(synced, within=30, what="the poller to record version 2")
        leases = world.host.store
        lease = leases.get(
            leases.resolve("coordination.k8s.io", "v1", "leases"),
            settings.POD_NAMESPACE,
            runner.GIT_LEASE_NAME,
        )
        assert lease["spec"]["holderIdentity"].startswith("compiler-a")
    finally:
        stop.set()
        await asyncio.wait_for(service, 15)
        await world.stop()
