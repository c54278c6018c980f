"""Cron schedules as Argo's CronWorkflow controller runs them, their next fire times and the
shortest time between two of their runs. Purely computational (the zone database is read, once
per zone, from the system or the ``tzdata`` package).

Argo parses each of ``spec.schedules`` with robfig/cron v3's ``ParseStandard`` and fires it in
``spec.timezone`` (``CRON_TZ=<zone> <expression>``). What we accept is that syntax, parsed here
with the same rules (``parse_cron``), and nothing we could not show the fire times of:

- five fields, ``minute hour day-of-month month day-of-week``, separated by blanks; each a list
  of ``*``, ``?`` (the same as ``*``), ``N`` or ``N-M``, each optionally ``/step`` (``N/step`` is
  ``N-max/step``); months ``JAN``-``DEC`` and days ``SUN``-``SAT`` by name in any case; Sunday is
  ``0`` (robfig refuses ``7``);
- ``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``.

Refused, with a sentence saying why: ``@every <duration>`` (Argo adds the entry to its cron
again whenever the CronWorkflow changes, which it does itself after every run, so an interval
counts from the last run or edit and no fire time can be shown or kept to: write ``*/10 * * *
*``), ``TZ=``/``CRON_TZ=`` prefixes (the zone is the schedule's ``timezone``), a seconds field,
and the ``L``, ``W`` and ``#`` of other crons, which robfig does not know.

When both day fields are restricted a day matches either; when one is ``*`` or ``?`` (without a
step) both must match, as robfig does (``*/2`` is a restriction there, unlike Debian's cron).

Fire times are every instant whose wall-clock time in the zone matches, as robfig computes them:
a time inside the hour skipped when daylight saving starts does not fire that day, and a time
inside the hour repeated when it ends fires twice, an hour apart. The iteration is cronsim's,
given each expression in its canonical six-field form (seconds ``0``): cronsim applies Debian
cron's daylight-saving adjustments only to five-field expressions, so in this form it walks real
time as robfig does (the unit tests hold both to a minute-by-minute reference).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import re
import zoneinfo
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

from cronsim import CronSim, CronSimError

from shared import time_zones
from shared.validation import invalid_fields

MINUTES_PER_DAY: Final = 24 * 60
DESCRIPTORS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS: Final = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_DAYS: Final = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_DAYS_IN_MONTH: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February: leap years


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_FIELDS: Final = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 6, _DAYS),
)
_NUMBER: Final = re.compile(r"^[0-9]{1,4}$")
_ZONE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$")
# Calendar days repeat their (day, month, weekday) pattern every 28 years between 1901 and 2099.
_CYCLE_START: Final = date(2001, 1, 1)
_CYCLE_DAYS: Final = (date(2029, 1, 1) - _CYCLE_START).days
# How far ahead the zone's daylight-saving transitions are looked at (the same cycle).
TRANSITION_YEARS: Final = 28
ONE_DAY: Final = timedelta(days=1)


class ScheduleError(ValueError):
    """A cron expression or zone we refuse; ``str(error)`` is the sentence for the tenant."""


@dataclass(frozen=True, slots=True)
class Cron:
    """One parsed expression: the values each field allows."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day_of_month: bool  # the field was `*` or `?` (robfig's "star bit")
    any_day_of_week: bool

    def fires_on(self, day: date) -> bool:
        """Whether the expression fires on this calendar day (robfig's ``dayMatches``)."""
        return self.matches(day.day, day.month, day.isoweekday() % 7)

    def matches(self, day: int, month: int, weekday: int) -> bool:
        """``fires_on`` for a date given as day of month, month and weekday (0 = Sunday)."""
        if month not in self.months:
            return False
        by_date = day in self.days
        by_weekday = weekday in self.weekdays
        if self.any_day_of_month or self.any_day_of_week:
            return by_date and by_weekday
        return by_date or by_weekday

    def times_of_day(self) -> tuple[int, ...]:
        """Minutes after midnight (wall clock) it fires at on a day it fires, ascending."""
        return tuple(sorted(h * 60 + m for h in self.hours for m in self.minutes))

    def canonical(self) -> str:
        """Six fields (seconds first) with explicit values, for cronsim: see the module docstring
        for why six; a restricted day field never starts with ``*``, so cronsim's choice
        between "both days" and "either day" is robfig's."""

        def field(values: frozenset[int], star: bool) -> str:
            return "*" if star else ",".join(str(value) for value in sorted(values))

        return " ".join(
            (
                "0",
                field(self.minutes, len(self.minutes) == 60),
                field(self.hours, len(self.hours) == 24),
                field(self.days, self.any_day_of_month),
                field(self.months, len(self.months) == 12),
                field(self.weekdays, self.any_day_of_week),
            )
        )


