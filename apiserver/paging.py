"""The page size and the cursor every keyset-paginated list takes: one rule for all of them.
Purely computational."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from shared.cursors import CursorCodec, Position
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


def parse_cursor(
    codec: CursorCodec, raw: Sequence[str] | None, *, bound_to: str, shape: Sequence[type]
) -> Position | None:
    """The position ``cursor`` (from its query values) carries: absent → None; given once, the
    position signed for ``bound_to`` (another list's, tenant's or filters' cursor is refused)."""
    if not raw:
        return None
    if len(raw) > 1:
        raise Invalid("cursor: may be given once", details={"parameter": "cursor"})
    return codec.decode(raw[0], bound_to=bound_to, shape=shape)
