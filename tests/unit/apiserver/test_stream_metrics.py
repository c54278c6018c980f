"""The SSE hub's figures the ApiStreamHubBehind and ApiStreamOverflowing alerts read: when the
hub last read the change log to its end, streams cut off for falling behind, streams open."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from prometheus_client import REGISTRY

from apiserver.runs.query import RunFilters
from apiserver.scope import Scope
from apiserver.stream.hub import Change, StreamHub
from tests.unit.apiserver.test_stream_fanout import change


class Log:
    """A change log in memory."""

    def __init__(self, changes: list[Change]) -> None:
        self.changes = changes

    async def latest(self) -> int:
        return max((c.seq for c in self.changes), default=0)

    async def oldest(self) -> int | None:
        return min((c.seq for c in self.changes), default=None)

    async def changes_after(self, seq: int, *, limit: int) -> list[Change]:
        return [c for c in self.changes if c.seq > seq][:limit]

    async def grants_of(self, tenant: str) -> frozenset[tuple[str, str]]:
        return frozenset()

    def listening(
        self, wake: asyncio.Event, *, grants_changed: Callable[[str], None]
    ) -> AbstractAsyncContextManager[asyncio.Event]:
        raise AssertionError("not used")


def _value(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_catching_up_to_the_end_of_the_log_is_stamped() -> None:
    hub = StreamHub(Log([change(seq, "acme") for seq in range(1, 8)]), batch=3)
    before = time.time()
    await hub.catch_up()
    assert hub.position == 7
    assert _value("wm_api_stream_caught_up_timestamp_seconds") >= before


async def test_a_stream_a_whole_queue_behind_is_counted_once() -> None:
    hub = StreamHub(Log([]), queue_size=2)
    overflows = _value("wm_api_stream_overflows_total")
    slow = hub.subscribe(RunFilters(), Scope("acme"))
    assert _value("wm_api_stream_subscribers") == 1
    for seq in range(1, 6):
        hub.dispatch(change(seq, "acme"))
    assert slow.overflowed
    assert _value("wm_api_stream_overflows_total") - overflows == 1
    hub.unsubscribe(slow)
    assert _value("wm_api_stream_subscribers") == 0