def _value(text: str, field: _Field) -> int:
    if field.names is not None and text.lower() in field.names:
        return field.names[text.lower()]
    if not _NUMBER.match(text):
        raise ScheduleError(f"{field.name}: {text!r} is not a number")
    return int(text)


def _part(text: str, field: _Field) -> tuple[set[int], bool]:
    """One comma-separated part of a field: its values and whether it was a bare star."""
    if not text:
        raise ScheduleError(f"{field.name}: empty list item")
    pieces = text.split("/")
    if len(pieces) > 2:
        raise ScheduleError(f"{field.name}: too many slashes in {text!r}")
    step = 1
    if len(pieces) == 2:
        if not _NUMBER.match(pieces[1]) or int(pieces[1]) == 0:
            raise ScheduleError(f"{field.name}: the step in {text!r} must be a positive number")
        step = int(pieces[1])
    span = pieces[0]
    star = span in ("*", "?")
    if star:
        low, high = field.low, field.high
    else:
        ends = span.split("-")
        if len(ends) > 2:
            raise ScheduleError(f"{field.name}: too many hyphens in {text!r}")
        low = _value(ends[0], field)
        high = _value(ends[1], field) if len(ends) == 2 else low
        if len(ends) == 1 and len(pieces) == 2:
            high = field.high  # "N/step" is "N-max/step"
        if low < field.low or high > field.high:
            raise ScheduleError(
                f"{field.name}: {text!r} is outside {field.low}-{field.high}"
                + (" (Sunday is 0)" if field.name == "day-of-week" and high == 7 else "")
            )
        if low > high:
            raise ScheduleError(f"{field.name}: {text!r} is a range that ends before it starts")
    return set(range(low, high + 1, step)), star and step == 1


def _field(text: str, field: _Field) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    star = False
    for part in text.split(","):
        found, bare = _part(part, field)
        values |= found
        star = star or bare
    return frozenset(values), star


def parse_cron(text: str) -> Cron:
    """One expression in robfig's standard syntax (the module docstring); ScheduleError names
    what is wrong in a sentence a tenant can act on."""
    spec = text.strip()
    if spec.upper().startswith(("TZ=", "CRON_TZ=")):
        raise ScheduleError("give the time zone in the schedule's timezone, not in the expression")
    if spec.startswith("@"):
        word = spec.split()[0].lower()
        if word == "@every":
            raise ScheduleError(
                "@every is not supported: Argo counts the interval from the CronWorkflow's last "
                "run or change, so its fire times cannot be known; write a cron expression "
                "such as */10 * * * *"
            )
        if spec.lower() not in DESCRIPTORS:
            known = ", ".join(DESCRIPTORS)
            raise ScheduleError(f"unknown descriptor {spec!r}: expected one of {known}")
        return _parsed(spec, DESCRIPTORS[spec.lower()])
    return _parsed(spec, spec)


