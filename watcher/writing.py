"""The writer: drains the change queue in batches, normalises, commits, retries on outages.

Whatever the writer takes off the queue is committed, refused, or put back; nothing is lost in
between, so the informer (which believes it delivered a change once queued) is never wrong:

- A batch that cannot be committed now (PostgreSQL unreachable, or refusing every statement,
  as a missing privilege or table would) goes back to the queue, unless a newer value arrived
  meanwhile, and is retried with backoff: nothing is lost while the database restarts.
- A batch PostgreSQL refuses for its contents (``is_refusal``: a data exception, an integrity
  violation, a program limit such as an index row too large, or a value the driver cannot
  encode) is split in halves until what is refused stands alone. That record is skipped:
  counted in ``wm_watcher_records_refused_total`` and logged with its cluster, namespace, name
  and SQLSTATE; every other change in flight is committed. A document ``normalise`` cannot read
  is skipped the same way. A skipped record is written again with the workflow's next change.
- If a stage dies anyway (a bug), every batch it or the other stage had taken goes back to the
  queue before ``run`` raises, so the supervisor's restart picks them up.

``problem()`` says when the writer is not doing its job (not running, or commits failing in a
row): the watcher's readiness check.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg

from shared.errors import Invalid
from shared.k8s_informer import ChangeQueue, Deleted, WorkflowKey
from shared.logging import get_logger
from shared.queueing import Pending
from shared.runs import ClusterRef, RunRecord
from watcher import metrics
from watcher.normalise import last_change_at, normalise
from watcher.pg_store import UNENCODABLE, Tombstone
from watcher.reading import clean, trim

log = get_logger(__name__)

PREPARE_SLICE = 25  # workflows normalised between two yields to the event loop
# SQLSTATE classes that mean "the server or connection is not there right now".
_TRANSIENT_CLASSES = ("08", "53", "57", "40")
# SQLSTATE classes that mean "this data can never be stored": 22 data exception (a NUL
# character, a value out of range), 23 integrity constraint violation, 54 program limit
# exceeded (an index row larger than a page allows). Other records of the batch may succeed.
_REFUSAL_CLASSES = ("22", "23", "54")
FAILED_COMMITS_UNREADY = 3  # commits failing in a row before the writer reports not ready
_LOGGED_NAME_BYTES = 256  # a refused record's namespace and name as logged (they may be huge)


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same write later can succeed (purely computational)."""
    if isinstance(exc, OSError | asyncpg.InterfaceError | asyncio.TimeoutError):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, asyncpg.PostgresError) and state[:2] in _TRANSIENT_CLASSES


def is_refusal(exc: BaseException) -> bool:
    """True when the data itself is refused: the same records will always fail, others may
    not (purely computational)."""
    if isinstance(exc, asyncpg.PostgresError):
        return (exc.sqlstate or "")[:2] in _REFUSAL_CLASSES
    return isinstance(exc, UNENCODABLE)


def _retryable(exc: BaseException) -> bool:
    # Any other answer of PostgreSQL (a missing table or privilege, an internal error) is not
    # the records' fault: keep them and retry until an operator has fixed it.
    return is_transient(exc) or isinstance(exc, asyncpg.PostgresError)


class BatchStore(Protocol):
    """What the writer needs of ``watcher.pg_store.RunStore``."""

    async def write_batch(
        self, records: Sequence[RunRecord], tombstones: Sequence[Tombstone] = ()
    ) -> int: ...


Batch = list[tuple[WorkflowKey, Pending[dict[str, Any] | Deleted]]]


@dataclass(frozen=True, slots=True)
class Entry:
    """What one queued change writes: the workflow's latest record, its deletion, or both (in
    that order). Kept together so that a split batch never marks a run gone before its last
    state is written."""

    key: WorkflowKey
    record: RunRecord | None
    tombstone: Tombstone | None


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    entries: list[Entry]

    @property
    def records(self) -> list[RunRecord]:
        return [e.record for e in self.entries if e.record is not None]

    @property
    def tombstones(self) -> list[Tombstone]:
        return [e.tombstone for e in self.entries if e.tombstone is not None]


