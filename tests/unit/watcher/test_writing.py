"""The writer with a fake store: refused records are skipped alone, outages keep everything, and
what a dying stage had taken goes back to the queue before it is restarted.

The fake store answers as PostgreSQL does: a batch commits whole or fails whole. Time-dependent
behaviour (retry backoff, supervisor restarts) runs under looptime, so no test sleeps for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

import asyncpg
import orjson
import pytest
import structlog
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

import watcher.writing
from shared.k8s_informer import ChangeQueue, Deleted
from shared.runs import ClusterRef, RunRecord
from shared.tasks import Backoff, Supervisor
from watcher.pg_store import Tombstone
from watcher.writing import RunWriter

CLUSTER = ClusterRef("c-unit", "unit")
NAMESPACE = "kubeopera-data-acme"


def workflow(name: str, rv: int = 1, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "status": {"phase": phase, "startedAt": "2026-12-01T00:00:00Z"},
    }


def key(name: str) -> tuple[str, str, str, str]:
    return (CLUSTER.id, NAMESPACE, name, f"uid-{name}")


def queue_of(*names: str) -> ChangeQueue:
    queue = ChangeQueue()
    for name in names:
        queue.put(key(name), workflow(name))
    return queue


class FakeStore:
    """Commits a batch whole, or refuses it whole when it holds a poisoned record."""

    def __init__(self) -> None:
        self.rows: dict[str, RunRecord] = {}
        self.deleted: list[str] = []
        self.poisoned: set[str] = set()  # names refused as an over-long index row is
        self.failing: Exception | None = None  # raised by every write while set
        self.gate: asyncio.Event | None = None  # while set and not open, writes wait on it
        self.entered = asyncio.Event()
        self.writes = 0

    async def write_batch(
        self, records: Sequence[RunRecord], tombstones: Sequence[Tombstone] = ()
    ) -> int:
        self.writes += 1
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.failing is not None:
            raise self.failing
        if any(r.name in self.poisoned for r in records):
            raise asyncpg.exceptions.ProgramLimitExceededError(
                "index row requires 10024 bytes, maximum size is 8191"
            )
        for record in records:
            self.rows[record.name] = record
        self.deleted.extend(t.name for t in tombstones)
        return len(records) + len(tombstones)


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[MutableMapping[str, Any]]]:
    with capture_logs() as captured:
        # A fresh proxy: the module's may have been cached by an earlier configure().
        monkeypatch.setattr(watcher.writing, "log", structlog.get_logger("watcher.writing"))
        yield captured


def refused_count() -> float:
    return (
        REGISTRY.get_sample_value("wm_watcher_records_refused_total", {"cluster": CLUSTER.id})
        or 0.0
    )


async def until(check: Callable[[], bool], *, what: str, within: float = 120.0) -> None:
    """Poll ``check`` in loop time (looptime: no real waiting)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def writer_for(queue: ChangeQueue, store: FakeStore, **options: Any) -> RunWriter:
    return RunWriter(queue=queue, store=store, cluster_ref=lambda _: CLUSTER, **options)


@pytest.mark.looptime
async def test_a_record_refused_alone_is_skipped_and_the_writer_goes_on(
    logs: list[MutableMapping[str, Any]],
) -> None:
    """A batch of one refused record used to re-raise: the writer died."""
    store = FakeStore()
    store.poisoned.add("poison")
    queue = queue_of("poison")
    writer = writer_for(queue, store)
    before = refused_count()
    task = asyncio.create_task(writer.run())
    try:
        await until(lambda: refused_count() == before + 1, what="the record refused")
        for name in ("after-1", "after-2"):
            queue.put(key(name), workflow(name))
        await until(lambda: len(store.rows) == 2, what="the later changes committed")
        assert not task.done()
        assert writer.problem() is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert set(store.rows) == {"after-1", "after-2"}
    (refusal,) = [entry for entry in logs if entry["event"] == "run_refused"]
    assert refusal["log_level"] == "error"
    assert refusal["cluster"] == CLUSTER.id
    assert refusal["namespace"] == NAMESPACE
    assert refusal["workflow"] == "poison"
    assert refusal["sqlstate"] == "54000"


