"""An in-memory Lease API, clocks and journals shared by the leader election tests.

The fake API keeps Kubernetes' optimistic concurrency (resourceVersion, 409 on a stale one) and
can delay, fail, hang or drop the answer of any call; time is the loop's, under looptime.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from shared.errors import Conflict, DependencyDown, NotFound
from shared.leader import LeaderElector
from shared.leader_state import (
    LeaseRecord,
    LeaseSpec,
)

R = TypeVar("R")
NS = "workflow-manager"
T0 = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
LD, RENEW, RETRY = 10.0, 3.0, 1.0
TIMING = {"lease_duration": LD, "renew_period": RENEW, "retry_period": RETRY}


# --- the fake Lease API -----------------------------------------------------------------------


class FakeLeaseStore:
    """Leases in memory with Kubernetes' optimistic concurrency; ``probe`` runs at every step."""

    def __init__(self) -> None:
        self.leases: dict[str, tuple[LeaseRecord, dict[str, str]]] = {}
        self.history: list[tuple[str, LeaseRecord]] = []
        self._rv = 0
        self.probes: list[Callable[[], None]] = []

    def probe(self) -> None:
        for check in self.probes:
            check()

    def _store(self, name: str, spec: LeaseSpec, labels: Mapping[str, str]) -> LeaseRecord:
        self._rv += 1
        record = LeaseRecord(spec=spec, resource_version=str(self._rv))
        self.leases[name] = (record, dict(labels))
        self.history.append((name, record))
        return record

    def read(self, name: str) -> LeaseRecord | None:
        entry = self.leases.get(name)
        return entry[0] if entry else None

    def create(self, name: str, spec: LeaseSpec, labels: Mapping[str, str]) -> LeaseRecord:
        if name in self.leases:
            raise Conflict(f"leases {name} already exists")
        return self._store(name, spec, labels)

    def replace(
        self, name: str, spec: LeaseSpec, rv: str, labels: Mapping[str, str]
    ) -> LeaseRecord:
        if name not in self.leases:
            raise NotFound(f"leases {name} not found")
        if self.leases[name][0].resource_version != rv:
            raise Conflict(f"leases {name}: the object has been modified")
        return self._store(name, spec, labels)

    def overwrite(self, name: str, holder: str) -> None:
        """Someone else (with another client) takes the lease."""
        current = self.leases[name][0]
        spec = LeaseSpec(holder, 10, T0, T0, current.spec.transitions + 1)
        self._store(name, spec, self.leases[name][1])

    def delete(self, name: str, rv: str) -> None:
        if name not in self.leases:
            raise NotFound(f"leases {name} not found")
        if self.leases[name][0].resource_version != rv:
            raise Conflict(f"leases {name}: precondition failed")
        del self.leases[name]

    def list(self, selector: str) -> list[tuple[str, LeaseRecord]]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        return [
            (name, record)
            for name, (record, labels) in sorted(self.leases.items())
            if all(labels.get(key) == value for key, value in wanted.items())
        ]


