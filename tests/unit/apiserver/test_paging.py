"""The page size and cursor rules every list shares (``apiserver.paging``)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.paging import DEFAULT_LIMIT, MAX_LIMIT, parse_cursor, parse_limit
from shared.cursors import CursorCodec, cursor_key
from shared.errors import Invalid


@pytest.mark.parametrize(
    ("raw", "limit"),
    [(None, DEFAULT_LIMIT), ([], DEFAULT_LIMIT), (["1"], 1), ([" 20 "], 20), (["500"], 500)],
)
def test_a_limit_in_range_is_taken(raw: list[str] | None, limit: int) -> None:
    assert parse_limit(raw) == limit


@pytest.mark.parametrize(
    "raw",
    [["0"], ["501"], ["-1"], ["1.5"], [""], ["ten"], ["²"], ["\u0661\u0660"], ["5", "6"], ["0x10"]],
)
def test_anything_else_is_a_400_naming_limit(raw: list[str]) -> None:
    with pytest.raises(Invalid) as refused:
        parse_limit(raw)
    assert refused.value.details["parameter"] == "limit"


@given(st.lists(st.text(max_size=8), max_size=3))
def test_any_query_value_is_a_limit_or_a_400(raw: list[str]) -> None:
    with contextlib.suppress(Invalid):
        assert 1 <= parse_limit(raw) <= MAX_LIMIT


CODEC = CursorCodec(cursor_key("the-api-key"))


def test_no_cursor_is_the_first_page() -> None:
    assert parse_cursor(CODEC, None, bound_to="models|acme", shape=(str,)) is None
    assert parse_cursor(CODEC, [], bound_to="models|acme", shape=(str,)) is None


def test_a_cursor_given_once_carries_its_position() -> None:
    token = CODEC.encode(("churn", "m1"), bound_to="models|acme")
    position = parse_cursor(CODEC, [token], bound_to="models|acme", shape=(str, str))
    assert position == ("churn", "m1")


def test_a_cursor_given_twice_or_for_another_list_is_refused() -> None:
    token = CODEC.encode(("churn",), bound_to="models|acme")
    with pytest.raises(Invalid) as twice:
        parse_cursor(CODEC, [token, token], bound_to="models|acme", shape=(str,))
    assert twice.value.details == {"parameter": "cursor"}
    with pytest.raises(Invalid):
        parse_cursor(CODEC, [token], bound_to="models|globex", shape=(str,))
