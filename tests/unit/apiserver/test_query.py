"""Filter parsing, keyset cursors, SQL building and in-memory matching of the run list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.paging import MAX_LIMIT
from apiserver.runs.query import (
    Cursor,
    Page,
    RunFilters,
    count_query,
    list_query,
    matches,
    next_cursor,
    parse_filters,
    parse_page,
    summary_query,
)
from apiserver.scope import Scope
from shared.cursors import CursorCodec
from shared.errors import Invalid

CODEC = CursorCodec(b"k" * 32)

T0 = datetime(2025, 3, 14, 12, tzinfo=UTC)


def test_parses_every_filter() -> None:
    filters = parse_filters(
        {
            "cluster": ["c1,c2", "c3"],
            "region": ["eu"],
            "provider": ["aws"],
            "phase": ["failed", "Running"],
            "source": ["ml_pipeline"],
            "template": ["etl"],
            "pipeline": ["p-1"],
            "namespace": ["ns"],
            "q": ["  nightly  "],
            "started_after": ["2025-03-14T10:00:00Z"],
            "started_before": ["2025-03-14T13:00:00+02:00"],
        }
    )
    assert filters.clusters == ("c1", "c2", "c3")
    assert filters.phases == ("Failed", "Running")
    assert filters.text == "nightly"
    assert filters.started_after == datetime(2025, 3, 14, 10, tzinfo=UTC)
    assert filters.started_before == datetime(2025, 3, 14, 11, tzinfo=UTC)


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"phase": ["Done"]}, "phase"),
        ({"source": ["ML_PIPELINE"]}, "source"),
        ({"cluster": ["a,,b"]}, "cluster"),
        ({"cluster": [",".join(str(i) for i in range(51))]}, "cluster"),
        ({"template": ["x" * 254]}, "template"),
        ({"template": ["bad\x00"]}, "template"),
        ({"q": [" "]}, "q"),
        ({"q": ["a", "b"]}, "q"),
        ({"q": ["x" * 201]}, "q"),
        ({"started_after": ["2025-03-14"]}, "started_after"),
        ({"started_after": ["2025-03-14T10:00:00"]}, "started_after"),
        ({"started_before": ["soon"]}, "started_before"),
        (
            {"started_after": ["2025-03-14T10:00:00Z"], "started_before": ["2025-03-14T10:00:00Z"]},
            "started_before",
        ),
    ],
)
def test_bad_filters_name_the_parameter(params: dict[str, list[str]], parameter: str) -> None:
    with pytest.raises(Invalid) as raised:
        parse_filters(params)
    assert raised.value.details["parameter"] == parameter


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"limit": ["0"]}, "limit"),
        ({"limit": [str(MAX_LIMIT + 1)]}, "limit"),
        ({"limit": ["ten"]}, "limit"),
        ({"limit": ["\u0661"]}, "limit"),  # a digit, but not an ASCII one
        ({"order": ["up"]}, "order"),
        ({"cursor": ["!!"]}, "cursor"),
    ],
)
def test_bad_pages(params: dict[str, list[str]], parameter: str) -> None:
    with pytest.raises(Invalid) as raised:
        parse_page(params, RunFilters(), codec=CODEC, tenant="acme")
    assert raised.value.details["parameter"] == parameter


timestamps = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


@given(
    timestamps,
    st.integers(min_value=0, max_value=2**62),
    st.sampled_from(["asc", "desc"]),
    st.none() | st.text(max_size=20),
)
def test_cursor_round_trip(sort_at: datetime, run_id: int, order: str, tenant: str | None) -> None:
    cursor = Cursor(sort_at=sort_at, id=run_id)
    page = parse_page({"order": [order]}, RunFilters(), codec=CODEC, tenant=tenant)
    token = next_cursor(cursor, RunFilters(), page, codec=CODEC, tenant=tenant)
    params = {"order": [order], "cursor": [token]}
    assert parse_page(params, RunFilters(), codec=CODEC, tenant=tenant).after == cursor


@given(st.text(max_size=80))
def test_garbage_cursors_are_invalid_never_a_crash(token: str) -> None:
    try:
        parse_page({"cursor": [token]}, RunFilters(), codec=CODEC, tenant=None)
    except Invalid as exc:
        details = exc.details
    else:
        return
    assert details["parameter"] == "cursor"


def test_cursor_from_other_filters_order_or_tenant_is_refused() -> None:
    token = next_cursor(Cursor(T0, 1), RunFilters(), Page(), codec=CODEC, tenant="acme")
    for params, filters, tenant in (
        ({"cursor": [token]}, RunFilters(phases=("Failed",)), "acme"),
        ({"cursor": [token], "order": ["asc"]}, RunFilters(), "acme"),
        ({"cursor": [token]}, RunFilters(), "globex"),
        ({"cursor": [token]}, RunFilters(), None),
    ):
        with pytest.raises(Invalid):
            parse_page(params, filters, codec=CODEC, tenant=tenant)
    after = parse_page({"cursor": [token]}, RunFilters(), codec=CODEC, tenant="acme").after
    assert after == Cursor(T0, 1)


def test_fingerprint_ignores_value_order() -> None:
    a = RunFilters(clusters=("a", "b")).fingerprint("desc")
    assert a == RunFilters(clusters=("b", "a")).fingerprint("desc")
    assert a != RunFilters(clusters=("a",)).fingerprint("desc")


def test_sql_is_parameterised() -> None:
    evil = "x'; DROP TABLE runs; --"
    filters = RunFilters(templates=(evil,), text="50%_off", clusters=("a", "b"))
    scope = Scope("acme", frozenset({("c2", "argo")}))
    query = list_query(filters, scope, Page(limit=10, after=Cursor(T0, 5)))
    assert evil not in query.sql
    assert "%50\\%\\_off%" in query.args
    assert "(tenant = $1 OR (cluster_id = $2 AND namespace = $3))" in query.sql
    assert query.args[-1] == 11
    assert "ORDER BY" in query.sql
    assert "LIMIT" in query.sql
    assert count_query(filters, Scope(None), cap=5).args[-1] == 6
    assert "tenant" not in count_query(RunFilters(), Scope(None)).sql
    assert "GROUP BY phase" in summary_query(filters, scope, since=T0).sql


ROW = {
    "cluster_id": "c1",
    "namespace": "kubeopera-data-acme",
    "name": "etl-nightly-x1",
    "tenant": "acme",
    "region": "eu",
    "provider": "aws",
    "phase": "Failed",
    "source": "pipeline",
    "template": "etl",
    "pipeline_id": "p-1",
    "sort_at": T0,
}


@pytest.mark.parametrize(
    ("filters", "scope", "expected"),
    [
        (RunFilters(), Scope(None), True),
        (RunFilters(), Scope("acme"), True),
        (RunFilters(), Scope("globex"), False),
        (RunFilters(), Scope("globex", frozenset({("c1", "kubeopera-data-acme")})), True),
        (RunFilters(phases=("Running",)), Scope(None), False),
        (RunFilters(phases=("Running", "Failed")), Scope(None), True),
        (RunFilters(clusters=("c2",)), Scope(None), False),
        (RunFilters(text="NIGHTLY"), Scope(None), True),
        (RunFilters(text="p-1"), Scope(None), True),
        (RunFilters(text="zzz"), Scope(None), False),
        (RunFilters(started_after=T0), Scope(None), True),
        (RunFilters(started_before=T0), Scope(None), False),
        (RunFilters(started_after=T0 + timedelta(seconds=1)), Scope(None), False),
        (RunFilters(pipelines=("p-1",), templates=("etl",)), Scope(None), True),
    ],
)
def test_matches_mirrors_the_sql(filters: RunFilters, scope: Scope, expected: bool) -> None:
    assert matches(filters, scope, ROW) is expected