def prepare(
    batch: Sequence[tuple[WorkflowKey, Pending[dict[str, Any] | Deleted]]],
    cluster_ref: Callable[[str], ClusterRef | None],
) -> PreparedBatch:
    """Normalise a drained batch into entries; skip what cannot be keyed or read."""
    entries: list[Entry] = []
    for key, pending in batch:
        cluster_id, namespace, name, uid = key
        cluster = cluster_ref(cluster_id)
        if cluster is None:
            continue  # no longer ours
        value = pending.value
        final = value.final if isinstance(value, Deleted) else value
        record = None
        if final is not None:
            try:
                record = normalise(final, cluster)
            except Invalid as exc:
                log.warning(
                    "workflow_skipped",
                    cluster=cluster_id,
                    namespace=_shown(namespace),
                    workflow=_shown(name),
                    reason=exc.message,
                )
            except Exception as exc:  # normalise never raises else; one document must not
                # stop the writer (it would die on the same document after every restart)
                _count_refused(key, reason="unreadable", error=type(exc).__name__, exc_info=exc)
        tombstone = None
        if isinstance(value, Deleted):
            # Cleaned like normalise cleans the record's identity, so that the two match.
            tombstone = Tombstone(cluster_id, clean(namespace), clean(name), clean(uid))
        if record is not None or tombstone is not None:
            entries.append(Entry(key, record, tombstone))
    return PreparedBatch(entries)


def _shown(value: str) -> str:
    return trim(clean(value), _LOGGED_NAME_BYTES)


def _count_refused(key: WorkflowKey, *, reason: str, **fields: Any) -> None:
    """Count and log one skipped change: which workflow and why, never its contents."""
    metrics.RECORDS_REFUSED.labels(cluster=key[0]).inc()
    log.error(
        "run_refused",
        cluster=key[0],
        namespace=_shown(key[1]),
        workflow=_shown(key[2]),
        reason=reason,
        **fields,
    )


