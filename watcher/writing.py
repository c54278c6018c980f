"""The writer: drains the change queue in batches, normalises, commits, retries on outages.

A batch that cannot be committed because PostgreSQL is unreachable goes back to the queue
(unless a newer value arrived meanwhile) and is retried with backoff: nothing is lost while
the database restarts. A record PostgreSQL refuses outright is isolated and skipped, logged,
so one bad document cannot stall a cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from shared.errors import Invalid
from shared.logging import get_logger
from shared.runs import ClusterRef, RunRecord
from watcher import metrics
from watcher.k8s_informer import ChangeQueue, Deleted, WorkflowKey
from watcher.normalise import last_change_at, normalise
from watcher.pg_store import RunStore, Tombstone
from watcher.queueing import Pending

log = get_logger(__name__)

PREPARE_SLICE = 25  # workflows normalised between two yields to the event loop
# SQLSTATE classes that mean "the server or connection is not there right now".
_TRANSIENT_CLASSES = ("08", "53", "57", "40")


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same write later can succeed (purely computational)."""
    if isinstance(exc, OSError | asyncpg.InterfaceError | asyncio.TimeoutError):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, asyncpg.PostgresError) and state[:2] in _TRANSIENT_CLASSES


Batch = list[tuple[WorkflowKey, Pending[dict[str, Any] | Deleted]]]


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    records: list[RunRecord]
    tombstones: list[Tombstone]


def prepare(
    batch: Sequence[tuple[WorkflowKey, Pending[dict[str, Any] | Deleted]]],
    cluster_ref: Callable[[str], ClusterRef | None],
) -> PreparedBatch:
    """Normalise a drained batch into records and tombstones; skip what cannot be keyed."""
    records: list[RunRecord] = []
    tombstones: list[Tombstone] = []
    for (cluster_id, namespace, name, uid), pending in batch:
        cluster = cluster_ref(cluster_id)
        if cluster is None:
            continue  # no longer ours
        value = pending.value
        final = value.final if isinstance(value, Deleted) else value
        if final is not None:
            try:
                records.append(normalise(final, cluster))
            except Invalid as exc:
                log.warning(
                    "workflow_skipped",
                    cluster=cluster_id,
                    namespace=namespace,
                    workflow=name,
                    reason=exc.message,
                )
        if isinstance(value, Deleted):
            tombstones.append(Tombstone(cluster_id, namespace, name, uid))
    return PreparedBatch(records, tombstones)


class RunWriter:
    """Runs forever: queue → normalise → PostgreSQL."""

    def __init__(
        self,
        *,
        queue: ChangeQueue,
        store: RunStore,
        cluster_ref: Callable[[str], ClusterRef | None],
        # 200: large enough that a commit's round trips are amortised, small enough that the
        # next batch is normalised while this one commits in finer steps, and that a batch's
        # documents are freed before the allocator hands their memory back to the system
        # (bench/ingest.py: 500 → 200 moved the ratio from 0.47-0.51 to 0.49-0.53, with a
        # quarter fewer page faults).
        batch_size: int = 200,
        backoff_max: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._queue = queue
        self._store = store
        self._cluster_ref = cluster_ref
        self._batch_size = batch_size
        self._backoff_max = backoff_max
        self._clock = clock
        self._wall_clock = wall_clock
        self.committed = 0  # changes committed since start (tests, benchmarks)

    async def run(self) -> None:
        """Two stages: normalising the next batch overlaps committing the previous one (the
        first is this process's CPU, the second PostgreSQL's). One commit at a time keeps the
        writes of a workflow in order."""
        handoff: asyncio.Queue[tuple[Batch, PreparedBatch]] = asyncio.Queue(maxsize=1)
        async with asyncio.TaskGroup() as stages:
            stages.create_task(self._prepare_loop(handoff))
            stages.create_task(self._commit_loop(handoff))

    async def _prepare_loop(self, handoff: asyncio.Queue[tuple[Batch, PreparedBatch]]) -> None:
        while True:
            await self._queue.wait()
            batch = self._queue.take(self._batch_size)
            metrics.QUEUE_DEPTH.set(len(self._queue))
            prepared = PreparedBatch([], [])
            for start in range(0, len(batch), PREPARE_SLICE):
                part = prepare(batch[start : start + PREPARE_SLICE], self._cluster_ref)
                prepared.records.extend(part.records)
                prepared.tombstones.extend(part.tombstones)
                # Yield between slices: the commit in flight needs the loop for each of its
                # round trips, and a batch normalised in one go held it for ~100 ms.
                await asyncio.sleep(0)
            await handoff.put((batch, prepared))

    async def _commit_loop(self, handoff: asyncio.Queue[tuple[Batch, PreparedBatch]]) -> None:
        backoff = 0.2
        while True:
            batch, prepared = await handoff.get()
            started = self._clock()
            try:
                self.committed += await self._write(prepared)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                if not is_transient(exc):
                    raise
                metrics.WRITE_FAILURES.inc()
                log.warning("write_failed_retrying", error=type(exc).__name__, retry_in=backoff)
                # Back to the queue; the rv guard makes a late older write harmless.
                self._queue.requeue(batch)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._backoff_max)
                continue
            backoff = 0.2
            now = self._clock()
            metrics.UPSERT_SECONDS.observe(now - started)
            for _, pending in batch:
                metrics.LAG_SECONDS.observe(now - pending.first_seen)
            wall = self._wall_clock()
            for record in prepared.records:
                if (changed := last_change_at(record)) is not None:
                    # Clocks of the cluster and of the watcher differ a little: never below 0.
                    metrics.ARGO_LAG_SECONDS.observe(max(0.0, wall - changed.timestamp()))

    async def _write(self, prepared: PreparedBatch) -> int:
        try:
            return await self._store.write_batch(prepared.records, prepared.tombstones)
        except asyncpg.PostgresError as exc:
            if is_transient(exc) or len(prepared.records) + len(prepared.tombstones) <= 1:
                raise
        # One record PostgreSQL refuses must not block the others: write them one by one.
        written = 0
        for record in prepared.records:
            try:
                written += await self._store.write_batch([record])
            except asyncpg.PostgresError as exc:
                if is_transient(exc):
                    raise
                log.error(
                    "run_refused_by_database",
                    cluster=record.cluster_id,
                    namespace=record.namespace,
                    workflow=record.name,
                    sqlstate=exc.sqlstate,
                )
        if prepared.tombstones:
            written += await self._store.write_batch([], prepared.tombstones)
        return written
