"""A minimal Server-Sent Events reader for tests and benchmarks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass
class Event:
    event: str
    id: int | None
    data: Any


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[Event]:
    """Events (heartbeat comments skipped) until the server ends the stream."""
    fields: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n").rstrip("\r")
        if not line:
            if "event" in fields or "data" in fields:
                yield Event(
                    fields.get("event", "message"),
                    int(fields["id"]) if "id" in fields else None,
                    json.loads(fields["data"]) if "data" in fields else None,
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields[name] = value[1:] if value.startswith(" ") else value
