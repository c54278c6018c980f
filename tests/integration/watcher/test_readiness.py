"""The watcher's /readyz, over HTTP: not ready while a cluster it owns cannot be watched or its
writer cannot commit, naming which; ready again once they recover."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg

from shared.k8s_informer import InformerOptions
from sim.kube.server import start_cluster
from sim.world import World
from tests.integration.faults import CuttableProxy
from tests.integration.watcher.harness import RunningWatcher, dag_workflow, eventually, submit

StartWatcher = Callable[..., Awaitable[RunningWatcher]]


async def test_readyz_names_an_unwatched_cluster_and_a_writer_that_cannot_commit(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool, database_url: str
) -> None:
    host, other = world.clusters
    proxy = CuttableProxy(target_host="127.0.0.1", target_port=5432)
    await proxy.start()
    try:
        dbname = database_url.rpartition("/")[2]
        watcher = await start_watcher(
            DATABASE_URL=f"postgresql://postgres@127.0.0.1:{proxy.port}/{dbname}",
            informer_options=InformerOptions(watch_timeout=5, backoff_max=0.5, unready_after=1.0),
        )
        health = watcher.parts[0].health
        assert health is not None
        url = f"http://127.0.0.1:{health.port}/readyz"
        answers: list[tuple[int, Any]] = []

        async with aiohttp.ClientSession() as http:

            def answering(status: int, check: Callable[[Any], bool] = lambda _: True) -> Any:
                async def probe() -> bool:
                    async with http.get(url) as response:
                        body = await response.json()
                    answers.append((response.status, body))
                    return response.status == status and check(body)

                return probe

            await eventually(answering(200), what="ready")
            assert answers[-1][1]["checks"] == ["informers", "postgresql", "writer"]

            # The API server of a cluster this replica owns goes away.
            await other.running.stop()

            def names_other(body: Any) -> bool:
                return (
                    set(body["failures"]) == {"informers"}
                    and other.id in (body["failures"]["informers"])
                )

            await eventually(answering(503, names_other), what="not ready, naming the cluster")
            assert "not watching for" in answers[-1][1]["failures"]["informers"]
            assert host.id not in answers[-1][1]["failures"]["informers"]
            # Back on the same address: watched again, ready again.
            port = urlsplit(other.url).port
            other.running = await start_cluster(
                other.name, port=port or 0, store=other.store, token=other.running.token
            )
            await eventually(answering(200), what="ready once the cluster answers again")

            # PostgreSQL goes away while runs change: the writer cannot commit them.
            proxy.cut()
            submit(host.store, "argo", dag_workflow("while-away", ticks=1))

            def names_writer(body: Any) -> bool:
                return "commits in a row failed" in body["failures"].get("writer", "")

            await eventually(answering(503, names_writer), what="not ready, naming the writer")
            assert "the database is unavailable" in answers[-1][1]["failures"]["postgresql"]
            proxy.restore()
            await eventually(answering(200), what="ready once the writer commits")

        async def committed() -> bool:
            return bool(await db.fetchval("SELECT count(*) FROM runs WHERE name = 'while-away'"))

        await eventually(committed, what="the run changed while PostgreSQL was away")
    finally:
        await proxy.stop()
