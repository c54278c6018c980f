"""RunStore: the rv guard, the change log and the notification, in one commit."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from shared.runs import ClusterRef
from watcher.normalise import normalise
from watcher.pg_store import RunStore, Tombstone

CLUSTER = ClusterRef("c1", "c1")


def workflow(name: str, rv: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "kubeopera-data-acme",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "status": {"phase": phase, "startedAt": "2026-12-01T00:00:00Z"},
    }


async def test_writes_log_changes_notify_and_never_go_back(db: asyncpg.Pool) -> None:
    await db.execute("INSERT INTO clusters (id, name) VALUES ('c1', 'c1')")
    store = RunStore(db)
    notified: list[str] = []
    listener = await db.acquire()

    def on_notify(*args: Any) -> None:
        notified.append(args[3])

    await listener.add_listener("runs", on_notify)
    try:
        assert await store.write_batch([normalise(workflow(n, 5), CLUSTER) for n in "ab"]) == 2
        assert await store.write_batch([normalise(workflow("a", 9, "Succeeded"), CLUSTER)]) == 1
        # An older version changes nothing, logs nothing, notifies nothing.
        assert await store.write_batch([normalise(workflow("a", 7, "Failed"), CLUSTER)]) == 0
        assert (
            await store.write_batch([], [Tombstone("c1", "kubeopera-data-acme", "b", "uid-b")]) == 1
        )
        for _ in range(50):
            if len(notified) == 3:
                break
            await asyncio.sleep(0.02)
    finally:
        await listener.remove_listener("runs", on_notify)
        await db.release(listener)
    assert await db.fetchval("SELECT phase FROM runs WHERE name = 'a'") == "Succeeded"
    changes = await db.fetch("SELECT seq, name, phase, kind FROM run_changes ORDER BY seq")
    assert [(c["name"], c["phase"], c["kind"]) for c in changes] == [
        ("a", "Running", "upsert"),
        ("b", "Running", "upsert"),
        ("a", "Succeeded", "upsert"),
        ("b", "Running", "deleted"),
    ]
    # One notification per commit, carrying the commit's highest seq.
    assert notified == [str(changes[1]["seq"]), str(changes[2]["seq"]), str(changes[3]["seq"])]