def _parsed(text: str, spec: str) -> Cron:
    fields = spec.split()
    if len(fields) != len(_FIELDS):
        raise ScheduleError(
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    parsed = [_field(value, field) for value, field in zip(fields, _FIELDS, strict=True)]
    (minutes, _), (hours, _), (days, any_dom), (months, _), (weekdays, any_dow) = parsed
    cron = Cron(text, minutes, hours, days, months, weekdays, any_dom, any_dow)
    only_dates = any_dow and not any_dom  # both must match and every weekday matches
    if only_dates and not any(day <= _DAYS_IN_MONTH[m - 1] for m in months for day in days):
        raise ScheduleError("never fires: no month has that day")
    return cron


@functools.lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def time_zone(name: str) -> zoneinfo.ZoneInfo:
    """A zone of the zone database by name (``Europe/Helsinki``, ``UTC``), to compute fire times
    in; ScheduleError for anything else. What a schedule may be saved with is stricter:
    ``canonical_zone``."""
    if len(name) > 64 or not _ZONE.match(name) or name not in _zone_names():
        raise ScheduleError(f"{name!r} is not an IANA time zone name (such as Europe/Helsinki)")
    return zoneinfo.ZoneInfo(name)


def canonical_zone(name: str) -> zoneinfo.ZoneInfo:
    """``time_zone``, for a canonical IANA name only (``shared.time_zones``): not
    ``localtime``, ``Factory`` or an old name kept for compatibility (which the sentence names
    the current name of)."""
    reason = time_zones.refusal(name)
    if reason is not None:
        raise ScheduleError(reason)
    return time_zone(name)


# --- a schedule's check ------------------------------------------------------------------------


def _human(seconds: float) -> str:
    """``90`` -> ``1m30s``, ``3600`` -> ``1h``, as Go and our settings write durations."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return text + (f"{secs}s" if secs or not text else "")


def check(
    expressions: Sequence[str], timezone: str, *, min_interval: float, from_year: int
) -> list[Cron]:
    """A schedule's parsed expressions; Invalid (400, every error at once) naming each refused
    field otherwise: an expression we refuse (``schedule.cron[1]``), an unknown zone
    (``schedule.timezone``), an expression firing more often than ``min_interval`` seconds
    (``schedule.cron[1]``), or expressions doing so only together (``schedule.cron``)."""
    errors: list[dict[str, str]] = []
    crons: list[Cron] = []
    for index, text in enumerate(expressions):
        try:
            crons.append(parse_cron(text))
        except ScheduleError as error:
            errors.append({"field": f"schedule.cron[{index}]", "message": str(error)})
    try:
        zone = canonical_zone(timezone)
    except ScheduleError as error:
        errors.append({"field": "schedule.timezone", "message": str(error)})
        zone = None
    if not errors and zone is not None:
        floor = min_interval
        too_often = f"more often than every {_human(floor)} (SCHEDULE_MIN_INTERVAL)"
        # All together first (the common case passes on one computation), then each alone to
        # name the one at fault.
        try:
            gap = shortest_gap(crons, zone, from_year=from_year).total_seconds()
        except ScheduleError as error:  # parse_cron refuses what never fires; if not, say so
            errors.append({"field": "schedule.cron", "message": str(error)})
            gap = floor
        if gap < floor:
            for index, cron in enumerate(crons):
                alone = shortest_gap([cron], zone, from_year=from_year).total_seconds()
                if alone < floor:
                    message = f"fires {too_often}: runs can be {_human(alone)} apart"
                    errors.append({"field": f"schedule.cron[{index}]", "message": message})
            if not errors:
                message = f"together they fire {too_often}: runs can be {_human(gap)} apart"
                errors.append({"field": "schedule.cron", "message": message})
    if errors:
        raise invalid_fields("the schedule is invalid", errors)
    return crons


# --- fire times ------------------------------------------------------------------------------


def _fires(cron: Cron, zone: zoneinfo.ZoneInfo, after: datetime) -> Iterator[datetime]:
    try:
        for moment in CronSim(cron.canonical(), after.astimezone(zone)):
            # cronsim enters a day at its midnight even where the clock skips it (zones moving
            # at 00:00): a time that never shows on the clock is not a fire time (robfig skips
            # that day too).
            if moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == moment.replace(
                tzinfo=None
            ):
                yield moment
    except CronSimError as error:  # parse_cron refuses what cronsim would; say so if not
        raise ScheduleError(f"{cron.text!r}: {error}") from None


def _merged(streams: Iterable[Iterator[datetime]]) -> Iterator[datetime]:
    """Ascending, each instant once (two expressions firing together start one run: Argo
    names the run after the scheduled time, so the second submission is refused)."""
    # Compared in UTC: two datetimes of one zone compare by wall clock, fold ignored, so the
    # second 02:30 of the night daylight saving ends would "equal" the first.
    previous: datetime | None = None
    for moment in _heap_merge(streams):
        instant = moment.astimezone(UTC)
        if previous is None or instant != previous:
            yield moment
        previous = instant


def _heap_merge(streams: Iterable[Iterator[datetime]]) -> Iterator[datetime]:
    return heapq.merge(*streams, key=lambda moment: moment.astimezone(UTC))


def next_fire_times(
    crons: Sequence[Cron], zone: zoneinfo.ZoneInfo, after: datetime, count: int
) -> list[datetime]:
    """The next ``count`` fire times strictly after ``after`` (aware), in ``zone``."""
    streams = [_fires(cron, zone, after) for cron in crons]
    return list(itertools.islice(_merged(streams), count))


def fire_times_between(
    crons: Sequence[Cron], zone: zoneinfo.ZoneInfo, start: datetime, end: datetime
) -> list[datetime]:
    """Every fire time in ``(start, end]`` (aware), ascending, in ``zone``."""
    streams = [_fires(cron, zone, start) for cron in crons]
    limit = end.astimezone(UTC)
    return list(itertools.takewhile(lambda m: m.astimezone(UTC) <= limit, _merged(streams)))


# --- the shortest gap --------------------------------------------------------------------------


def shortest_gap(crons: Sequence[Cron], zone: zoneinfo.ZoneInfo, *, from_year: int) -> timedelta:
    """The shortest real time between two consecutive fire times of ``crons`` together, exact
    when it is under a day (longer ones are at least what is returned).

    Not by listing a year of fire times (half a million for ``* * * * *``) but from the fields:

    1. on the wall clock: the expressions firing on a day depend only on its date, month and
       weekday, which repeat every 28 years; over one such cycle, each set of expressions seen
       on a day gives the gaps between its times of day, and each set seen on the day after
       one gives the gap across midnight;
    2. daylight saving only changes a gap that spans the instant the clock moves (a gap inside
       the repeated hour spans it too), and such a gap, when shorter than the wall-clock one,
       lies within that gap (at most a day) of the instant plus the jump: for each transition
       of the zone in the ``TRANSITION_YEARS`` from ``from_year`` (the rules as the zone
       database knows them), the fire times in that window are listed and measured.
    """
    wall = _wall_clock_gap(crons)
    margin = min(wall, ONE_DAY)
    shortest = wall
    for instant, jump in zone_transitions(zone, from_year, from_year + TRANSITION_YEARS):
        window = margin + jump + timedelta(minutes=1)
        moments = fire_times_between(crons, zone, instant - window, instant + window)
        for earlier, later in itertools.pairwise(moments):
            shortest = min(shortest, later.astimezone(UTC) - earlier.astimezone(UTC))
    return shortest


def _wall_clock_gap(crons: Sequence[Cron]) -> timedelta:
    times = [cron.times_of_day() for cron in crons]
    signatures: dict[tuple[int, int, int], tuple[int, ...]] = {}
    seen: set[tuple[int, ...]] = set()
    pairs: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    previous: tuple[int, ...] = ()
    for offset in range(_CYCLE_DAYS + 1):
        day = _CYCLE_START + timedelta(days=offset)
        key = (day.day, day.month, day.isoweekday() % 7)
        current = signatures.get(key)
        if current is None:
            current = tuple(i for i, cron in enumerate(crons) if cron.matches(*key))
            signatures[key] = current
        if current:
            seen.add(current)
            if previous:
                pairs.add((previous, current))
        previous = current
    if not seen:
        raise ScheduleError("never fires")
    union = {key: sorted(set().union(*(times[i] for i in key))) for key in seen}
    shortest = MINUTES_PER_DAY * 366
    for values in union.values():
        for earlier, later in itertools.pairwise(values):
            shortest = min(shortest, later - earlier)
    for before, after in pairs:
        shortest = min(shortest, MINUTES_PER_DAY - union[before][-1] + union[after][0])
    return timedelta(minutes=shortest)


def zone_transitions(
    zone: zoneinfo.ZoneInfo, first_year: int, end_year: int
) -> list[tuple[datetime, timedelta]]:
    """The instants (UTC) in ``[first_year, end_year)`` at which ``zone``'s offset changes, with
    the size of each jump; found day by day, then to the second (one change per day at most)."""
    return list(_transitions(zone.key, first_year, end_year))


@functools.lru_cache(maxsize=256)
def _transitions(
    key: str, first_year: int, end_year: int
) -> tuple[tuple[datetime, timedelta], ...]:
    zone = zoneinfo.ZoneInfo(key)

    def offset(moment: datetime) -> timedelta:
        value = moment.astimezone(zone).utcoffset()
        return value if value is not None else timedelta(0)

    found = []
    moment = datetime(first_year, 1, 1, tzinfo=UTC)
    end = datetime(end_year, 1, 1, tzinfo=UTC)
    before = offset(moment)
    while moment < end:
        following = moment + ONE_DAY
        after = offset(following)
        if after != before:
            low, high = moment, following  # offset(low) == before, offset(high) == after
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if offset(middle) == before:
                    low = middle
                else:
                    high = middle
            found.append((high.replace(microsecond=0), abs(after - before)))
        moment, before = following, after
    return tuple(found)
