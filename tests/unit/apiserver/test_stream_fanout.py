"""The stream's fan-out: subscriber grouping, the recent-change memory, the hub's dispatch and
resume from memory, and the shared scope look-ups. No sockets: a fake change source."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.runs.query import RunFilters, matches
from apiserver.scope import Scope
from apiserver.stream.fanout import Recent, Routing
from apiserver.stream.hub import Change, StreamHub, Subscriber
from apiserver.stream.scopes import ScopeCache

ANY = RunFilters()
FAILED = RunFilters(phases=("Failed",))


def fields(
    tenant: str | None, *, phase: str = "Running", namespace: str | None = None
) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "cluster_id": "c1",
        "namespace": namespace or f"kubeopera-data-{tenant}",
        "name": "r",
        "phase": phase,
    }


def change(
    seq: int, tenant: str | None, *, phase: str = "Running", namespace: str | None = None
) -> Change:
    row = fields(tenant, phase=phase, namespace=namespace)
    return Change(
        seq=seq,
        kind="upsert",
        cluster_id="c1",
        namespace=row["namespace"],
        name=f"r-{seq}",
        tenant=tenant,
        phase=phase,
        run=None,
    )


# --- Routing -----------------------------------------------------------------------------------
def test_subscribers_with_the_same_scope_and_filters_share_a_group() -> None:
    routing: Routing[str] = Routing()
    routing.add("a1", Scope("acme"), ANY)
    routing.add("a2", Scope("acme"), ANY)
    routing.add("a3", Scope("acme"), FAILED)
    routing.add("admin", Scope(None), ANY)
    assert (len(routing), routing.group_count) == (4, 3)
    assert set(routing.recipients(fields("acme"))) == {"a1", "a2", "admin"}
    assert set(routing.recipients(fields("acme", phase="Failed"))) == {"a1", "a2", "a3", "admin"}
    assert set(routing.recipients(fields("globex"))) == {"admin"}
    assert set(routing.recipients(fields(None, namespace="argo"))) == {"admin"}


def test_a_grant_reaches_a_tenant_outside_its_own_runs() -> None:
    routing: Routing[str] = Routing()
    routing.add("acme", Scope("acme", frozenset({("c1", "shared")})), ANY)
    assert set(routing.recipients(fields("globex", namespace="shared"))) == {"acme"}
    assert set(routing.recipients(fields("globex"))) == set()
    assert set(routing.recipients(fields("acme"))) == {"acme"}


def test_removing_the_last_member_drops_its_group() -> None:
    routing: Routing[str] = Routing()
    routing.add("a1", Scope("acme"), ANY)
    routing.add("a2", Scope("acme"), ANY)
    assert routing.remove("a1", Scope("acme"), ANY)
    assert not routing.remove("a1", Scope("acme"), ANY)  # twice: no effect
    assert not routing.remove("a2", Scope("globex"), ANY)  # not its group
    assert routing.remove("a2", Scope("acme"), ANY)
    assert (len(routing), routing.group_count) == (0, 0)
    assert list(routing.recipients(fields("acme"))) == []


TENANTS = st.sampled_from([None, "acme", "globex"])
SCOPES = st.builds(
    Scope,
    TENANTS,
    st.frozensets(st.sampled_from([("c1", "shared"), ("c1", "kubeopera-data-globex")]), max_size=2),
)
FILTERS = st.sampled_from([ANY, FAILED, RunFilters(phases=("Running",), namespaces=("shared",))])
CHANGES = st.builds(
    fields,
    TENANTS,
    phase=st.sampled_from(["Running", "Failed"]),
    namespace=st.sampled_from([None, "shared", "argo"]),
)


@given(st.lists(st.tuples(SCOPES, FILTERS), max_size=12), st.lists(CHANGES, max_size=8))
def test_recipients_are_exactly_the_matching_subscribers(
    subscribers: list[tuple[Scope, RunFilters]], changes: list[dict[str, Any]]
) -> None:
    routing: Routing[int] = Routing()
    for member, (scope, filters) in enumerate(subscribers):
        routing.add(member, scope, filters)
    for row in changes:
        expected = {
            m for m, (scope, filters) in enumerate(subscribers) if matches(filters, scope, row)
        }
        got = list(routing.recipients(row))
        assert len(got) == len(set(got))  # nobody twice
        assert set(got) == expected


# --- Recent ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    seq: int


def test_recent_answers_only_ranges_it_holds_completely() -> None:
    recent: Recent[Item] = Recent(3, after=10)
    assert recent.since(10, 10) == []
    assert recent.since(9, 10) is None  # before it started: ask the change log
    for seq in (11, 13, 14, 15, 17):  # seqs may skip (rolled-back transactions)
        recent.append(Item(seq))
    assert recent.since(12, 15) == [Item(13), Item(14), Item(15)]
    recent.append(Item(18))  # 6 held: trimmed to the newest 3
    assert len(recent) == 3
    assert recent.after == 14
    assert recent.since(13, 18) is None
    assert recent.since(14, 18) == [Item(15), Item(17), Item(18)]
    assert recent.since(15, 17) == [Item(17)]


def test_recent_refuses_out_of_order_items_and_resets() -> None:
    recent: Recent[Item] = Recent(3)
    recent.append(Item(5))
    with pytest.raises(ValueError, match="not after"):
        recent.append(Item(5))
    recent.reset(40)
    assert (len(recent), recent.after, recent.since(40, 50)) == (0, 40, [])


# --- the hub -----------------------------------------------------------------------------------
class NoSource:
    """The hub's source, never reached by synchronous dispatch."""

    async def latest(self) -> int:
        raise AssertionError("not used")

    async def oldest(self) -> int | None:
        raise AssertionError("not used")

    async def changes_after(self, seq: int, *, limit: int) -> list[Change]:
        raise AssertionError("not used")

    async def grants_of(self, tenant: str) -> frozenset[tuple[str, str]]:
        raise AssertionError("not used")

    def listening(
        self, wake: asyncio.Event, *, grants_changed: Callable[[str], None]
    ) -> AbstractAsyncContextManager[asyncio.Event]:
        raise AssertionError("not used")


