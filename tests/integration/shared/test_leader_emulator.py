"""Leader election through the real kubernetes-asyncio client against the Kubernetes emulator.

Real time with short durations (1 s lease, 0.3 s renewal, 0.1 s retry): the emulator speaks
HTTP, so the loop cannot be fast-forwarded.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, CoordinationV1Api

from shared.errors import DependencyDown
from shared.leader import KubernetesLeaseApi, LeaderElector
from shared.leader_shards import ShardedElection
from shared.leader_state import LeaseRecord, LeaseSpec
from sim.kube.server import RunningCluster, start_cluster

pytestmark = pytest.mark.integration

NS = "default"
LEASE = "wm-compiler"
LD, RENEW, RETRY = 1.0, 0.3, 0.1
TIMING: dict[str, Any] = {"lease_duration": LD, "renew_period": RENEW, "retry_period": RETRY}
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
async def cluster() -> AsyncIterator[RunningCluster]:
    running = await start_cluster("c1")
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def clients(cluster: RunningCluster) -> AsyncIterator[Callable[[], Any]]:
    """A factory of real ApiClients for the emulated cluster (one per candidate, as in pods)."""
    made: list[ApiClient] = []

    async def make() -> ApiClient:
        client = await config.new_client_from_config_dict(yaml.safe_load(cluster.kubeconfig))
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


class Severable(KubernetesLeaseApi):
    """The real adapter, whose connection can be cut: a process that dies without a word."""

    severed = False

    async def replace(self, namespace: str, name: str, spec: LeaseSpec, **kw: Any) -> LeaseRecord:
        if self.severed:
            raise DependencyDown("severed")
        return await super().replace(namespace, name, spec, **kw)

    async def read(self, namespace: str, name: str) -> LeaseRecord | None:
        if self.severed:
            raise DependencyDown("severed")
        return await super().read(namespace, name)


def now() -> float:
    return asyncio.get_running_loop().time()


@dataclass
class Tenures:
    spans: list[tuple[str, float, float | None]] = field(default_factory=list)

    def callbacks(self, identity: str) -> Mapping[str, Any]:
        async def started() -> None:
            self.spans.append((identity, now(), None))

        async def stopped() -> None:
            self.spans = [
                (i, s, now() if i == identity and e is None else e) for i, s, e in self.spans
            ]

        return {"on_started_leading": started, "on_stopped_leading": stopped}

    def assert_no_overlap(self) -> None:
        spans = sorted((s, e if e is not None else float("inf"), i) for i, s, e in self.spans)
        for (_, end, who), (start, _, other) in itertools.pairwise(spans):
            assert end <= start, f"{who} led until {end}, {other} from {start}"


async def until(condition: Callable[[], bool], *, within: float) -> float:
    started = now()
    while not condition():
        if now() - started > within:
            raise AssertionError(f"not within {within}s")
        await asyncio.sleep(0.01)
    return now()


async def raw_lease(client: ApiClient, name: str = LEASE) -> dict[str, Any]:
    response: Any = await CoordinationV1Api(client).read_namespaced_lease(
        name, NS, _preload_content=False
    )
    body: dict[str, Any] = await response.json()
    return body


def elector(api: Any, identity: str, tenures: Tenures) -> LeaderElector:
    return LeaderElector(
        api, namespace=NS, name=LEASE, identity=identity, **TIMING, **tenures.callbacks(identity)
    )


async def test_two_candidates_one_leader_and_the_lease_on_the_wire(
    clients: Callable[[], Any],
) -> None:
    tenures = Tenures()
    client_a, client_b = await clients(), await clients()
    a, b = elector(client_a, "pod-a", tenures), elector(client_b, "pod-b", tenures)
    async with a, b:
        await until(lambda: a.is_leader or b.is_leader, within=2.0)
        for _ in range(30):  # 3 s: ten renewals
            assert [a.is_leader, b.is_leader].count(True) == 1
            await asyncio.sleep(0.1)
        leader = "pod-a" if a.is_leader else "pod-b"
        lease = await raw_lease(client_a)
        assert lease["spec"]["holderIdentity"] == leader
        assert lease["spec"]["leaseDurationSeconds"] == 1
        assert lease["spec"]["leaseTransitions"] == 0
        assert MICROTIME.match(lease["spec"]["renewTime"])
        assert MICROTIME.match(lease["spec"]["acquireTime"])
        assert lease["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "workflow-manager"
        assert len(tenures.spans) == 1
    lease = await raw_lease(client_a)
    assert lease["spec"]["holderIdentity"] is None  # released on exit
    tenures.assert_no_overlap()


async def test_a_silent_leader_is_replaced_within_a_lease_duration(
    clients: Callable[[], Any],
) -> None:
    tenures = Tenures()
    api_a = Severable(await clients())
    a = elector(api_a, "pod-a", tenures)
    b = elector(await clients(), "pod-b", tenures)
    async with a:
        await until(lambda: a.is_leader, within=2.0)
        async with b:
            await asyncio.sleep(1.0)
            api_a.severed = True  # no more renewals, and its release on exit will fail
            cut = now()
            await a.__aexit__(None, None, None)
            took = await until(lambda: b.is_leader, within=LD + 1.0)
            assert took - cut <= LD + RETRY + 0.2  # plus a little for HTTP and scheduling
            assert took - cut >= LD - RENEW - 0.05  # it did wait for expiry: no release
            lease = await raw_lease(await clients())
            assert lease["spec"]["holderIdentity"] == "pod-b"
            assert lease["spec"]["leaseTransitions"] == 1
    tenures.assert_no_overlap()


async def test_a_released_lease_is_taken_over_quickly(clients: Callable[[], Any]) -> None:
    tenures = Tenures()
    a = elector(await clients(), "pod-a", tenures)
    b = elector(await clients(), "pod-b", tenures)
    async with a:
        await until(lambda: a.is_leader, within=2.0)
        async with b:
            await asyncio.sleep(0.5)
            await a.__aexit__(None, None, None)
            released = now()
            took = await until(lambda: b.is_leader, within=LD)
            assert took - released <= RETRY + 0.2
    tenures.assert_no_overlap()


async def test_a_foreign_write_ends_leadership_at_the_next_renewal(
    clients: Callable[[], Any],
) -> None:
    tenures = Tenures()
    client = await clients()
    a = elector(client, "pod-a", tenures)
    async with a:
        await until(lambda: a.is_leader, within=2.0)
        lease = await raw_lease(client)
        lease["spec"]["holderIdentity"] = "intruder"
        body: Any = lease
        await CoordinationV1Api(client).replace_namespaced_lease(LEASE, NS, body)
        written = now()
        lost = await until(lambda: not a.is_leader, within=LD)
        assert lost - written <= RENEW + 0.1  # the 409 on renewal, not the deadline


async def test_sharded_election_splits_over_the_real_api(clients: Callable[[], Any]) -> None:
    shards = ["c1", "c2", "c3", "c4"]

    def replica(client: ApiClient, identity: str) -> ShardedElection:
        return ShardedElection(
            client, namespace=NS, prefix="wm-watcher", identity=identity, shards=shards, **TIMING
        )

    client = await clients()
    a, b = replica(client, "pod-a"), replica(await clients(), "pod-b")
    async with a, b:
        await until(lambda: len(a.held) == 2 and len(b.held) == 2, within=10 * LD)
        assert a.held | b.held == set(shards)
        assert a.members == b.members == {"pod-a", "pod-b"}
        leases = await CoordinationV1Api(client).list_namespaced_lease(
            NS, label_selector="workflow-manager.io/lease-role=member"
        )
        assert sorted(lease.metadata.name for lease in leases.items) == [
            "wm-watcher-member-pod-a",
            "wm-watcher-member-pod-b",
        ]
        await b.__aexit__(None, None, None)  # graceful: a takes them all back quickly
        await until(lambda: a.held == set(shards), within=5 * LD)
    leases = await CoordinationV1Api(client).list_namespaced_lease(NS)
    names = {lease.metadata.name for lease in leases.items}
    assert names == {f"wm-watcher-{shard}" for shard in shards}  # membership leases deleted
