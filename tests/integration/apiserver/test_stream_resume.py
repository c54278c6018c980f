"""The live stream across replicas and over time: a resume point a replica never saw comes from
the change log, and open streams follow their tenant's grants as they change, whichever replica
changed them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from apiserver.stream.hub import Change, ChangeSource
from tests.integration.apiserver.conftest import ADMIN, AppFactory, headers, record
from tests.integration.apiserver.sse import Event, events


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


async def _names_until(stream: AsyncIterator[Event], last: str) -> list[str]:
    """The names of the runs the stream sends, up to and including ``last``."""
    names = []
    while not names or names[-1] != last:
        names.append((await asyncio.wait_for(anext(stream), 5)).data["name"])
    return names


async def test_grants_given_and_revoked_on_one_replica_reach_streams_on_another_at_once(
    make_api: AppFactory,
) -> None:
    streaming = await make_api()  # the default 15 s heartbeat: nothing periodic helps here
    granting = await make_api()
    await streaming.hub.started.wait()
    await granting.write(record("g-0", cluster="c2", tenant="globex"))  # c2 exists
    loop = asyncio.get_running_loop()
    async with streaming.client.get(
        "/api/v1/workflows/stream", headers=headers("acme")
    ) as response:
        stream = events(response)
        await anext(stream)  # ready
        grant = {"tenant": "acme", "cluster_id": "c2", "namespace": "kubeopera-data-globex"}
        given = await granting.client.post("/api/v1/access-grants", headers=ADMIN, json=grant)
        assert given.status == 201
        await streaming.write(record("g-1", cluster="c2", tenant="globex"))
        await streaming.write(record("a-1"))
        assert await _names_until(stream, "a-1") == ["g-1", "a-1"]

        started = loop.time()
        revoked = await granting.client.delete(
            "/api/v1/access-grants", headers=ADMIN, params={"id": str((await given.json())["id"])}
        )
        assert revoked.status == 200
        # Posted once the revocation is answered: the stream must not get it.
        await streaming.write(record("g-2", cluster="c2", tenant="globex"))
        await streaming.write(record("a-2"))
        assert await _names_until(stream, "a-2") == ["a-2"]
        assert loop.time() - started < 1.0
    assert streaming.hub.grants_applied == 2


class GatedReconnect:
    """The change log, with every LISTEN after the first held until ``reopen`` is set."""

    def __init__(self, source: ChangeSource) -> None:
        self.source = source
        self.entered = 0
        self.asked_again = asyncio.Event()  # the hub noticed the loss and wants to listen
        self.reopen = asyncio.Event()
        self.reopened = asyncio.Event()

    async def latest(self) -> int:
        return await self.source.latest()

    async def oldest(self) -> int | None:
        return await self.source.oldest()

    async def changes_after(self, seq: int, *, limit: int) -> list[Change]:
        return await self.source.changes_after(seq, limit=limit)

    async def grants_of(self, tenant: str) -> frozenset[tuple[str, str]]:
        return await self.source.grants_of(tenant)

    @contextlib.asynccontextmanager
    async def listening(
        self, wake: asyncio.Event, *, grants_changed: Callable[[str], None]
    ) -> AsyncIterator[asyncio.Event]:
        self.entered += 1
        if self.entered > 1:
            self.asked_again.set()
            await self.reopen.wait()
        async with self.source.listening(wake, grants_changed=grants_changed) as lost:
            if self.entered > 1:
                self.reopened.set()
            yield lost


async def test_grants_revoked_while_the_hub_was_not_listening_apply_once_it_is(
    make_api: AppFactory,
) -> None:
    gates: list[GatedReconnect] = []

    def gated(source: ChangeSource) -> ChangeSource:
        gates.append(GatedReconnect(source))
        return gates[0]

    api = await make_api(wrap_source=gated)
    await api.write(record("g-0", cluster="c2", tenant="globex"))
    await api.pool.execute(
        "INSERT INTO access_grants (tenant, cluster_id, namespace, granted_by) "
        "VALUES ('acme', 'c2', 'kubeopera-data-globex', 'test')"
    )
    await api.hub.started.wait()
    async with api.client.get("/api/v1/workflows/stream", headers=headers("acme")) as response:
        stream = events(response)
        await anext(stream)  # ready
        await api.write(record("g-1", cluster="c2", tenant="globex"))
        await api.write(record("a-1"))
        assert await _names_until(stream, "a-1") == ["g-1", "a-1"]
        await api.pool.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'wm-apiserver-listen' AND datname = current_database()"
        )
        await asyncio.wait_for(gates[0].asked_again.wait(), 10)
        await api.pool.execute("DELETE FROM access_grants WHERE tenant = 'acme'")  # unheard
        gates[0].reopen.set()
        await asyncio.wait_for(gates[0].reopened.wait(), 10)
        await api.write(record("g-2", cluster="c2", tenant="globex"))
        await api.write(record("a-2"))
        assert await _names_until(stream, "a-2") == ["a-2"]
