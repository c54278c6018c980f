"""A long stage that is not done yet answers when to look again: the dispatcher puts the
workflow back after that delay with no new change from the watch, and does not count it as a
failure (``wm_stagectl_stage_errors_total`` stays where it was)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY

from shared.k8s_informer import ChangeQueue
from stagectl.controller import Dispatcher
from stagectl.workflow import WaitingStage
from tests.unit.stagectl.test_stuck_stages import _waiting_workflow


class _Deploying:
    """Ready on the third look; each look before answers "again in 10 ms"."""

    def __init__(self) -> None:
        self.looks = 0
        self.done = asyncio.Event()

    async def handle(self, workflow: Any, waiting: WaitingStage, *, seen_at: float) -> float | None:
        self.looks += 1
        if self.looks < 3:
            return 0.01
        self.done.set()
        return None


def _errors() -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "wm_stagectl_stage_errors"
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


async def test_a_stage_that_asks_to_be_looked_at_again_is_without_a_new_change() -> None:
    queue = ChangeQueue()
    work = _Deploying()
    dispatcher = Dispatcher(queue=queue, work=work, concurrency=4)  # type: ignore[arg-type]
    before = _errors()
    queue.put(("c", "ns", "run-1"), _waiting_workflow())
    task = asyncio.create_task(dispatcher.run())
    try:
        await asyncio.wait_for(work.done.wait(), timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert work.looks == 3
    assert _errors() == before
