"""shared.schedules: robfig's cron syntax, fire times in a zone (daylight saving as robfig: a
skipped time does not fire, a repeated one fires twice) and the shortest gap between runs, each
held to a minute-by-minute reference."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shared.errors import Invalid
from shared.schedules import (
    Cron,
    ScheduleError,
    check,
    fire_times_between,
    next_fire_times,
    parse_cron,
    shortest_gap,
    time_zone,
    zone_transitions,
)

EVERY = (
    "@every is not supported: Argo counts the interval from the CronWorkflow's last run or "
    "change, so its fire times cannot be known; write a cron expression such as */10 * * * *"
)
ZONES = (
    "UTC",
    "Europe/Berlin",
    "Europe/Helsinki",
    "America/New_York",
    "America/Santiago",  # moves at midnight
    "America/St_Johns",  # -3:30
    "Asia/Kolkata",
)
# Not Australia/Lord_Howe: its clock moves by half an hour, and robfig, stepping hours in real
# time, misses the half hour after the clock moves back, as cronsim does; the reference, every
# matching minute, does not (test_a_half_hour_jump_steps_as_robfig).


def reference(crons: list[Cron], zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Every whole minute in (start, end] whose wall clock in ``zone`` matches: robfig's rule."""
    found = []
    moment = start.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    while moment <= end:
        local = moment.astimezone(zone)
        weekday = local.isoweekday() % 7
        if any(
            local.minute in c.minutes
            and local.hour in c.hours
            and c.matches(local.day, local.month, weekday)
            for c in crons
        ):
            found.append(moment)
        moment += timedelta(minutes=1)
    return found


def utc(moments: list[datetime]) -> list[datetime]:
    return [moment.astimezone(UTC) for moment in moments]


# --- syntax ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "values"),
    [
        ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
        ("5/15 * * * *", "minutes", {5, 20, 35, 50}),  # N/step is N-max/step
        ("1-10/4 * * * *", "minutes", {1, 5, 9}),
        ("0 9-17 * * *", "hours", set(range(9, 18))),
        ("0 0 * JAN,jul-Sep *", "months", {1, 7, 8, 9}),
        ("0 0 * * mon-FRI", "weekdays", {1, 2, 3, 4, 5}),
        ("0 0 * * sun", "weekdays", {0}),
        ("0 0 ? * 1", "weekdays", {1}),
        ("0 0 * * */90", "weekdays", {0}),  # a step larger than the range: the first value
    ],
)
def test_fields_parse_as_robfig(text: str, field: str, values: set[int]) -> None:
    assert getattr(parse_cron(text), field) == frozenset(values)


