"""The page size rule every list shares (``apiserver.paging``)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.paging import DEFAULT_LIMIT, MAX_LIMIT, parse_limit
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