class RunWriter:
    """Runs until cancelled: queue → normalise → PostgreSQL."""

    def __init__(
        self,
        *,
        queue: ChangeQueue,
        store: BatchStore,
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
        # Every batch taken off the queue and neither committed nor put back yet, by ticket.
        self._taken: dict[int, Batch] = {}
        self._tickets = itertools.count()
        self._running = False
        self._stopped_by: str | None = None  # the error that ended the last run
        self._failed_commits = 0  # in a row
        self._last_failure: str | None = None

    def problem(self) -> str | None:
        """Why the writer is not committing now (not running, or failing to), else None."""
        if not self._running:
            if self._stopped_by is None:
                return "the writer is not running"
            return f"the writer stopped ({self._stopped_by}) and waits to be restarted"
        if self._failed_commits >= FAILED_COMMITS_UNREADY:
            return f"{self._failed_commits} commits in a row failed ({self._last_failure})"
        return None

    async def run(self) -> None:
        """Two stages: normalising the next batch overlaps committing the previous one (the
        first is this process's CPU, the second PostgreSQL's). One commit at a time keeps the
        writes of a workflow in order."""
        handoff: asyncio.Queue[tuple[int, PreparedBatch]] = asyncio.Queue(maxsize=1)
        self._running, self._stopped_by, self._failed_commits = True, None, 0
        try:
            async with asyncio.TaskGroup() as stages:
                stages.create_task(self._prepare_loop(handoff))
                stages.create_task(self._commit_loop(handoff))
        except asyncio.CancelledError:
            raise  # stopped on purpose: not waiting for a restart
        except Exception as exc:
            self._stopped_by = _describe(exc)
            raise
        finally:
            self._running = False
            self._give_back()

    def _give_back(self) -> None:
        """Put every batch still taken back on the queue (a stage ended)."""
        taken, self._taken = list(self._taken.values()), {}
        for batch in taken:
            self._queue.requeue(batch)
        if taken:
            log.info("writer_batches_requeued", batches=len(taken), changes=sum(map(len, taken)))

    async def _prepare_loop(self, handoff: asyncio.Queue[tuple[int, PreparedBatch]]) -> None:
        while True:
            await self._queue.wait()
            batch = self._queue.take(self._batch_size)
            ticket = next(self._tickets)
            self._taken[ticket] = batch  # from here until committed, it is ours to give back
            metrics.QUEUE_DEPTH.set(len(self._queue))
            entries: list[Entry] = []
            for start in range(0, len(batch), PREPARE_SLICE):
                entries.extend(
                    prepare(batch[start : start + PREPARE_SLICE], self._cluster_ref).entries
                )
                # Yield between slices: the commit in flight needs the loop for each of its
                # round trips, and a batch normalised in one go held it for ~100 ms.
                await asyncio.sleep(0)
            await handoff.put((ticket, PreparedBatch(entries)))

    async def _commit_loop(self, handoff: asyncio.Queue[tuple[int, PreparedBatch]]) -> None:
        backoff = 0.2
        while True:
            ticket, prepared = await handoff.get()
            batch = self._taken[ticket]
            started = self._clock()
            try:
                self.committed += await self._commit(prepared.entries)
            except Exception as exc:
                if not _retryable(exc):
                    raise
                self._failed_commits += 1
                self._last_failure = _describe(exc)
                metrics.WRITE_FAILURES.inc()
                (log.warning if is_transient(exc) else log.error)(
                    "write_failed_retrying",
                    error=type(exc).__name__,
                    sqlstate=getattr(exc, "sqlstate", None),
                    retry_in=backoff,
                )
                # Back to the queue; the rv guard makes a late older write harmless, and what
                # a split batch already committed is not written twice.
                self._queue.requeue(self._taken.pop(ticket))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._backoff_max)
                continue
            del self._taken[ticket]
            backoff = 0.2
            self._failed_commits = 0
            now = self._clock()
            metrics.UPSERT_SECONDS.observe(now - started)
            for _, pending in batch:
                metrics.LAG_SECONDS.observe(now - pending.first_seen)
            wall = self._wall_clock()
            for record in prepared.records:
                if (changed := last_change_at(record)) is not None:
                    # Clocks of the cluster and of the watcher differ a little: never below 0.
                    metrics.ARGO_LAG_SECONDS.observe(max(0.0, wall - changed.timestamp()))

    async def _commit(self, entries: Sequence[Entry]) -> int:
        """Commit ``entries``, skipping those refused for their contents; returns the changes
        committed. Raises when nothing can be committed now (the caller retries them all)."""
        if not entries:
            return 0
        try:
            return await self._store.write_batch(
                [e.record for e in entries if e.record is not None],
                [e.tombstone for e in entries if e.tombstone is not None],
            )
        except Exception as exc:
            if not is_refusal(exc):
                raise
            if len(entries) == 1:
                return await self._refused(entries[0], exc)
        # Halves, in order: about 2·log2(batch) extra commits find one refused record.
        middle = len(entries) // 2
        return await self._commit(entries[:middle]) + await self._commit(entries[middle:])

    async def _refused(self, entry: Entry, exc: BaseException) -> int:
        if entry.record is not None and entry.tombstone is not None:
            # The run's last state, or its deletion, may be the part refused: try each alone.
            record, tombstone = (
                Entry(entry.key, entry.record, None),
                Entry(entry.key, None, entry.tombstone),
            )
            return await self._commit([record]) + await self._commit([tombstone])
        _count_refused(
            entry.key,
            reason="refused_by_database",
            error=type(exc).__name__,
            sqlstate=getattr(exc, "sqlstate", None),
            deletion=entry.record is None,
        )
        return 0


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]  # a stage's error, as the task group reports it
    state = getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__} {state}" if state else type(exc).__name__
