"""The stage controller's loop: the data controller's workflows in, their waiting stages out to
``StageWork``, several workflows at once and never one workflow twice at a time.

The informer (``shared.k8s_informer``, selecting the data controller's instance ID) puts each
workflow's latest state in a coalescing queue. The dispatcher takes workflows from it and runs
each on a worker (at most ``concurrency`` at once); a workflow that changes while a worker has
it waits in ``deferred`` and goes back to the queue when the worker is done, so the stages of
one run are done in order and a stage is never attempted twice concurrently by this process.

A stage that fails for a reason outside the run (PostgreSQL, object storage or the Argo server
away, a bug) is tried again after a backoff by putting the workflow back, unless a newer state
of it arrived meanwhile. A long stage that is waiting on something outside it (a deployment
becoming ready) answers when to look again: the workflow is put back after that delay, again
unless a newer state arrived first, and is not counted as a failure. Its progress is stored
(``stage_progress``), so a restart or a new leader looks again at once and continues from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from shared.errors import WorkflowManagerError
from shared.k8s_informer import ChangeQueue, Deleted, WorkflowKey
from shared.logging import get_logger
from shared.queueing import Pending
from shared.stages import STAGES
from stagectl import metrics
from stagectl.work import StageWork
from stagectl.workflow import (
    WaitingStage,
    deleted_exit,
    needs_fetch,
    unhandled_exit,
    waiting_stages,
)

log = get_logger(__name__)


class Dispatcher:
    """Drains the queue onto at most ``concurrency`` workers (see the module docstring)."""

    def __init__(
        self,
        *,
        queue: ChangeQueue,
        work: StageWork,
        concurrency: int,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self._work = work
        self._slots = asyncio.Semaphore(concurrency)
        self._busy: set[WorkflowKey] = set()
        self._deferred: dict[WorkflowKey, Pending[Any]] = {}
        self._failures: dict[WorkflowKey, int] = {}
        # The workflows whose stage keeps failing: which stage, since when (self._clock).
        self._failing: dict[WorkflowKey, tuple[str, float]] = {}
        self._backoff = (backoff_initial, backoff_max)
        self._clock = clock

    async def run(self) -> None:
        """Until cancelled (a TaskGroup owns the workers and the retry timers)."""
        async with asyncio.TaskGroup() as group:
            while True:
                await self._queue.wait()
                await self._slots.acquire()
                batch = self._queue.take(1)
                metrics.WAITING.set(len(self._queue))
                if not batch:
                    self._slots.release()
                    continue
                key, pending = batch[0]
                if key not in self._busy and not self._has_work(key, pending):
                    self._slots.release()  # most changes of a workflow wait on no stage
                    continue
                if key in self._busy:
                    self._deferred[key] = pending  # newer than any deferred before it
                    self._slots.release()
                    continue
                self._busy.add(key)
                group.create_task(self._one(group, key, pending))

    async def _one(self, group: asyncio.TaskGroup, key: WorkflowKey, pending: Pending[Any]) -> None:
        try:
            done = await self._attempt(key, pending)
        finally:
            self._busy.discard(key)
            self._slots.release()
        newer = self._deferred.pop(key, None)
        if newer is not None:
            self._queue.requeue([(key, newer)])
        elif isinstance(done, float):
            group.create_task(self._later(done, key, pending))
        elif not done:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            delay = min(self._backoff[1], self._backoff[0] * 2 ** (failures - 1))
            group.create_task(self._later(delay, key, pending))

    def _has_work(self, key: WorkflowKey, pending: Pending[Any]) -> bool:
        value = pending.value
        if isinstance(value, Mapping) and (needs_fetch(value) or stages_of(value)):
            return True
        if isinstance(value, Deleted) and value.final and deleted_exit(value.final):
            return True
        if key in self._failures and not isinstance(value, Mapping):
            self._failures.pop(key, None)
        return False

    async def _later(self, delay: float, key: WorkflowKey, pending: Pending[Any]) -> None:
        await asyncio.sleep(delay)
        self._queue.requeue([(key, pending)])  # unless a newer state arrived meanwhile

    async def _attempt(self, key: WorkflowKey, pending: Pending[Any]) -> bool | float:
        """Every waiting stage of the workflow; False when one must be tried again, or the
        seconds after which a stage asked to be looked at again."""
        value = pending.value
        if isinstance(value, Deleted) and value.final:
            ended = deleted_exit(value.final)
            return await self._stages(key, value.final, [ended] if ended else [], pending)
        if isinstance(value, Deleted) or not isinstance(value, Mapping):
            self._failures.pop(key, None)
            self._settled(key)
            return True
        if needs_fetch(value):
            try:
                value = await self._work.fetch(key[1], key[2])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("stage_fetch_failed", namespace=key[1], workflow=key[2], error=str(exc))
                return False
            if value is None:  # gone meanwhile: its deletion comes on the watch
                self._failures.pop(key, None)
                return True
        return await self._stages(key, value, stages_of(value), pending)

    async def _stages(
        self,
        key: WorkflowKey,
        value: Mapping[str, Any],
        stages: list[WaitingStage],
        pending: Pending[Any],
    ) -> bool | float:
        again: float | None = None
        for waiting in stages:
            try:
                later = await self._work.handle(value, waiting, seen_at=pending.first_seen)
                if later is not None:
                    again = later if again is None else min(again, later)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc.code if isinstance(exc, WorkflowManagerError) else type(exc).__name__
                metrics.ERRORS.labels(stage=waiting.stage, error=error).inc()
                failing = self._failing.get(key)
                if failing is None or failing[0] != waiting.stage:
                    self._failing[key] = (waiting.stage, self._clock())
                self._report_stuck()
                log.warning(
                    "stage_attempt_failed",
                    namespace=key[1],
                    workflow=key[2],
                    stage=waiting.stage,
                    error=error,
                    reason=getattr(exc, "message", str(exc))[:500],
                    exc_info=not isinstance(exc, WorkflowManagerError),
                )
                return False
        self._failures.pop(key, None)
        self._settled(key)
        return True if again is None else float(again)

    def _settled(self, key: WorkflowKey) -> None:
        if self._failing.pop(key, None) is not None:
            self._report_stuck()

    def _report_stuck(self) -> None:
        for stage, seconds in stuck_for(self._failing, now=self._clock()).items():
            metrics.STUCK_SECONDS.labels(stage=stage).set(seconds)


def stuck_for(failing: Mapping[WorkflowKey, tuple[str, float]], *, now: float) -> dict[str, float]:
    """Per stage, how long its longest-failing workflow has been failing it (purely
    computational): every known stage is named, 0 when no workflow is failing it."""
    stuck = dict.fromkeys(STAGES, 0.0)
    for stage, since in failing.values():
        stuck[stage] = max(stuck.get(stage, 0.0), now - since)
    return stuck


def stages_of(workflow: Mapping[str, Any]) -> list[WaitingStage]:
    """What the controller has to do for a workflow: its waiting stage nodes, or the cleanup
    of a run that ended without its exit handler."""
    waiting = waiting_stages(workflow)
    if waiting:
        return waiting
    ended = unhandled_exit(workflow)
    return [ended] if ended is not None else []
