"""The live stream: tenant and filter scoping, ids, gapless resume, slow clients, shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.runs import RunPhase
from tests.integration.apiserver.conftest import ADMIN, Api, headers, record
from tests.integration.apiserver.sse import Event, events


async def _collect(api: Api, count: int, *, as_: dict[str, str], **params: Any) -> list[Event]:
    got: list[Event] = []
    async with api.client.get("/api/v1/workflows/stream", headers=as_, params=params) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for event in events(response):
            got.append(event)
            if len(got) >= count:
                break
    return got


async def _open(api: Api, *, as_: dict[str, str], **params: Any) -> tuple[Any, Any]:
    response = await api.client.get("/api/v1/workflows/stream", headers=as_, params=params)
    assert response.status == 200
    stream = events(response)
    await anext(stream)
    return response, stream


async def test_events_are_scoped_filtered_and_carry_ids(api: Api) -> None:
    await api.hub.started.wait()
    acme_response, acme = await _open(api, as_=headers("acme"))
    failed_response, failed = await _open(api, as_=headers("acme"), phase="Failed")
    admin_response, admin = await _open(api, as_=ADMIN)
    await api.write(record("a-ok", tenant="acme"))
    await api.write(record("g-1", tenant="globex"))
    await api.write(record("a-bad", tenant="acme", phase=RunPhase.FAILED))
    got = [await asyncio.wait_for(anext(acme), 5) for _ in range(2)]
    assert [e.data["name"] for e in got] == ["a-ok", "a-bad"]
    assert all(e.event == "run" and e.id == e.data["seq"] for e in got)
    assert got[0].data["run"]["tenant"] == "acme"
    only = await asyncio.wait_for(anext(failed), 5)
    assert only.data["name"] == "a-bad"
    every = [await asyncio.wait_for(anext(admin), 5) for _ in range(3)]
    assert [e.data["name"] for e in every] == ["a-ok", "g-1", "a-bad"]
    assert [e.id for e in every] == sorted(e.id for e in every)
    for response in (acme_response, failed_response, admin_response):
        response.close()


async def test_resume_with_last_event_id_misses_nothing(api: Api) -> None:
    await api.hub.started.wait()
    response, stream = await _open(api, as_=headers("acme"))
    await api.write(record("r-1"))
    first = await asyncio.wait_for(anext(stream), 5)
    response.close()
    # While disconnected: changes of both tenants.
    await api.write(record("r-2"), record("g-x", tenant="globex"))
    await api.write(record("r-3"))
    seen: list[str] = []
    h = {**headers("acme"), "Last-Event-ID": str(first.id)}
    async with api.client.get("/api/v1/workflows/stream", headers=h) as again:
        stream = events(again)
        seen.append((await asyncio.wait_for(anext(stream), 5)).data["name"])
        seen.append((await asyncio.wait_for(anext(stream), 5)).data["name"])
        await api.write(record("r-4"))
        seen.append((await asyncio.wait_for(anext(stream), 5)).data["name"])
    assert sorted(seen[:2]) == ["r-2", "r-3"]
    assert seen[2] == "r-4"


async def test_resume_point_older_than_the_log_gets_a_reset(api: Api) -> None:
    await api.write(record("old-1"))
    await api.write(record("old-2"))
    await api.pool.execute("DELETE FROM run_changes WHERE seq = 1")
    await api.write(record("new"))
    await api.hub.started.wait()
    async with api.client.get(
        "/api/v1/workflows/stream", headers={**headers(), "Last-Event-ID": "0"}
    ) as response:
        first = await asyncio.wait_for(anext(events(response)), 5)
    assert first.event == "reset"


async def test_bad_last_event_id_and_filters_are_400(api: Api) -> None:
    response = await api.client.get(
        "/api/v1/workflows/stream", headers={**headers(), "Last-Event-ID": "abc"}
    )
    assert response.status == 400
    status, body = await api.get("/api/v1/workflows/stream", phase="Nope")
    assert status == 400
    assert body["details"]["parameter"] == "phase"


async def test_heartbeats_keep_idle_streams_open(make_api) -> None:  # type: ignore[no-untyped-def]
    api = await make_api(heartbeat=0.05)
    await api.hub.started.wait()
    async with api.client.get("/api/v1/workflows/stream", headers=headers()) as response:
        lines = []
        async for raw in response.content:
            lines.append(raw)
            if raw.startswith(b": heartbeat"):
                break
    assert any(line.startswith(b": heartbeat") for line in lines)


async def test_a_slow_client_is_disconnected_not_waited_for(make_api) -> None:  # type: ignore[no-untyped-def]
    api = await make_api(queue_size=2)
    await api.hub.started.wait()
    subscriber = api.hub.subscribe(
        __import__("apiserver.runs.query", fromlist=["RunFilters"]).RunFilters(),
        __import__("apiserver.auth", fromlist=["Scope"]).Scope(None),
    )
    fast_response, fast = await _open(api, as_=ADMIN)
    got = []
    for i in range(5):  # the fast client keeps up; the idle subscriber falls behind
        await api.write(record(f"burst-{i}"))
        got.append(await asyncio.wait_for(anext(fast), 5))
    assert [e.data["name"] for e in got] == [f"burst-{i}" for i in range(5)]
    assert subscriber.overflowed  # nobody read it: dropped, the others unaffected
    fast_response.close()


async def test_shutdown_closes_streams(make_api) -> None:  # type: ignore[no-untyped-def]
    api = await make_api()
    await api.hub.started.wait()
    _response, stream = await _open(api, as_=headers())
    await api.client.server.app.shutdown()
    remaining = [event async for event in stream]
    assert remaining == []
    assert api.hub.subscriber_count == 0


async def test_the_stream_carries_the_request_id(api: Api) -> None:
    await api.hub.started.wait()
    given = {**headers(), "X-Request-Id": "req-stream-1"}
    async with api.client.get("/api/v1/workflows/stream", headers=given) as response:
        assert response.status == 200
        assert response.headers["X-Request-Id"] == "req-stream-1"
    async with api.client.get("/api/v1/workflows/stream", headers=headers()) as response:
        assert len(response.headers["X-Request-Id"]) == 32  # one of ours
