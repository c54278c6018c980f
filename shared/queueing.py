"""A coalescing work queue: one entry per key, the latest value wins.

Informers put every watch event here; the writer drains batches. Because a key appears at most
once, a flood of updates to one workflow costs one write, and the queue can never grow beyond
the number of distinct workflows, whatever the event rate or however long PostgreSQL is down.
Purely in-memory: no I/O.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(slots=True)
class Pending(Generic[V]):
    value: V
    first_seen: float  # monotonic time of the oldest change not yet written (for lag metrics)


class CoalescingQueue(Generic[K, V]):
    """Latest-value-wins queue keyed by K, drained in insertion order of first unwritten change."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._items: dict[K, Pending[V]] = {}
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._clock = clock

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: K, value: V) -> None:
        pending = self._items.get(key)
        if pending is None:
            self._items[key] = Pending(value, self._clock())
        else:
            pending.value = value  # keep first_seen: the lag counts from the first change
        self._ready.set()

    async def put_when_room(self, key: K, value: V, *, high_water: int) -> None:
        """Like ``put``, but a new key waits while ``high_water`` keys are queued, so a relist
        of thousands of workflows never holds them all in memory at once."""
        while key not in self._items and len(self._items) >= high_water:
            self._room.clear()
            await self._room.wait()
        self.put(key, value)

    def discard_where(self, predicate: Callable[[K], bool]) -> int:
        """Drop the keys matching ``predicate`` (a cluster that is no longer ours)."""
        doomed = [key for key in self._items if predicate(key)]
        for key in doomed:
            del self._items[key]
        self._room.set()
        return len(doomed)

    async def wait(self) -> None:
        """Return once at least one item is queued."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()

    def take(self, limit: int) -> list[tuple[K, Pending[V]]]:
        """Remove and return up to ``limit`` items, oldest first."""
        batch: list[tuple[K, Pending[V]]] = []
        for key in self._items:
            if len(batch) >= limit:
                break
            batch.append((key, self._items[key]))
        for key, _ in batch:
            del self._items[key]
        self._room.set()
        return batch

    def requeue(self, batch: list[tuple[K, Pending[V]]]) -> None:
        """Put back a batch that could not be written, unless a newer value arrived meanwhile."""
        for key, pending in batch:
            newer = self._items.get(key)
            if newer is None:
                self._items[key] = pending
            else:
                newer.first_seen = min(newer.first_seen, pending.first_seen)
        if self._items:
            self._ready.set()
