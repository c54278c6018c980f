"""Which time zone names a schedule may be saved with (``shared.time_zones`` through
``shared.schedules.check``): exhaustive over the zone database and the refused tables."""

from __future__ import annotations

import zoneinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import Invalid
from shared.schedules import ScheduleError, canonical_zone, check
from shared.time_zones import NOT_ZONES, RENAMED

DATABASE = sorted(zoneinfo.available_timezones())
ACCEPTED = [name for name in DATABASE if name not in RENAMED and name not in NOT_ZONES]


def refused_zone(name: str) -> str:
    with pytest.raises(Invalid) as raised:
        check(["0 2 * * *"], name, min_interval=300, from_year=2026)
    [error] = raised.value.details["errors"]
    assert error["field"] == "schedule.timezone"
    return str(error["message"])


@pytest.mark.parametrize("name", ["localtime", "Factory", "posixrules"])
def test_what_is_no_zone_is_refused_saying_why(name: str) -> None:
    message = refused_zone(name)
    assert message.startswith(f"{name!r} ")
    assert NOT_ZONES[name] in message


@pytest.mark.parametrize("name", sorted(RENAMED))
def test_every_old_name_is_refused_naming_the_current_one(name: str) -> None:
    current = RENAMED[name]
    assert refused_zone(name).endswith(f"write {current}")
    assert canonical_zone(current).key == current  # what we tell them to write is accepted


@pytest.mark.parametrize("name", ACCEPTED)
def test_every_other_name_of_the_zone_database_is_accepted(name: str) -> None:
    assert check(["0 2 * * *"], name, min_interval=300, from_year=2026)


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("UTC", True),  # Go resolves it without a zone database; the field's default
        ("Etc/UTC", True),
        ("GMT", True),
        ("Etc/GMT+5", True),
        ("Europe/Oslo", True),  # zone.tab's name for Norway, a link since 2022
        ("Asia/Istanbul", True),
        ("Europe/Nicosia", True),
        ("America/Argentina/Buenos_Aires", True),
        ("Europe/Kyiv", True),
        ("Europe/Kiev", False),
        ("Asia/Calcutta", False),
        ("US/Eastern", False),
        ("EST5EDT", False),
        ("GMT0", False),
        ("Zulu", False),
        ("America/Buenos_Aires", False),
        ("Etc/Unknown", False),  # CLDR's, not the zone database's
        ("Local", False),
        ("posix/Europe/Helsinki", False),
        ("right/UTC", False),
        ("utc", False),
    ],
)
def test_the_decided_cases(name: str, accepted: bool) -> None:
    if accepted:
        assert canonical_zone(name).key == name
    else:
        with pytest.raises(ScheduleError):
            canonical_zone(name)


def test_the_tables_name_only_what_the_database_holds_and_point_at_zones() -> None:
    database = set(DATABASE)
    assert set(RENAMED) <= database
    assert not set(RENAMED.values()) & set(RENAMED)
    assert not set(RENAMED.values()) & set(NOT_ZONES)


@given(st.text(max_size=40))
def test_any_other_text_is_accepted_only_as_a_zone_of_the_database(name: str) -> None:
    try:
        canonical_zone(name)
    except ScheduleError:
        assert name not in ACCEPTED
    else:
        assert name in ACCEPTED
