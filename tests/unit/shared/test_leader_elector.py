"""Leader election on one lease (LeaderElector) over the in-memory Lease API of ``_leases``:
election, takeover, step-down on conflict or failure, clock skew, work while leading, chaos."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest

from shared.leader import LeaderElector, LeadershipLost
from shared.leader_state import (
    LeaseRecord,
    LeaseSpec,
    default_safety_margin,
)
from tests.unit.shared._leases import (
    LD,
    NS,
    RENEW,
    RETRY,
    TIMING,
    FakeLeaseApi,
    FakeLeaseStore,
    Journal,
    SkewedClock,
    candidate,
    now,
    one_leader_probe,
    until,
)

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
