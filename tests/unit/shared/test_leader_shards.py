"""Leader election over many leases (ShardedElection) over the in-memory Lease API of
``_leases``: fair shares between replicas, runtime shard changes, shard work, membership GC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from shared.errors import ConfigError
from shared.leader_shards import ShardedElection
from shared.leader_state import (
    LeaseSpec,
)
from tests.unit.shared._leases import (
    LD,
    NS,
    RETRY,
    T0,
    TIMING,
    FakeLeaseApi,
    FakeLeaseStore,
    now,
    until,
)

# --- many leases ------------------------------------------------------------------------------


SHARDS = [f"c{i}" for i in range(6)]


@dataclass
class Replica:
    identity: str
    api: FakeLeaseApi
    election: ShardedElection
    gained: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def replica(store: FakeLeaseStore, identity: str, shards: Iterable[str] = SHARDS) -> Replica:
    api = FakeLeaseApi(store)
    gained: list[str] = []
    lost: list[str] = []

    async def on_gain(shard: str) -> None:
        gained.append(shard)

    async def on_loss(shard: str) -> None:
        lost.append(shard)

    election = ShardedElection(
        api,
        namespace=NS,
        prefix="wm-watcher",
        identity=identity,
        shards=shards,
        on_started_leading=on_gain,
        on_stopped_leading=on_loss,
        **TIMING,  # type: ignore[arg-type]
    )
    return Replica(identity, api, election, gained, lost)


def shard_probe(
    replicas: Callable[[], Iterable[Replica]], violations: list[str]
) -> Callable[[], None]:
    def check() -> None:
        seen: dict[str, str] = {}
        for r in replicas():
            for shard in r.election.held:
                if shard in seen:
                    violations.append(
                        f"{now():.3f}: {shard} held by {seen[shard]} and {r.identity}"
                    )
                seen[shard] = r.identity

    return check


@asynccontextmanager
async def running(*replicas: Replica) -> AsyncIterator[None]:
    entered: list[Replica] = []
    try:
        for r in replicas:
            await r.election.__aenter__()
            entered.append(r)
        yield
    finally:
        for r in reversed(entered):
            await r.election.__aexit__(None, None, None)


@pytest.mark.looptime
async def test_a_replica_alone_takes_every_shard() -> None:
    store = FakeLeaseStore()
    a = replica(store, "a")
    async with running(a):
        await until(lambda: a.election.held == set(SHARDS), within=LD)
        assert a.election.members == {"a"}
        assert sorted(a.gained) == SHARDS
    assert sorted(a.lost) == SHARDS
    for shard in SHARDS:
        assert store.read(f"wm-watcher-{shard}").holder is None  # type: ignore[union-attr]
    assert "wm-watcher-member-a" not in store.leases  # its membership is deleted on exit


@pytest.mark.looptime
async def test_two_replicas_split_the_shards_and_a_survivor_takes_them_all() -> None:
    store, violations = FakeLeaseStore(), list[str]()
    a, b = replica(store, "a"), replica(store, "b")
    store.probes.append(shard_probe(lambda: (a, b), violations))
    async with running(a, b):
        await until(lambda: len(a.election.held) == 3 and len(b.election.held) == 3, within=3 * LD)
        assert a.election.held | b.election.held == set(SHARDS)
        assert a.election.members == b.election.members == {"a", "b"}
        await asyncio.sleep(60)  # stable: no churn once balanced
        assert len(a.election.held) == 3
        assert len(b.election.held) == 3
        assert len(a.gained) + len(b.gained) <= 8

        b.api.down = True  # b dies without a word
        died = now()
        took = await until(lambda: a.election.held == set(SHARDS), within=3 * LD)
        assert took - died <= 2 * LD
        assert b.election.held == set()
        assert a.election.members == {"a"}
    assert violations == []


@pytest.mark.looptime
async def test_a_new_replica_receives_its_share() -> None:
    store, violations = FakeLeaseStore(), list[str]()
    a, b = replica(store, "a"), replica(store, "b")
    store.probes.append(shard_probe(lambda: (a, b), violations))
    async with running(a):
        await until(lambda: len(a.election.held) == 6, within=LD)
        async with running(b):
            await until(lambda: len(b.election.held) == 3, within=3 * LD)
            assert len(a.election.held) == 3
            assert sorted(a.lost) == ["c3", "c4", "c5"]  # the extras, last in name order
        # b leaves gracefully: a takes its shards back without waiting for expiry
        left = now()
        took = await until(lambda: len(a.election.held) == 6, within=LD)
        assert took - left <= 3 * RETRY
    assert violations == []


@pytest.mark.looptime
async def test_shards_added_and_removed_at_runtime() -> None:
    store, violations = FakeLeaseStore(), list[str]()
    a, b = replica(store, "a"), replica(store, "b")
    store.probes.append(shard_probe(lambda: (a, b), violations))
    async with running(a, b):
        await until(lambda: len(a.election.held | b.election.held) == 6, within=3 * LD)
        for r in (a, b):
            r.election.add("c6")
        await until(lambda: "c6" in a.election.held | b.election.held, within=LD)
        assert max(len(a.election.held), len(b.election.held)) <= 4  # ceil(7 / 2)

        holder = a if "c0" in a.election.held else b
        for r in (a, b):
            await r.election.remove("c0")
        assert "c0" in holder.lost
        assert "c0" not in a.election.held | b.election.held
        assert store.read("wm-watcher-c0").holder is None  # type: ignore[union-attr]
        await asyncio.sleep(5 * RETRY)
        assert "c0" not in a.election.held | b.election.held

        await a.election.update(["c1", "c2", "c9"])
        await b.election.update(["c1", "c2", "c9"])
        await until(lambda: a.election.held | b.election.held == {"c1", "c2", "c9"}, within=3 * LD)
        assert a.election.shards == {"c1", "c2", "c9"}
        await until(lambda: {len(a.election.held), len(b.election.held)} == {1, 2}, within=3 * LD)
    assert violations == []


@pytest.mark.looptime
async def test_shard_work_runs_only_while_held() -> None:
    store = FakeLeaseStore()
    running_work: set[str] = set()
    runs: list[str] = []

    async def work(shard: str) -> None:
        runs.append(shard)
        running_work.add(shard)
        try:
            await asyncio.sleep(1e6)
        finally:
            running_work.discard(shard)

    election = ShardedElection(
        FakeLeaseApi(store),
        namespace=NS,
        prefix="wm-watcher",
        identity="a",
        shards=["c1", "c2"],
        work=work,
        **TIMING,  # type: ignore[arg-type]
    )
    async with election:
        await until(lambda: running_work == {"c1", "c2"}, within=LD)
        await election.remove("c1")
        assert running_work == {"c2"}
        await asyncio.sleep(10)
        assert running_work == election.held == {"c2"}
    assert running_work == set()
    assert sorted(runs) == ["c1", "c2"]


@pytest.mark.looptime
async def test_abandoned_membership_leases_are_collected() -> None:
    store = FakeLeaseStore()
    store.create(
        "wm-watcher-member-gone",
        LeaseSpec("gone", 10, T0, T0, 0),
        {"workflow-manager.io/lease-set": "wm-watcher", "workflow-manager.io/lease-role": "member"},
    )
    a = replica(store, "a")
    async with running(a):
        await until(lambda: a.election.held == set(SHARDS), within=2 * LD)
        assert "wm-watcher-member-gone" in store.leases
        await until(lambda: "wm-watcher-member-gone" not in store.leases, within=11 * LD)


def test_shard_keys_cannot_collide_with_membership() -> None:
    election = ShardedElection(
        FakeLeaseApi(FakeLeaseStore()), namespace=NS, prefix="wm-watcher", identity="a"
    )
    with pytest.raises(Exception, match="membership"):
        election.add("member-x")
    with pytest.raises(ConfigError):
        ShardedElection(FakeLeaseApi(FakeLeaseStore()), namespace=NS, prefix="WM_bad", identity="a")
