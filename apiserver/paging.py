"""The page size every keyset-paginated list takes: one rule for all of them. Purely
computational."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from shared.errors import Invalid

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500


def parse_limit(raw: Sequence[str] | None) -> int:
    """``limit`` from its query values: absent → the default; once, an integer in range."""
    if not raw:
        return DEFAULT_LIMIT
    text = raw[0].strip() if len(raw) == 1 else ""
    # isascii first: str.isdigit accepts "²", which int() refuses.
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise Invalid(
            f"limit: expected an integer from 1 to {MAX_LIMIT}, given once",
            details={"parameter": "limit", "value": raw[0][:100]},
        )
    return int(text)
