"""Retention: finished runs past RUN_RETENTION_DAYS go, in small batches; the rest stays."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from shared.config import Settings
from shared.db.clusters import ClusterStore
from shared.runs import ClusterRef
from watcher.normalise import normalise
from watcher.pg_store import RunStore
from watcher.runner import Watcher

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def workflow(name: str, *, finished: datetime | None, rv: int) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "startedAt": "2026-01-01T00:00:00Z"}
    if finished is not None:
        status.update(phase="Succeeded", finishedAt=finished.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return {
        "metadata": {
            "name": name,
            "namespace": "kubeopera-data-acme",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "status": status,
    }


async def test_retention_deletes_only_finished_runs_older_than_the_window(
    db: asyncpg.Pool, settings_factory: Callable[..., Settings]
) -> None:
    settings = settings_factory(RUN_RETENTION_DAYS=90)
    await db.execute("INSERT INTO clusters (id, name) VALUES ('c1', 'c1')")
    cluster = ClusterRef("c1", "c1")
    runs = RunStore(db)
    old = [
        workflow(f"old-{i}", finished=NOW - timedelta(days=91 + i), rv=i + 1) for i in range(1200)
    ]
    kept = [
        workflow("recent", finished=NOW - timedelta(days=89), rv=5000),
        workflow("still-running", finished=None, rv=5001),
    ]
    await runs.write_batch([normalise(w, cluster) for w in old + kept])
    await db.execute("UPDATE run_changes SET changed_at = $1", NOW - timedelta(days=2))
    await db.execute(
        "INSERT INTO run_changes (run_id, cluster_id, namespace, name, phase, kind, changed_at) "
        "VALUES (1, 'c1', 'ns', 'fresh', 'Running', 'upsert', $1)",
        NOW,
    )
    watcher = Watcher(settings, db, None, "uid", None, None, None, runs, ClusterStore(db))  # type: ignore[arg-type]

    deleted = await watcher.retention_pass(now=NOW)

    assert deleted == 1200  # in batches of 500: 500 + 500 + 200
    names = {r["name"] for r in await db.fetch("SELECT name FROM runs")}
    assert names == {"recent", "still-running"}
    changes = await db.fetch("SELECT name FROM run_changes")
    assert [c["name"] for c in changes] == ["fresh"]
    assert await watcher.retention_pass(now=NOW) == 0