@pytest.mark.parametrize(
    ("descriptor", "same_as"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_descriptors(descriptor: str, same_as: str) -> None:
    assert parse_cron(descriptor).canonical() == parse_cron(same_as).canonical()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("@every 5m", "@every is not supported"),
        ("@every 1h30m", "@every is not supported"),
        ("@often", "unknown descriptor"),
        ("CRON_TZ=Europe/Helsinki 0 2 * * *", "timezone"),
        ("TZ=UTC 0 2 * * *", "timezone"),
        ("0 0 2 * * *", "expected 5 fields"),  # seconds
        ("0 2 * *", "expected 5 fields"),
        ("", "expected 5 fields"),
        ("60 * * * *", "minute: '60' is outside 0-59"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * 32 * *", "day-of-month"),
        ("* * * 13 *", "month"),
        ("* * * * 7", "Sunday is 0"),
        ("* * * * 5-7", "Sunday is 0"),
        ("5-1 * * * *", "ends before it starts"),
        ("1-2-3 * * * *", "too many hyphens"),
        ("*/2/3 * * * *", "too many slashes"),
        ("*/0 * * * *", "positive"),
        ("*/x * * * *", "positive"),
        ("1,,2 * * * *", "empty list item"),
        ("x * * * *", "not a number"),
        ("0 0 L * *", "not a number"),
        ("0 0 * * MON#2", "not a number"),
        ("0 0 15W * *", "not a number"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30,31 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
    ],
)
def test_refusals_say_why(text: str, says: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_cron(text)
    assert says in str(caught.value)


def test_a_date_that_exists_in_some_month_or_on_a_weekday_fires() -> None:
    parse_cron("0 0 31 1-12 *")
    parse_cron("0 0 29 2 *")  # leap years
    parse_cron("0 0 31 2 MON")  # either day field: Mondays of February


@pytest.mark.parametrize(
    ("text", "both"),
    [
        ("0 0 1 * MON", False),  # both restricted: either
        ("0 0 * * MON", True),
        ("0 0 ? * MON", True),
        ("0 0 1 * *", True),
        ("0 0 */2 * MON", False),  # robfig: a stepped star is a restriction (Debian: "both")
        ("0 0 1 * */1", True),
        ("0 0 1 * 1,*", True),
    ],
)
def test_the_day_fields_combine_as_robfig(text: str, both: bool) -> None:
    cron = parse_cron(text)
    assert (cron.any_day_of_month or cron.any_day_of_week) is both
    monday_the_2nd = datetime(2026, 2, 2).date()
    if text == "0 0 1 * MON":
        assert cron.fires_on(monday_the_2nd)  # a Monday, not the 1st
    if text == "0 0 */2 * MON":
        assert cron.fires_on(monday_the_2nd)  # an even day, but a Monday
        assert cron.fires_on(datetime(2026, 2, 3).date())  # odd day, a Tuesday


@pytest.mark.parametrize("name", ["Europe/Helsinki", "UTC", "America/Argentina/Buenos_Aires"])
def test_iana_zones(name: str) -> None:
    assert time_zone(name).key == name


@pytest.mark.parametrize(
    "name", ["Mars/Olympus", "../etc/passwd", "/usr/share/zoneinfo/UTC", "", "UTC " * 20, "+03"]
)
def test_other_zone_names_are_refused(name: str) -> None:
    with pytest.raises(ScheduleError, match="not an IANA time zone"):
        time_zone(name)


# --- fire times ----------------------------------------------------------------------------------


def test_next_fire_times_in_the_zone_with_their_offset() -> None:
    helsinki = time_zone("Europe/Helsinki")
    after = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    times = next_fire_times([parse_cron("0 2 * * *")], helsinki, after, 3)
    assert [t.isoformat() for t in times] == [
        "2026-03-28T02:00:00+02:00",
        "2026-03-29T02:00:00+02:00",  # 03:00 -> 04:00 that night: 02:00 still exists
        "2026-03-30T02:00:00+03:00",
    ]


def test_a_time_in_the_skipped_hour_does_not_fire_that_day() -> None:
    helsinki = time_zone("Europe/Helsinki")  # 2026-03-29 03:00 EET -> 04:00 EEST
    times = next_fire_times([parse_cron("30 3 * * *")], helsinki, datetime(2026, 3, 28), 2)
    assert [t.isoformat() for t in times] == [
        "2026-03-28T03:30:00+02:00",
        "2026-03-30T03:30:00+03:00",
    ]


def test_a_time_in_the_repeated_hour_fires_twice() -> None:
    helsinki = time_zone("Europe/Helsinki")  # 2026-10-25 04:00 EEST -> 03:00 EET
    after = datetime(2026, 10, 24, 12, tzinfo=UTC)
    times = next_fire_times([parse_cron("30 3 * * *")], helsinki, after, 3)
    assert [t.isoformat() for t in times] == [
        "2026-10-25T03:30:00+03:00",
        "2026-10-25T03:30:00+02:00",
        "2026-10-26T03:30:00+02:00",
    ]


def test_a_midnight_the_clock_skips_does_not_fire() -> None:
    santiago = time_zone("America/Santiago")
    spring = next(t for t, _ in zone_transitions(santiago, 2026, 2027) if t.month in (8, 9))
    day_before = spring - timedelta(hours=12)
    times = next_fire_times([parse_cron("0 0 * * *")], santiago, day_before, 2)
    assert all(t.hour == 0 for t in times)
    assert times[0].astimezone(UTC) > spring + timedelta(hours=12)


def test_two_expressions_firing_together_fire_once() -> None:
    crons = [parse_cron("0 * * * *"), parse_cron("0 */2 * * *")]
    times = next_fire_times(crons, time_zone("UTC"), datetime(2026, 1, 1, tzinfo=UTC), 4)
    assert [t.hour for t in times] == [1, 2, 3, 4]


def test_fire_times_between_is_inclusive_of_its_end() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    times = fire_times_between(
        [parse_cron("*/30 * * * *")], time_zone("UTC"), start, start + timedelta(hours=1)
    )
    assert [t.minute for t in times] == [30, 0]


FIELD_VALUES = {
    "minute": (0, 59),
    "hour": (0, 23),
    "day": (1, 31),
    "month": (1, 12),
    "weekday": (0, 6),
}


@st.composite
def fields(draw: st.DrawFn, low: int, high: int, star_weight: int = 2) -> str:
    kind = draw(st.integers(0, 4 + star_weight))
    if kind >= 5:
        return draw(st.sampled_from(["*", "?"]))
    if kind == 0:
        return f"*/{draw(st.integers(1, high - low + 2))}"
    if kind == 1:
        first = draw(st.integers(low, high))
        return f"{first}-{draw(st.integers(first, high))}/{draw(st.integers(1, 7))}"
    if kind == 2:
        return f"{draw(st.integers(low, high))}/{draw(st.integers(1, 20))}"
    values = draw(st.lists(st.integers(low, high), min_size=1, max_size=4))
    return ",".join(str(value) for value in values)


@st.composite
def expressions(draw: st.DrawFn) -> str:
    parts = [
        draw(fields(0, 59, star_weight=0)),
        draw(fields(0, 23, star_weight=1)),
        draw(fields(1, 31, star_weight=3)),
        draw(fields(1, 12, star_weight=4)),
        draw(fields(0, 6, star_weight=3)),
    ]
    return " ".join(parts)


def parsed(texts: list[str]) -> list[Cron]:
    crons = []
    for text in texts:
        try:
            crons.append(parse_cron(text))
        except ScheduleError:
            assume(False)
    return crons


def _near_a_transition(zone: ZoneInfo, index: int, year: int) -> datetime:
    transitions = zone_transitions(zone, year, year + 1)
    if not transitions:
        return datetime(year, 6, 1, tzinfo=UTC)
    return transitions[index % len(transitions)][0]


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(expressions(), min_size=1, max_size=3),
    zone_name=st.sampled_from(ZONES),
    year=st.integers(2026, 2032),
    which=st.integers(0, 3),
    shift=st.integers(-36 * 60, 12 * 60),
)
def test_fire_times_are_the_reference_around_transitions(
    texts: list[str], zone_name: str, year: int, which: int, shift: int
) -> None:
    crons = parsed(texts)
    zone = time_zone(zone_name)
    start = _near_a_transition(zone, which, year) + timedelta(minutes=shift, seconds=17)
    end = start + timedelta(hours=48)
    assert utc(fire_times_between(crons, zone, start, end)) == reference(crons, zone, start, end)
    expected = reference(crons, zone, start, end)[:5]
    if len(expected) == 5:
        assert utc(next_fire_times(crons, zone, start, 5)) == expected


# --- the shortest gap -------------------------------------------------------------------------


def minimum(moments: list[datetime]) -> timedelta | None:
    gaps = [later - earlier for earlier, later in itertools.pairwise(moments)]
    return min(gaps) if gaps else None


@pytest.mark.parametrize(
    ("texts", "zone", "gap"),
    [
        (["* * * * *"], "UTC", timedelta(minutes=1)),
        (["*/5 * * * *"], "Europe/Berlin", timedelta(minutes=5)),
        (["*/7 * * * *"], "UTC", timedelta(minutes=4)),  # :56 -> :00
        (["0 2 * * *"], "UTC", timedelta(days=1)),
        (["0 3 * * *"], "Europe/Helsinki", timedelta(hours=1)),  # fires twice one night
        (["0 5 * * *"], "Europe/Helsinki", timedelta(days=1) - timedelta(hours=1)),
        (["0,59 3 * * *"], "Europe/Helsinki", timedelta(minutes=1)),  # 03:59 EEST, 03:00 EET
        (["58 2 * * *", "2 4 * * *"], "Europe/Helsinki", timedelta(minutes=4)),  # 03:xx skipped
        (["0 0 * * *", "0 12 * * *"], "UTC", timedelta(hours=12)),
        (["55 23 * * *", "0 0 * * *"], "UTC", timedelta(minutes=5)),  # across midnight
        (["55 23 * * MON", "0 0 * * TUE"], "UTC", timedelta(minutes=5)),
        (["55 23 * * MON", "0 0 * * MON"], "UTC", timedelta(hours=23, minutes=55)),
        (["30 23 31 * *", "0 0 1 * *"], "UTC", timedelta(minutes=30)),  # 31st, then the 1st
        (["0 0 1 * *"], "UTC", timedelta(days=28)),
        (["0 0 29 2 *"], "UTC", timedelta(days=366 * 4 - 1)),
        (["0 0 */2 * MON"], "UTC", timedelta(days=1)),  # odd days or Mondays
        (["15,45 * * * *"], "Australia/Lord_Howe", timedelta(minutes=30)),  # 30-minute jumps
    ],
)
def test_shortest_gaps(texts: list[str], zone: str, gap: timedelta) -> None:
    found = shortest_gap([parse_cron(t) for t in texts], time_zone(zone), from_year=2026)
    if gap < timedelta(days=1):
        assert found == gap
    else:
        assert found >= min(gap, timedelta(days=1))


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(expressions(), min_size=1, max_size=3),
    zone_name=st.sampled_from(ZONES),
    which=st.integers(0, 3),
)
def test_no_window_shows_a_gap_shorter_than_the_shortest(
    texts: list[str], zone_name: str, which: int
) -> None:
    crons = parsed(texts)
    zone = time_zone(zone_name)
    start = _near_a_transition(zone, which, 2027) - timedelta(hours=30)
    seen = minimum(reference(crons, zone, start, start + timedelta(hours=60)))
    found = shortest_gap(crons, zone, from_year=2026)
    if seen is not None:
        assert found <= seen


@settings(max_examples=40, deadline=None)
@given(
    minute=fields(0, 59, star_weight=0),
    hour=fields(0, 23, star_weight=1),
    zone_name=st.sampled_from(ZONES),
)
def test_a_daily_schedule_s_gap_is_what_the_transitions_show(
    minute: str, hour: str, zone_name: str
) -> None:
    """Every day alike: the windows around a year's transitions (and a plain day) hold every
    kind of gap there is, so the shortest seen there is the shortest."""
    crons = parsed([f"{minute} {hour} * * *"])
    zone = time_zone(zone_name)
    moments = []
    starts = [t - timedelta(hours=30) for t, _ in zone_transitions(zone, 2027, 2028)]
    seen = []
    for start in [datetime(2027, 7, 1, tzinfo=UTC), *starts]:
        moments = reference(crons, zone, start, start + timedelta(hours=60))
        gap = minimum(moments)
        if gap is not None:
            seen.append(gap)
    found = shortest_gap(crons, zone, from_year=2027)
    if seen and min(seen) < timedelta(days=1):
        assert found == min(seen)


def test_a_half_hour_jump_steps_as_robfig() -> None:
    """Lord Howe moves back from 02:00 to 01:30: robfig's hour loop goes 01:00 + 1h = 01:30 (the
    second time) + 1h = 02:30, so 02:00-02:29 of that night never fire; cronsim steps alike."""
    lord_howe = time_zone("Australia/Lord_Howe")
    after = datetime(2026, 4, 4, 14, 10, tzinfo=UTC)  # 01:10 +11:00
    times = next_fire_times([parse_cron("*/15 2 * * *")], lord_howe, after, 2)
    assert [t.isoformat() for t in times] == [
        "2026-04-05T02:30:00+10:30",
        "2026-04-05T02:45:00+10:30",
    ]


def test_transitions_are_found_to_the_second() -> None:
    helsinki = ZoneInfo("Europe/Helsinki")
    transitions = zone_transitions(helsinki, 2026, 2027)
    assert transitions == [
        (datetime(2026, 3, 29, 1, 0, tzinfo=UTC), timedelta(hours=1)),
        (datetime(2026, 10, 25, 1, 0, tzinfo=UTC), timedelta(hours=1)),
    ]
    assert zone_transitions(ZoneInfo("UTC"), 2026, 2054) == []


# --- a pipeline schedule's check -------------------------------------------------------------


def errors_of(
    expressions: list[str], zone: str = "UTC", floor: float = 300
) -> list[dict[str, str]]:
    with pytest.raises(Invalid) as caught:
        check(expressions, zone, min_interval=floor, from_year=2026)
    return list(caught.value.details["errors"])


def test_a_schedule_at_the_floor_passes() -> None:
    crons = check(["*/5 * * * *", "@daily"], "Europe/Helsinki", min_interval=300, from_year=2026)
    assert [cron.text for cron in crons] == ["*/5 * * * *", "@daily"]


def test_every_error_is_named_by_its_field_at_once() -> None:
    assert errors_of(["0 2 * * *", "@every 1h", "0 2 * * 7"], zone="Mars/Base") == [
        {"field": "schedule.cron[1]", "message": EVERY},
        {"field": "schedule.cron[2]", "message": "day-of-week: '7' is outside 0-6 (Sunday is 0)"},
        {
            "field": "schedule.timezone",
            "message": "'Mars/Base' is not an IANA time zone name (such as Europe/Helsinki)",
        },
    ]


def test_an_expression_too_frequent_alone_is_named() -> None:
    assert errors_of(["@hourly", "*/4 * * * *"]) == [
        {
            "field": "schedule.cron[1]",
            "message": "fires more often than every 5m (SCHEDULE_MIN_INTERVAL): "
            "runs can be 4m apart",
        }
    ]


def test_expressions_too_frequent_together_name_the_list() -> None:
    assert errors_of(["0 * * * *", "2 * * * *"]) == [
        {
            "field": "schedule.cron",
            "message": "together they fire more often than every 5m (SCHEDULE_MIN_INTERVAL): "
            "runs can be 2m apart",
        }
    ]


def test_daylight_saving_counts_against_the_floor() -> None:
    """03:59 EEST then 03:00 EET an hour... and a minute later: a night's repeated hour."""
    assert errors_of(["0,59 3 * * *"], zone="Europe/Helsinki", floor=3000)[0]["field"] == (
        "schedule.cron[0]"
    )
    check(["0,59 3 * * *"], "UTC", min_interval=3000, from_year=2026)


def test_the_floor_is_configurable() -> None:
    check(["*/2 * * * *"], "UTC", min_interval=120, from_year=2026)
    assert errors_of(["0 */2 * * *"], floor=3 * 3600)[0]["message"].endswith("2h apart")
