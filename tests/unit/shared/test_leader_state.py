"""Leader election, the pure decision core (shared.leader_state): decisions, lease specs,
timings, fair shares, lease names, and the properties that keep two leaders apart."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import ConfigError
from shared.leader import LeaderElector
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
from tests.unit.shared._leases import (
    NS,
    T0,
    FakeLeaseApi,
    FakeLeaseStore,
)


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