def queued(subscriber: Subscriber) -> list[int]:
    seqs = []
    while not subscriber.queue.empty():
        item = subscriber.queue.get_nowait()
        assert item is not None
        seqs.append(item.seq)
    return seqs


def test_dispatch_encodes_once_and_offers_to_matching_subscribers() -> None:
    hub = StreamHub(NoSource(), queue_size=10)
    acme = hub.subscribe(ANY, Scope("acme"))
    acme_failed = hub.subscribe(FAILED, Scope("acme"))
    admin = hub.subscribe(ANY, Scope(None))
    hub.dispatch(change(1, "acme"))
    hub.dispatch(change(2, "globex"))
    hub.dispatch(change(3, "acme", phase="Failed"))
    hub.dispatch(change(3, "acme"))  # already past: ignored
    assert (queued(acme), queued(acme_failed), queued(admin)) == ([1, 3], [3], [1, 2, 3])
    assert (hub.subscriber_count, hub.group_count) == (3, 3)


def test_a_resume_the_hub_remembers_is_answered_from_memory() -> None:
    hub = StreamHub(NoSource(), history=3)
    for seq in range(1, 6):
        hub.dispatch(change(seq, "acme" if seq % 2 else "globex"))
    resumed = hub.subscribe(ANY, Scope("acme"), resume_after=2)
    assert resumed.start == 5
    assert resumed.missed is not None
    assert [item.seq for item in resumed.missed] == [3, 5]
    admin = hub.subscribe(ANY, Scope(None), resume_after=3)
    assert admin.missed is not None
    assert [item.seq for item in admin.missed] == [4, 5]
    for seq in range(6, 9):  # memory trimmed: seq 3 is forgotten
        hub.dispatch(change(seq, "acme"))
    assert hub.subscribe(ANY, Scope("acme"), resume_after=2).missed is None
    assert hub.subscribe(ANY, Scope("acme"), resume_after=None).missed is None


def test_rescope_moves_a_subscriber_to_its_new_group() -> None:
    hub = StreamHub(NoSource())
    subscriber = hub.subscribe(ANY, Scope("acme"))
    hub.dispatch(change(1, "globex", namespace="shared"))
    hub.rescope(subscriber, Scope("acme", frozenset({("c1", "shared")})))
    hub.dispatch(change(2, "globex", namespace="shared"))
    hub.rescope(subscriber, Scope("acme"))  # the grant revoked
    hub.dispatch(change(3, "globex", namespace="shared"))
    assert queued(subscriber) == [2]
    hub.unsubscribe(subscriber)
    hub.rescope(subscriber, Scope(None))  # gone: stays gone
    hub.dispatch(change(4, "acme"))
    assert (queued(subscriber), hub.subscriber_count) == ([], 0)


