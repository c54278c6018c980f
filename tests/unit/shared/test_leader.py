"""Leader election: the pure decision core, then the electors over an in-memory Lease API.

The fake API keeps Kubernetes' optimistic concurrency (resourceVersion, 409 on a stale one) and
can delay, fail, hang or drop the answer of any call; time is the loop's, under looptime.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import ConfigError, Conflict, DependencyDown, NotFound
from shared.leader import LeaderElector, LeadershipLost, ShardedElection
from shared.leader_state import (
    Action,
    LeaseRecord,
    LeaseSpec,
    Observation,
    acquisition_spec,
    check_timings,
    decide,
    default_safety_margin,
    expiry,
    extras_to_release,
    fair_share,
    format_microtime,
    holder_deadline,
    is_abandoned,
    is_live,
    lease_duration_seconds,
    lease_name,
    observe,
    release_spec,
)

R = TypeVar("R")
NS = "workflow-manager"
T0 = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
LD, RENEW, RETRY = 10.0, 3.0, 1.0
TIMING = {"lease_duration": LD, "renew_period": RENEW, "retry_period": RETRY}


def _record(
    holder: str | None, rv: str = "7", *, seconds: int = 10, transitions: int = 2
) -> LeaseRecord:
    spec = LeaseSpec(holder, seconds, T0, T0, transitions)
    return LeaseRecord(spec=spec, resource_version=rv)


# --- the pure core ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "observation", "now", "action", "reason", "wait"),
    [
        (None, None, 0.0, Action.CREATE, "missing", 0.0),
        (_record("me"), None, 0.0, Action.RENEW, "ours", 0.0),
        (_record("me"), Observation("7", 0.0), 1e9, Action.RENEW, "ours", 0.0),
        (_record(None), None, 0.0, Action.ACQUIRE, "released", 0.0),
        (_record(""), Observation("7", 5.0), 5.0, Action.ACQUIRE, "released", 0.0),
        # held by another: wait a whole lease duration from when we first saw this version
        (_record("other"), None, 100.0, Action.WAIT, "held", 10.0),
        (_record("other"), Observation("7", 100.0), 104.0, Action.WAIT, "held", 6.0),
        (_record("other"), Observation("7", 100.0), 110.0, Action.ACQUIRE, "expired", 0.0),
        (_record("other"), Observation("7", 100.0), 500.0, Action.ACQUIRE, "expired", 0.0),
        # an observation of an older version does not count: the lease was renewed since
        (_record("other", "8"), Observation("7", 100.0), 500.0, Action.WAIT, "held", 10.0),
        # the holder advertises a longer lease than ours: respect it
        (_record("other", seconds=30), Observation("7", 100.0), 120.0, Action.WAIT, "held", 10.0),
        (
            _record("other", seconds=30),
            Observation("7", 100.0),
            130.0,
            Action.ACQUIRE,
            "expired",
            0.0,
        ),
        # ...but never a shorter one
        (_record("other", seconds=1), Observation("7", 100.0), 105.0, Action.WAIT, "held", 5.0),
    ],
)
def test_decide_table(
    record: LeaseRecord | None,
    observation: Observation | None,
    now: float,
    action: Action,
    reason: str,
    wait: float,
) -> None:
    decision = decide(record, observation, identity="me", now=now, lease_duration=10.0)
    assert (decision.action, decision.reason) == (action, reason)
    assert decision.wait == pytest.approx(wait)


def test_observe_keeps_the_first_sighting_of_a_version() -> None:
    first = observe(None, _record("a", "1"), 5.0)
    assert first == Observation("1", 5.0)
    assert observe(first, _record("a", "1"), 9.0) is first
    assert observe(first, _record("a", "2"), 9.0) == Observation("2", 9.0)
    assert observe(first, None, 9.0) is None


def test_acquisition_spec_counts_transitions_and_keeps_acquire_time_on_renewal() -> None:
    later = T0 + timedelta(seconds=30)
    created = acquisition_spec(None, identity="me", wall_now=later, lease_duration=2.5)
    assert created == LeaseSpec("me", 3, later, later, 0)
    renewed = acquisition_spec(_record("me"), identity="me", wall_now=later, lease_duration=10.0)
    assert renewed == LeaseSpec("me", 10, T0, later, 2)
    taken = acquisition_spec(_record("other"), identity="me", wall_now=later, lease_duration=10.0)
    assert taken == LeaseSpec("me", 10, later, later, 3)
    after_release = acquisition_spec(
        _record(None), identity="me", wall_now=later, lease_duration=10.0
    )
    assert after_release.transitions == 3


def test_release_spec_empties_the_holder_and_stamps_the_time() -> None:
    later = T0 + timedelta(seconds=1)
    released = release_spec(_record("me"), wall_now=later)
    assert released == LeaseSpec(None, 10, T0, later, 2)


@pytest.mark.parametrize(
    ("lease", "renew", "margin", "ok"),
    [
        (15.0, 5.0, 3.0, True),
        (1.0, 0.3, 0.2, True),
        (10.0, 8.0, 2.0, False),  # one renew period would outlast the holder's deadline
        (10.0, 3.0, 0.0, False),
        (10.0, 3.0, 0.09, False),  # less than 1 % of the lease: no room for clock drift
        (0.0, 3.0, 1.0, False),
        (10.0, -1.0, 1.0, False),
    ],
)
def test_check_timings(lease: float, renew: float, margin: float, ok: bool) -> None:
    problem = check_timings(lease_duration=lease, renew_period=renew, safety_margin=margin)
    assert (problem is None) is ok


def test_default_margin_fits_the_configured_defaults() -> None:
    assert default_safety_margin(15.0, 5.0) == pytest.approx(3.0)
    assert default_safety_margin(1.0, 0.3) == pytest.approx(0.2)
    assert default_safety_margin(10.0, 8.0) == pytest.approx(1.0)  # half the slack


def test_elector_refuses_unworkable_timings() -> None:
    with pytest.raises(ConfigError, match="renew period"):
        LeaderElector(
            FakeLeaseApi(FakeLeaseStore()),
            namespace=NS,
            name="x",
            identity="a",
            lease_duration=10.0,
            renew_period=10.0,
        )


@pytest.mark.parametrize(
    ("shards", "members", "share"),
    [(6, 2, 3), (7, 2, 4), (6, 1, 6), (6, 0, 6), (0, 3, 0), (1, 3, 1), (10, 3, 4), (2, 5, 1)],
)
def test_fair_share(shards: int, members: int, share: int) -> None:
    assert fair_share(shards, members) == share


def test_extras_to_release_picks_the_last_names() -> None:
    assert extras_to_release({"c", "a", "d", "b"}, 2) == ["c", "d"]
    assert extras_to_release({"a"}, 3) == []
    assert extras_to_release({"a", "b"}, 0) == ["a", "b"]


def test_liveness_and_abandonment() -> None:
    held, released = _record("x", "3"), _record(None, "3")
    seen = Observation("3", 100.0)
    assert is_live(held, seen, now=105.0, lease_duration=10.0)
    assert not is_live(held, seen, now=110.0, lease_duration=10.0)
    assert not is_live(released, seen, now=100.0, lease_duration=10.0)
    assert not is_abandoned(held, seen, now=199.0, after=100.0)
    assert is_abandoned(held, seen, now=200.0, after=100.0)
    assert not is_abandoned(held, Observation("2", 0.0), now=200.0, after=100.0)


def test_microtime_is_rfc3339_with_microseconds_and_z() -> None:
    assert format_microtime(T0) == "2030-01-02T03:04:05.678901Z"
    plus_two = datetime(2030, 1, 2, 7, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert format_microtime(plus_two) == "2030-01-02T05:04:05.000000Z"


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (("wm-watcher", "c1"), "wm-watcher-c1"),
        (("wm-watcher", "member", "pod-7f9c"), "wm-watcher-member-pod-7f9c"),
    ],
)
def test_lease_name_keeps_valid_names(parts: tuple[str, ...], expected: str) -> None:
    assert lease_name(*parts) == expected


@given(st.lists(st.text(min_size=1, max_size=300), min_size=1, max_size=3))
def test_lease_names_are_always_valid_and_distinct(parts: list[str]) -> None:
    name = lease_name(*parts)
    assert 0 < len(name) <= 253
    assert all(ch.isascii() and (ch.isdigit() or ch.islower() or ch == "-") for ch in name)
    assert not name.startswith("-")
    assert not name.endswith("-")
    if name != "-".join(parts):  # changed: a hash keeps different inputs apart
        assert lease_name(*parts, "x") != name


records = st.builds(
    _record,
    st.sampled_from([None, "", "me", "other", "third"]),
    st.integers(1, 5).map(str),
    seconds=st.integers(0, 40),
    transitions=st.integers(0, 100),
)
times = st.floats(0, 1e6, allow_nan=False)
durations = st.floats(0.5, 120, allow_nan=False)


@given(
    record=st.one_of(st.none(), records),
    seen_rv=st.integers(1, 5).map(str),
    since=times,
    elapsed=st.floats(0, 500, allow_nan=False),
    lease_duration=durations,
)
def test_decide_never_takes_a_live_lease_of_another(
    record: LeaseRecord | None, seen_rv: str, since: float, elapsed: float, lease_duration: float
) -> None:
    observation = Observation(seen_rv, since)
    now = since + elapsed
    decision = decide(record, observation, identity="me", now=now, lease_duration=lease_duration)
    if record is None:
        assert decision.action is Action.CREATE
        return
    holder = record.holder
    if holder == "me":
        assert decision.action is Action.RENEW
    elif holder is None:
        assert decision.action is Action.ACQUIRE
    else:
        first_seen = since if seen_rv == record.resource_version else now
        if decision.action is Action.ACQUIRE:
            assert now >= first_seen + lease_duration
            assert now >= first_seen + record.spec.lease_duration_seconds
        else:
            assert decision.action is Action.WAIT
            longest = max(lease_duration, record.spec.lease_duration_seconds)
            assert 0 < decision.wait <= longest * (1 + 1e-9)
            assert now + decision.wait == pytest.approx(
                expiry(record, observation, now=now, lease_duration=lease_duration)
            )
    spec = acquisition_spec(record, identity="me", wall_now=T0, lease_duration=lease_duration)
    assert spec.holder == "me"
    assert spec.lease_duration_seconds >= lease_duration
    assert spec.transitions == record.spec.transitions + (0 if holder == "me" else 1)


@given(
    sent=times,
    latency=st.floats(0, 30, allow_nan=False),
    lease_duration=durations,
    renew_fraction=st.floats(0.05, 0.6),
    holder_rate=st.floats(0.98, 1.02),
    observer_rate=st.floats(0.98, 1.02),
)
def test_holder_always_steps_down_before_an_observer_may_take_over(
    sent: float,
    latency: float,
    lease_duration: float,
    renew_fraction: float,
    holder_rate: float,
    observer_rate: float,
) -> None:
    """Real time: the holder sends its last good renewal at ``sent``; an observer first sees it
    ``latency`` later. Each measures with a clock running at its own rate (±2 %)."""
    renew = lease_duration * renew_fraction
    margin = default_safety_margin(lease_duration, renew)
    assert (
        check_timings(lease_duration=lease_duration, renew_period=renew, safety_margin=margin)
        is None
    )
    holder_stops = (
        sent
        + (holder_deadline(0.0, lease_duration=lease_duration, safety_margin=margin)) / holder_rate
    )
    record = _record("holder", "9", seconds=lease_duration_seconds(lease_duration))
    seen = Observation("9", 0.0)
    observer_may = (
        sent
        + latency
        + expiry(record, seen, now=0.0, lease_duration=lease_duration) / observer_rate
    )
    assert holder_stops < observer_may


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


# --- one lease --------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_two_candidates_elect_exactly_one_leader_and_keep_it() -> None:
    store, journal, violations = FakeLeaseStore(), Journal(), list[str]()
    a, b = candidate(store, "a", journal), candidate(store, "b", journal)
    store.probes.append(one_leader_probe(lambda: (a, b), violations))
    async with a, b:
        await until(lambda: a.is_leader or b.is_leader, within=1.0)
        for _ in range(600):  # a minute: renewals keep the same leader, no churn
            assert [a.is_leader, b.is_leader].count(True) == 1
            await asyncio.sleep(0.1)
        assert len(journal.tenures) == 1
    assert violations == []
    record = store.read("wm-compiler")
    assert record is not None
    assert record.holder is None
    assert record.spec.transitions == 0


@pytest.mark.looptime
async def test_a_dead_leader_is_replaced_within_a_lease_duration() -> None:
    store, journal, violations = FakeLeaseStore(), Journal(), list[str]()
    api_a = FakeLeaseApi(store)
    a, b = candidate(store, "a", journal, api=api_a), candidate(store, "b", journal)
    store.probes.append(one_leader_probe(lambda: (a, b), violations))
    async with a:
        await until(lambda: a.is_leader, within=1.0)
        async with b:
            await asyncio.sleep(20.5)  # a few renewals into the lease
            assert a.is_leader
            assert not b.is_leader
            api_a.down = True  # a stops renewing and never releases
            killed = now()
            a_stopped = await until(lambda: not a.is_leader, within=LD)
            b_took = await until(lambda: b.is_leader, within=LD + RETRY + 0.1)
            assert b_took - killed <= LD + RETRY  # B polls every retry period
            assert a_stopped < b_took
            record = store.read("wm-compiler")
            assert record is not None
            assert record.holder == "b"
            assert record.spec.transitions == 1
    journal.assert_no_overlap()
    assert violations == []


@pytest.mark.looptime
async def test_a_released_lease_is_taken_over_at_once() -> None:
    store, journal = FakeLeaseStore(), Journal()
    a, b = candidate(store, "a", journal), candidate(store, "b", journal)
    async with b:
        await until(lambda: b.is_leader, within=1.0)
        async with a:
            await asyncio.sleep(5.0)
            assert b.is_leader
            assert not a.is_leader
            await b.__aexit__(None, None, None)  # graceful shutdown of the leader
            released = now()
            assert store.read("wm-compiler").holder is None  # type: ignore[union-attr]
            took = await until(lambda: a.is_leader, within=RETRY + 0.1)
            assert took - released <= RETRY + 0.02  # no expiry to wait for
    assert journal.events == [
        ("started", "b"),
        ("stopped", "b"),
        ("started", "a"),
        ("stopped", "a"),
    ]
    journal.assert_no_overlap()


@pytest.mark.looptime
async def test_a_conflict_on_renewal_ends_leadership_at_once() -> None:
    store, journal = FakeLeaseStore(), Journal()
    a = candidate(store, "a", journal)
    async with a:
        await until(lambda: a.is_leader, within=1.0)
        await asyncio.sleep(0.5)
        store.overwrite("wm-compiler", "intruder")  # e.g. an admin, or a split-brain writer
        taken = now()
        lost = await until(lambda: not a.is_leader, within=RENEW)
        assert lost - taken <= RENEW  # at the very next renewal, far before the deadline
        assert journal.events == [("started", "a"), ("stopped", "a")]
        await asyncio.sleep(LD - 1)
        assert not a.is_leader  # the intruder's lease is respected until it expires
        await until(lambda: a.is_leader, within=RETRY + 1.1)
    record = store.read("wm-compiler")
    assert record is not None
    assert record.holder is None


@pytest.mark.looptime
async def test_failing_renewals_end_leadership_before_anyone_may_take_over() -> None:
    store, journal, violations = FakeLeaseStore(), Journal(), list[str]()
    api_a = FakeLeaseApi(store)
    a, b = candidate(store, "a", journal, api=api_a), candidate(store, "b", journal)
    store.probes.append(one_leader_probe(lambda: (a, b), violations))
    async with a:
        await until(lambda: a.is_leader, within=1.0)
        async with b:
            await asyncio.sleep(3.2)  # just after a renewal at 3.0
            api_a.failing = True
            outage = now()
            lost = await until(lambda: not a.is_leader, within=LD)
            took = await until(lambda: b.is_leader, within=LD + RETRY + 0.1)
            margin = default_safety_margin(LD, RENEW)
            assert lost - outage <= LD - margin  # measured from the renewal sent at 3.0
            assert lost < took
            api_a.failing = False
    journal.assert_no_overlap()
    assert violations == []


class SlowThenSilent(FakeLeaseApi):
    """Answers the write after ``arm()`` ``delay`` seconds late, then never answers again."""

    def arm(self, delay: float) -> None:
        self.delay: float | None = delay

    async def replace(self, namespace: str, name: str, spec: LeaseSpec, **kw: Any) -> LeaseRecord:
        delay = getattr(self, "delay", None)
        result = await super().replace(namespace, name, spec, **kw)
        if delay is not None:
            self.sent_committed = now()
            await asyncio.sleep(delay)
            self.down = True
        return result


@pytest.mark.looptime
async def test_the_deadline_counts_from_when_the_renewal_was_sent() -> None:
    """A renewal answered 4 s late (more than the safety margin) must not extend leadership
    past sent + lease - margin: an observer saw the write as soon as it was made."""
    store, journal, violations = FakeLeaseStore(), Journal(), list[str]()
    api_a = SlowThenSilent(store)
    a = candidate(store, "a", journal, api=api_a)
    b = candidate(store, "b", journal, retry_period=0.1)
    store.probes.append(one_leader_probe(lambda: (a, b), violations))
    async with a:
        await until(lambda: a.is_leader, within=1.0)
        async with b:
            await asyncio.sleep(2.5)
            api_a.arm(4.0)  # the renewal sent at 3.0 is answered at 7.0, then silence
            lost = await until(lambda: not a.is_leader, within=2 * LD)
            took = await until(lambda: b.is_leader, within=2 * LD)
            sent = api_a.sent_committed
            assert lost <= sent + LD - default_safety_margin(LD, RENEW) + 0.011
            assert lost < took
    journal.assert_no_overlap()
    assert violations == []


@pytest.mark.looptime
async def test_the_safety_margin_absorbs_clocks_running_at_different_rates() -> None:
    """The holder's clock runs 2 % slow, the observer's 2 % fast and it polls every 0.1 s."""
    store, journal, violations = FakeLeaseStore(), Journal(), list[str]()
    api_a = FakeLeaseApi(store)
    a = candidate(store, "a", journal, api=api_a, clock=SkewedClock(rate=0.98))
    b = candidate(store, "b", journal, clock=SkewedClock(rate=1.02), retry_period=0.1)
    store.probes.append(one_leader_probe(lambda: (a, b), violations))
    async with a:
        await until(lambda: a.is_leader, within=1.0)
        async with b:
            renewals = len(store.history)
            await until(lambda: len(store.history) > renewals, within=RENEW + 1)
            api_a.down = True  # silent right after a renewal
            await until(lambda: b.is_leader, within=2 * LD)
            assert not a.is_leader
    journal.assert_no_overlap()
    assert violations == []


@pytest.mark.looptime
async def test_a_short_outage_does_not_cost_leadership() -> None:
    store, journal = FakeLeaseStore(), Journal()
    api_a = FakeLeaseApi(store)
    a, b = candidate(store, "a", journal, api=api_a), candidate(store, "b", journal)
    async with a:
        await until(lambda: a.is_leader, within=1.0)
        async with b:
            await asyncio.sleep(2.0)
            api_a.failing = True
            await asyncio.sleep(3.5)  # the renewal at 3 and its retries at 4, 5 fail; 6 is in time
            api_a.failing = False
            for _ in range(200):
                assert a.is_leader
                assert not b.is_leader
                await asyncio.sleep(0.1)
    assert journal.events[:1] == [("started", "a")]
    assert ("stopped", "a") not in journal.events[:-1]


@pytest.mark.looptime
async def test_leading_cancels_its_body_on_loss() -> None:
    store, journal = FakeLeaseStore(), Journal()
    api = FakeLeaseApi(store)
    a = candidate(store, "a", journal, api=api)
    cancelled_at: list[float] = []

    async def work() -> None:
        try:
            await asyncio.sleep(1e6)
        finally:
            cancelled_at.append(now())

    async with a:
        gained = await until(lambda: a.is_leader, within=1.0)
        api.down = True
        with pytest.raises(LeadershipLost):
            async with a.leading():
                await work()
        assert not a.is_leader
        deadline = gained + LD - default_safety_margin(LD, RENEW)
        assert cancelled_at == [pytest.approx(deadline, abs=0.011)]
        await asyncio.sleep(0.01)  # the step-down notifies once the body has ended
        assert journal.events == [("started", "a"), ("stopped", "a")]
        api.down = False
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@pytest.mark.looptime
async def test_run_while_leading_restarts_work_after_each_gain() -> None:
    store, journal = FakeLeaseStore(), Journal()
    api = FakeLeaseApi(store)
    a = candidate(store, "a", journal, api=api)
    runs: list[float] = []

    async def work() -> None:
        runs.append(now())
        if len(runs) == 2:
            return
        await asyncio.sleep(1e6)

    async def outage() -> None:
        await asyncio.sleep(5.0)
        api.failing = True
        await asyncio.sleep(10.0)
        api.failing = False

    async with a, asyncio.TaskGroup() as group:
        group.create_task(outage())
        await asyncio.wait_for(a.run_while_leading(work), timeout=60)
    assert len(runs) == 2
    assert runs[1] - runs[0] > LD - default_safety_margin(LD, RENEW) - RENEW
    assert journal.events == [
        ("started", "a"),
        ("stopped", "a"),
        ("started", "a"),
        ("stopped", "a"),
    ]


@pytest.mark.looptime
async def test_a_failing_callback_does_not_stop_the_campaign() -> None:
    store = FakeLeaseStore()

    async def boom() -> None:
        raise RuntimeError("callback bug")

    a = LeaderElector(
        FakeLeaseApi(store),
        namespace=NS,
        name="x",
        identity="a",
        on_started_leading=boom,
        on_stopped_leading=boom,
        **TIMING,  # type: ignore[arg-type]
    )
    async with a:
        await until(lambda: a.is_leader, within=1.0)
        await asyncio.sleep(30)
        assert a.is_leader


@pytest.mark.looptime
@pytest.mark.parametrize("seed", range(6))
async def test_never_two_leaders_under_jitter_skew_and_chaos(seed: int) -> None:
    """Three candidates; calls delayed up to 0.4 s each way, answers now and then slow (up to
    4 s) or lost; clocks running up to 4 % apart; every few seconds one candidate (the leader,
    more often than not) is partitioned, sees its calls fail, restarts, or crashes."""
    rng = random.Random(seed)
    store, journal, violations = FakeLeaseStore(), Journal(), list[str]()
    apis = {
        name: FakeLeaseApi(store, rng=rng, max_delay=0.4, slow=0.05, slow_answer=4.0, lose=0.03)
        for name in "abc"
    }
    clocks = {
        name: SkewedClock(rate=rng.uniform(0.98, 1.02), offset=rng.uniform(-1e3, 1e3))
        for name in "abc"
    }
    electors: dict[str, LeaderElector] = {}
    tasks: dict[str, asyncio.Task[None]] = {}

    def start(name: str) -> None:
        electors[name] = candidate(store, name, journal, api=apis[name], clock=clocks[name])
        tasks[name] = asyncio.create_task(electors[name].campaign())

    async def stop(name: str) -> None:
        tasks[name].cancel()
        await asyncio.gather(tasks[name], return_exceptions=True)

    store.probes.append(one_leader_probe(lambda: list(electors.values()), violations))
    for name in "abc":
        start(name)

    async def sample() -> None:
        while True:
            store.probe()
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    led = 0.0
    try:
        end = now() + 600
        while now() < end:
            leaders = [name for name, e in electors.items() if e.is_leader]
            victim = leaders[0] if leaders and rng.random() < 0.7 else rng.choice("abc")
            mishap = rng.choice(["partition", "failing", "restart", "crash", "nothing"])
            if mishap == "partition":
                apis[victim].down = True
                await asyncio.sleep(rng.uniform(1, 25))
                apis[victim].down = False
            elif mishap == "failing":
                apis[victim].failing = True
                await asyncio.sleep(rng.uniform(1, 15))
                apis[victim].failing = False
            elif mishap == "restart":
                await stop(victim)
                start(victim)
            elif mishap == "crash":  # dies without releasing, comes back later
                apis[victim].down = True
                await stop(victim)
                apis[victim].down = False
                await asyncio.sleep(rng.uniform(0, 15))
                start(victim)
            pause = rng.uniform(2, 20)
            before = now()
            while now() - before < pause:
                if any(e.is_leader for e in electors.values()):
                    led += 0.1
                await asyncio.sleep(0.1)
    finally:
        sampler.cancel()
        for name in "abc":
            await stop(name)
    assert violations == []
    journal.assert_no_overlap()
    holders = [r.holder for name, r in store.history if name == "wm-compiler"]
    expired = sum(1 for old, new in itertools.pairwise(holders) if old and new and old != new)
    print("takeovers of an expired lease:", expired, "tenures:", len(journal.tenures))
    assert expired >= 3  # the chaos did make candidates take over from a silent leader
    assert led > 0.5 * 600 * 0.5  # and someone led most of the quiet time


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
