"""SQL text helpers (shared.sql)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from shared.sql import contains_pattern, escape_like


def test_escape_like() -> None:
    assert escape_like("a%b_c\\d") == "a\\%b\\_c\\\\d"
    assert contains_pattern("50%") == "%50\\%%"


def like_matches(pattern: str, value: str) -> bool:
    """PostgreSQL's LIKE with backslash as the escape, as a regular expression."""
    regex, chars = "", iter(pattern)
    for char in chars:
        if char == "\\":
            regex += re.escape(next(chars, "\\"))
        elif char == "%":
            regex += ".*"
        elif char == "_":
            regex += "."
        else:
            regex += re.escape(char)
    return re.fullmatch(regex, value, re.DOTALL) is not None


@given(st.text(alphabet="ab%_\\", max_size=8), st.text(alphabet="ab%_\\", max_size=12))
def test_a_contains_pattern_matches_exactly_the_values_containing_the_text(
    text: str, value: str
) -> None:
    assert like_matches(contains_pattern(text), value) == (text in value)
