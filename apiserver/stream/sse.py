"""Server-Sent Events framing and the Last-Event-ID header. Purely computational."""

from __future__ import annotations

import json
from typing import Any

from shared.errors import Invalid

HEARTBEAT = b": heartbeat\n\n"
MAX_EVENT_ID = 2**63 - 1


def frame(*, event: str, data: Any, event_id: int | None = None) -> bytes:
    """One SSE event. ``data`` is JSON-encoded on one line (JSON never needs a newline)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), default=str))
    return ("\n".join(lines) + "\n\n").encode()


def parse_last_event_id(value: str | None, *, parameter: str = "Last-Event-ID") -> int | None:
    """The seq a reconnecting client last saw; None when absent or empty. ``parameter`` names
    where it came from (the header, or the query parameter for clients that cannot set it)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit() or int(text) > MAX_EVENT_ID:
        raise Invalid(
            f"{parameter}: expected the id of an event of this stream",
            details={"parameter": parameter},
        )
    return int(text)