class FakeLeaseApi:
    """One replica's connection to the store. ``down``: every call hangs (partition, or a
    process that died); ``failing``: every call fails fast. With ``rng``, half the requests and
    half the answers travel for up to ``max_delay`` seconds, an answer is slow (up to
    ``slow_answer`` seconds) with probability ``slow``, and lost with probability ``lose``."""

    def __init__(
        self,
        store: FakeLeaseStore,
        *,
        rng: random.Random | None = None,
        max_delay: float = 0.0,
        slow: float = 0.0,
        slow_answer: float = 0.0,
        lose: float = 0.0,
    ) -> None:
        self.store, self.rng = store, rng
        self.max_delay, self.slow, self.slow_answer, self.lose = max_delay, slow, slow_answer, lose
        self.down = False
        self.failing = False

    async def _travel(self, *, answer: bool) -> None:
        if self.rng is not None:
            delay = self.rng.uniform(0, self.max_delay) if self.rng.random() < 0.5 else 0.0
            if answer and self.rng.random() < self.slow:
                delay += self.rng.uniform(0, self.slow_answer)
            if answer and self.rng.random() < self.lose:
                await asyncio.Event().wait()  # committed, but the answer never arrives
            await asyncio.sleep(delay)
        if self.down:
            await asyncio.Event().wait()  # never answers; the caller's deadline cuts it off

    async def _do(self, operation: Callable[[], R]) -> R:
        self.store.probe()
        if self.failing:
            raise DependencyDown("the API server is unavailable")
        await self._travel(answer=False)
        try:
            return operation()
        finally:
            self.store.probe()
            await self._travel(answer=True)

    async def read(self, namespace: str, name: str) -> LeaseRecord | None:
        return await self._do(lambda: self.store.read(name))

    async def create(
        self, namespace: str, name: str, spec: LeaseSpec, *, labels: Mapping[str, str]
    ) -> LeaseRecord:
        return await self._do(lambda: self.store.create(name, spec, labels))

    async def replace(
        self,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        *,
        resource_version: str,
        labels: Mapping[str, str],
    ) -> LeaseRecord:
        return await self._do(lambda: self.store.replace(name, spec, resource_version, labels))

    async def list(self, namespace: str, *, label_selector: str) -> list[tuple[str, LeaseRecord]]:
        return await self._do(lambda: self.store.list(label_selector))

    async def delete(self, namespace: str, name: str, *, resource_version: str) -> None:
        await self._do(lambda: self.store.delete(name, resource_version))


class SkewedClock:
    """A process clock running at ``rate`` times real (loop) speed, its timers likewise."""

    def __init__(self, rate: float = 1.0, offset: float = 0.0) -> None:
        self.rate, self.offset = rate, offset

    def monotonic(self) -> float:
        return self.offset + asyncio.get_running_loop().time() * self.rate

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.monotonic())

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.rate)


def now() -> float:
    return asyncio.get_running_loop().time()


@dataclass
class Tenure:
    """Who led, from when to when (loop time), as told by the callbacks."""

    identity: str
    start: float
    end: float | None = None


@dataclass
class Journal:
    tenures: list[Tenure] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)

    def callbacks(self, identity: str) -> dict[str, Callable[[], asyncio.Future[None]]]:
        async def started() -> None:
            self.events.append(("started", identity))
            self.tenures.append(Tenure(identity, now()))

        async def stopped() -> None:
            self.events.append(("stopped", identity))
            for tenure in self.tenures:
                if tenure.identity == identity and tenure.end is None:
                    tenure.end = now()

        return {"on_started_leading": started, "on_stopped_leading": stopped}  # type: ignore[dict-item]

    def leaders(self) -> list[str]:
        return [t.identity for t in self.tenures if t.end is None]

    def assert_no_overlap(self) -> None:
        closed = sorted(
            (t.start, t.end if t.end is not None else float("inf"), t.identity)
            for t in self.tenures
        )
        for (_, end, who), (start, _, next_who) in itertools.pairwise(closed):
            assert end <= start, f"{who} led until {end} but {next_who} from {start}"


def candidate(
    store: FakeLeaseStore,
    identity: str,
    journal: Journal,
    *,
    api: FakeLeaseApi | None = None,
    clock: SkewedClock | None = None,
    name: str = "wm-compiler",
    retry_period: float = RETRY,
) -> LeaderElector:
    return LeaderElector(
        api or FakeLeaseApi(store),
        namespace=NS,
        name=name,
        identity=identity,
        clock=clock,
        lease_duration=LD,
        renew_period=RENEW,
        retry_period=retry_period,
        **journal.callbacks(identity),  # type: ignore[arg-type]
    )


def one_leader_probe(
    electors: Callable[[], Iterable[LeaderElector]], violations: list[str]
) -> Callable[[], None]:
    def check() -> None:
        leading = [e.identity for e in electors() if e.is_leader]
        if len(leading) > 1:
            violations.append(f"{now():.6f}: {leading} all lead")

    return check


async def until(condition: Callable[[], bool], *, within: float, step: float = 0.01) -> float:
    """Loop time at which ``condition`` first held; fail after ``within`` seconds."""
    started = now()
    while not condition():
        if now() - started > within:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(step)
    return now()
