"""The live stream across replicas and over time: a resume point a replica never saw comes from
the change log, and a busy stream still follows its tenant's grants."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integration.apiserver.conftest import AppFactory, headers, record
from tests.integration.apiserver.sse import events


async def test_a_replica_started_later_resumes_from_the_change_log(make_api: AppFactory) -> None:
    first = await make_api()
    await first.hub.started.wait()
    await first.write(record("before-1"))
    await first.write(record("before-g", tenant="globex"), record("before-2"))
    await first.write(record("before-3"))
    seqs = dict(await first.pool.fetch("SELECT name, seq FROM run_changes"))
    later = await make_api()  # its memory starts after every change above
    await later.hub.started.wait()
    h = {**headers("acme"), "Last-Event-ID": str(seqs["before-1"])}
    async with later.client.get("/api/v1/workflows/stream", headers=h) as response:
        stream = events(response)
        got = [await asyncio.wait_for(anext(stream), 5) for _ in range(2)]
        await later.write(record("after"))
        got.append(await asyncio.wait_for(anext(stream), 5))
    assert [e.data["name"] for e in got] == ["before-2", "before-3", "after"]
    assert [e.id for e in got] == sorted(e.id for e in got)


async def test_a_busy_stream_follows_a_new_grant(make_api: AppFactory) -> None:
    api = await make_api(heartbeat=0.2)
    await api.hub.started.wait()
    got: list[Any] = []
    async with api.client.get("/api/v1/workflows/stream", headers=headers("acme")) as response:
        stream = events(response)
        await anext(stream)  # ready
        await api.write(record("g-0", tenant="globex"))  # not acme's: not sent
        await api.pool.execute(
            "INSERT INTO access_grants (tenant, cluster_id, namespace, granted_by) "
            "VALUES ('acme', 'c1', 'kubeopera-data-globex', 'test')"
        )
        deadline = asyncio.get_running_loop().time() + 10
        i = 0
        while not any(name.startswith("g-") for name in got):
            assert asyncio.get_running_loop().time() < deadline, got[-5:]
            i += 1  # never silent long enough for a heartbeat
            await api.write(record(f"g-{i}", tenant="globex"))
            await api.write(record(f"a-{i}"))
            while True:
                name = (await asyncio.wait_for(anext(stream), 5)).data["name"]
                got.append(name)
                if name == f"a-{i}":
                    break
    assert "g-0" not in got  # before the grant
    assert got[-2:] == [f"g-{i}", f"a-{i}"]  # the grant applied, mid-stream