def test_a_full_queue_marks_the_subscriber_too_slow_without_blocking_others() -> None:
    hub = StreamHub(NoSource(), queue_size=1)
    slow = hub.subscribe(ANY, Scope(None))
    other = hub.subscribe(FAILED, Scope(None))
    hub.dispatch(change(1, "acme"))
    hub.dispatch(change(2, "acme", phase="Failed"))
    assert slow.overflowed
    assert queued(other) == [2]


# --- scope look-ups ----------------------------------------------------------------------------
class Loader:
    def __init__(self) -> None:
        self.calls: list[str | None] = []
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self, tenant: str | None) -> Scope:
        self.calls.append(tenant)
        grant = ("c1", f"n{len(self.calls)}")  # which load answered
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return Scope(tenant, frozenset({grant}))


async def test_concurrent_look_ups_of_a_tenant_share_one_load() -> None:
    now = [0.0]
    cache = ScopeCache(ttl=1.0, clock=lambda: now[0])
    load = Loader()
    waiting = [asyncio.ensure_future(cache.scope_of("acme", load)) for _ in range(5)]
    other = asyncio.ensure_future(cache.scope_of("globex", load))
    await asyncio.sleep(0)
    load.gate.set()
    scopes = await asyncio.gather(*waiting)
    assert {s.grants for s in scopes} == {frozenset({("c1", "n1")})}
    assert (await other).tenant == "globex"
    assert load.calls == ["acme", "globex"]
    assert (await cache.scope_of("acme", load)).grants == frozenset({("c1", "n1")})
    now[0] = 1.0  # stale: read again
    assert (await cache.scope_of("acme", load)).grants == frozenset({("c1", "n3")})


async def test_a_failed_load_fails_its_waiters_and_is_not_kept() -> None:
    cache = ScopeCache(clock=lambda: 0.0)
    load = Loader()
    load.fail = RuntimeError("down")
    first = asyncio.ensure_future(cache.scope_of("acme", load))
    second = asyncio.ensure_future(cache.scope_of("acme", load))
    await asyncio.sleep(0)
    load.gate.set()
    for looked_up in (first, second):
        with pytest.raises(RuntimeError):
            await looked_up
    load.fail = None
    assert (await cache.scope_of("acme", load)).tenant == "acme"
    assert load.calls == ["acme", "acme"]


async def test_a_waiter_loads_for_itself_when_the_first_look_up_is_cancelled() -> None:
    cache = ScopeCache(clock=lambda: 0.0)
    load = Loader()
    first = asyncio.ensure_future(cache.scope_of("acme", load))
    second = asyncio.ensure_future(cache.scope_of("acme", load))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    load.gate.set()
    assert (await second).tenant == "acme"
    assert first.cancelled()
    assert load.calls == ["acme", "acme"]


async def test_an_invalidated_tenant_is_read_again_and_nothing_read_before_is_answered() -> None:
    cache = ScopeCache(clock=lambda: 0.0)
    load = Loader()
    load.gate.set()
    assert (await cache.scope_of("acme", load)).grants == {("c1", "n1")}
    assert (await cache.scope_of("globex", load)).grants == {("c1", "n2")}
    cache.invalidate("acme")
    assert (await cache.scope_of("acme", load)).grants == {("c1", "n3")}
    assert (await cache.scope_of("globex", load)).grants == {("c1", "n2")}  # not globex's
    cache.clear()
    assert (await cache.scope_of("globex", load)).grants == {("c1", "n4")}


async def test_a_read_under_way_when_the_grants_change_is_read_again() -> None:
    cache = ScopeCache(clock=lambda: 0.0)
    load = Loader()
    first = asyncio.ensure_future(cache.scope_of("acme", load))
    await asyncio.sleep(0)  # the read (n1) started before the change...
    cache.invalidate("acme")
    late = asyncio.ensure_future(cache.scope_of("acme", load))  # ...this look-up came after it
    await asyncio.sleep(0)
    load.gate.set()
    assert (await first).grants == {("c1", "n2")}
    assert (await late).grants == {("c1", "n2")}
    assert load.calls == ["acme", "acme"]