@pytest.mark.looptime
async def test_one_refused_record_among_many_costs_only_itself() -> None:
    store = FakeStore()
    store.poisoned.add("wf-13")
    names = [f"wf-{i}" for i in range(40)]
    queue = queue_of(*names)
    # A tombstone and a final state for one workflow: kept together, in order.
    queue.put(key("wf-20"), Deleted(workflow("wf-20", rv=2, phase="Succeeded")))
    writer = writer_for(queue, store, batch_size=25)
    before = refused_count()
    task = asyncio.create_task(writer.run())
    try:
        await until(lambda: len(store.rows) == 39 and not queue, what="every other record")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert set(store.rows) == set(names) - {"wf-13"}
    assert store.rows["wf-20"].phase == "Succeeded"
    assert store.deleted == ["wf-20"]
    assert refused_count() == before + 1
    # Bisection, not one commit per record: 2 batches, the refused one split down to one.
    assert store.writes < 20


@pytest.mark.looptime
async def test_a_deletion_is_recorded_though_the_final_state_is_refused() -> None:
    store = FakeStore()
    store.poisoned.add("gone")
    queue = ChangeQueue()
    queue.put(key("gone"), Deleted(workflow("gone", rv=3, phase="Failed")))
    writer = writer_for(queue, store)
    task = asyncio.create_task(writer.run())
    try:
        await until(lambda: store.deleted == ["gone"], what="the tombstone committed")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert "gone" not in store.rows


@pytest.mark.looptime
async def test_an_unencodable_record_is_refused_like_one_postgresql_refuses() -> None:
    class Encoding(FakeStore):
        async def write_batch(
            self, records: Sequence[RunRecord], tombstones: Sequence[Tombstone] = ()
        ) -> int:
            if any(r.name == "huge" for r in records):
                raise orjson.JSONEncodeError("Integer exceeds 64-bit range")
            return await super().write_batch(records, tombstones)

    store = Encoding()
    queue = queue_of("a", "huge", "b")
    writer = writer_for(queue, store)
    task = asyncio.create_task(writer.run())
    try:
        await until(lambda: set(store.rows) == {"a", "b"}, what="the encodable records")
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.looptime
@pytest.mark.parametrize(
    "failure",
    [
        ConnectionRefusedError("PostgreSQL is away"),
        asyncpg.exceptions.InsufficientPrivilegeError("permission denied for table runs"),
    ],
    ids=["outage", "not-the-records-fault"],
)
async def test_commits_failing_keep_every_change_and_report_not_ready(failure: Exception) -> None:
    store = FakeStore()
    store.failing = failure
    queue = queue_of("a", "b", "c")
    writer = writer_for(queue, store, batch_size=2)
    before = refused_count()
    task = asyncio.create_task(writer.run())
    try:
        await until(lambda: "in a row" in (writer.problem() or ""), what="failures reported")
        assert "3 commits in a row failed" in (writer.problem() or "")
        assert type(failure).__name__ in (writer.problem() or "")
        store.failing = None
        await until(lambda: set(store.rows) == {"a", "b", "c"}, what="everything committed")
        assert writer.problem() is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert refused_count() == before  # nothing was the records' fault


@pytest.mark.looptime
async def test_a_dying_stage_gives_back_what_it_had_taken_before_the_restart() -> None:
    """Three batches in flight (being committed, handed over, being handed over) when the
    commit stage dies of a bug: all go back to the queue, and the restart commits them."""
    store = FakeStore()
    store.gate = asyncio.Event()
    store.failing = RuntimeError("a bug in the commit path")
    names = [f"wf-{i}" for i in range(6)]
    queue = queue_of(*names)
    writer = writer_for(queue, store, batch_size=2)
    supervisor = Supervisor(name="test")
    starts: list[int] = []
    died = asyncio.Event()

    async def run_writer() -> None:
        starts.append(len(queue))  # what the (re)started writer finds on the queue
        try:
            await writer.run()
        except Exception:
            died.set()
            raise

    supervisor.spawn("writer", run_writer, backoff=Backoff(initial=5.0))
    try:
        await store.entered.wait()
        await until(lambda: not queue, what="every batch taken off the queue")
        store.gate.set()  # the first commit now fails: the stage dies
        await died.wait()
        assert sorted(k[2] for k, _ in _peek(queue)) == names  # all back before the restart
        assert "stopped (RuntimeError)" in (writer.problem() or "")
        store.failing = None
        await until(lambda: set(store.rows) == set(names), what="the restart committing all")
        assert starts == [6, 6]
        assert writer.problem() is None
    finally:
        await supervisor.shutdown(grace=1)
    assert writer.problem() == "the writer is not running"


def _peek(queue: ChangeQueue) -> list[tuple[tuple[str, str, str, str], Any]]:
    """The queue's content, left in place."""
    batch = queue.take(len(queue))
    queue.requeue(batch)
    return batch
