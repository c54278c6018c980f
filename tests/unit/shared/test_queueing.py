"""The coalescing queue: one entry per key, latest value wins, bounded by distinct keys."""

from __future__ import annotations

import asyncio

import pytest

from shared.queueing import CoalescingQueue


def test_latest_value_wins_and_first_seen_is_kept() -> None:
    ticks = iter([1.0, 2.0, 3.0])
    queue: CoalescingQueue[str, int] = CoalescingQueue(clock=lambda: next(ticks))
    queue.put("a", 1)
    queue.put("b", 1)
    queue.put("a", 2)
    batch = queue.take(10)
    assert [(k, p.value, p.first_seen) for k, p in batch] == [("a", 2, 1.0), ("b", 1, 2.0)]
    assert len(queue) == 0


def test_take_respects_limit_in_arrival_order() -> None:
    queue: CoalescingQueue[int, int] = CoalescingQueue()
    for i in range(5):
        queue.put(i, i)
    assert [k for k, _ in queue.take(3)] == [0, 1, 2]
    assert [k for k, _ in queue.take(3)] == [3, 4]


def test_requeue_keeps_newer_values() -> None:
    queue: CoalescingQueue[str, int] = CoalescingQueue()
    queue.put("a", 1)
    queue.put("b", 1)
    batch = queue.take(10)
    queue.put("a", 5)  # arrived while the batch was failing to commit
    queue.requeue(batch)
    assert {k: p.value for k, p in queue.take(10)} == {"a": 5, "b": 1}


def test_discard_where() -> None:
    queue: CoalescingQueue[tuple[str, str], int] = CoalescingQueue()
    queue.put(("c1", "x"), 1)
    queue.put(("c2", "y"), 1)
    assert queue.discard_where(lambda key: key[0] == "c1") == 1
    assert [k for k, _ in queue.take(10)] == [("c2", "y")]


async def test_wait_wakes_on_put() -> None:
    queue: CoalescingQueue[str, int] = CoalescingQueue()
    waiter = asyncio.create_task(queue.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.put("a", 1)
    await asyncio.wait_for(waiter, 1)


async def test_put_when_room_waits_for_the_writer_but_not_for_known_keys() -> None:
    queue: CoalescingQueue[str, int] = CoalescingQueue()
    await queue.put_when_room("a", 1, high_water=1)
    await asyncio.wait_for(queue.put_when_room("a", 2, high_water=1), 1)  # same key: no wait
    blocked = asyncio.create_task(queue.put_when_room("b", 1, high_water=1))
    await asyncio.sleep(0)
    assert not blocked.done()
    queue.take(1)
    await asyncio.wait_for(blocked, 1)
    assert [k for k, _ in queue.take(10)] == ["b"]


@pytest.mark.parametrize("updates", [1, 10, 1000])
def test_queue_size_is_bounded_by_distinct_keys(updates: int) -> None:
    queue: CoalescingQueue[int, int] = CoalescingQueue()
    for version in range(updates):
        for key in range(3):
            queue.put(key, version)
    assert len(queue) == 3
