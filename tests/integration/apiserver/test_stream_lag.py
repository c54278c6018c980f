"""Resuming while the replica's hub lags behind the change log: the hub reads ``run_changes``
only when a test lets it, so the interleavings that a loaded machine produces now and then
(a reconnect answered before the hub has read the changes the client missed, or before the hub
has even found its starting position) happen every time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from apiserver.scope import Scope
from apiserver.stream.hub import Change, ChangeSource, StreamHub
from apiserver.stream.scopes import ScopeCache, ScopeLoader
from tests.integration.apiserver.conftest import Api, AppFactory, headers, record
from tests.integration.apiserver.sse import Event, events


class HeldSource:
    """The change log, with the hub's first read (``latest``) held until ``start`` is set."""

    def __init__(self, source: ChangeSource) -> None:
        self.source = source
        self.start = asyncio.Event()

    async def latest(self) -> int:
        await self.start.wait()
        return await self.source.latest()

    async def oldest(self) -> int | None:
        return await self.source.oldest()

    async def changes_after(self, seq: int, *, limit: int) -> list[Change]:
        return await self.source.changes_after(seq, limit=limit)

    async def grants_of(self, tenant: str) -> frozenset[tuple[str, str]]:
        return await self.source.grants_of(tenant)

    def listening(
        self, wake: asyncio.Event, *, grants_changed: Callable[[str], None]
    ) -> AbstractAsyncContextManager[asyncio.Event]:
        return self.source.listening(wake, grants_changed=grants_changed)


class HubReads:
    """Lets the hub read new changes (``catch_up``) only while ``allowed`` is set."""

    def __init__(self, hub: StreamHub) -> None:
        self.allowed = asyncio.Event()
        self.allowed.set()
        self._idle = asyncio.Event()  # no read under way
        self._idle.set()
        read = hub.catch_up

        async def catch_up() -> None:
            await self.allowed.wait()
            self._idle.clear()  # only the hub's loop reads: one at a time
            try:
                await read()
            finally:
                self._idle.set()

        hub.catch_up = catch_up  # type: ignore[method-assign]

    async def hold(self) -> None:
        """From now on the hub dispatches nothing (a read already under way finishes first)."""
        self.allowed.clear()
        await self._idle.wait()


class NoticedScopes(ScopeCache):
    """Tells when a stream request has its scope (the handler's first step)."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = asyncio.Event()

    async def scope_of(self, tenant: str | None, load: ScopeLoader) -> Scope:
        scope = await super().scope_of(tenant, load)
        self.answered.set()
        return scope


async def _next_run(stream: AsyncIterator[Event]) -> Event:
    event = await asyncio.wait_for(anext(stream), 5)
    assert event.event == "run", event  # a resumed stream starts with what it missed
    return event


async def _open(api: Api) -> tuple[Any, AsyncIterator[Event]]:
    response = await api.client.get("/api/v1/workflows/stream", headers=headers("acme"))
    stream = events(response)
    assert (await anext(stream)).event == "ready"
    return response, stream


async def test_a_resume_the_hub_has_not_caught_up_with_gets_what_it_missed(api: Api) -> None:
    await api.hub.started.wait()
    reads = HubReads(api.hub)
    response, stream = await _open(api)
    await api.write(record("r-1"))
    first = await _next_run(stream)
    response.close()
    await reads.hold()
    await api.write(record("r-2"), record("g-x", tenant="globex"))
    await api.write(record("r-3"))
    assert api.hub.position == first.id  # committed, not yet read by this replica
    h = {**headers("acme"), "Last-Event-ID": str(first.id)}
    async with api.client.get("/api/v1/workflows/stream", headers=h) as again:
        resumed = events(again)
        reads.allowed.set()
        got = [await _next_run(resumed) for _ in range(2)]
        await api.write(record("r-4"))
        got.append(await _next_run(resumed))
    assert [e.data["name"] for e in got] == ["r-2", "r-3", "r-4"]
    ids = [e.id or 0 for e in got]
    assert first.id is not None
    assert first.id < ids[0] < ids[1] < ids[2]


async def test_a_resume_past_the_log_gets_a_reset_even_when_the_hub_lags(api: Api) -> None:
    await api.hub.started.wait()
    reads = HubReads(api.hub)
    await reads.hold()
    start = api.hub.position
    await api.write(record("old-1"))
    await api.write(record("old-2"))
    await api.pool.execute("DELETE FROM run_changes WHERE seq = (SELECT min(seq) FROM run_changes)")
    await api.write(record("new"))
    assert api.hub.position == start
    h = {**headers(), "Last-Event-ID": str(start)}
    async with api.client.get("/api/v1/workflows/stream", headers=h) as response:
        first = await asyncio.wait_for(anext(events(response)), 5)
    assert first.event == "reset"  # old-1 is gone: nobody can send it any more


async def test_a_resume_before_the_hub_has_started_waits_for_it(make_api: AppFactory) -> None:
    held: list[HeldSource] = []

    def hold(source: ChangeSource) -> ChangeSource:
        held.append(HeldSource(source))
        return held[0]

    api = await make_api(wrap_source=hold)
    scopes = api.hub.scopes = NoticedScopes()
    await api.write(record("s-1"))
    await api.write(record("s-2"), record("s-g", tenant="globex"))
    await api.write(record("s-3"))
    seqs = dict(await api.pool.fetch("SELECT name, seq FROM run_changes"))
    assert not api.hub.started.is_set()
    h = {**headers("acme"), "Last-Event-ID": str(seqs["s-1"])}
    request = asyncio.ensure_future(api.client.get("/api/v1/workflows/stream", headers=h))
    await asyncio.wait_for(scopes.answered.wait(), 5)  # the request reached the stream
    held[0].start.set()  # the hub starts after every change above
    async with await asyncio.wait_for(request, 5) as response:
        resumed = events(response)
        got = [await _next_run(resumed) for _ in range(2)]
        await api.write(record("s-4"))
        got.append(await _next_run(resumed))
    assert [e.data["name"] for e in got] == ["s-2", "s-3", "s-4"]
