"""Poisoned workflows among many: each costs at most itself, in PostgreSQL and on the stream.

Two ways a document can be poison. What a tenant can put in a Workflow (Argo's CRD has no status
subresource, so whoever may update a workflow may write its status too) is made storable by
``normalise``: a template reference too long for its index, NUL characters, a resourcesDuration
beyond 64 bits, a finish time in year 300000; the first test sends them through the emulator and
the whole watcher. What ``normalise`` leaves for PostgreSQL to refuse is isolated by the writer:
the second test queues a workflow whose name is too long for the run indexes (SQLSTATE 54000;
the emulator, like Kubernetes, refuses such a name, so it goes to the writer's queue directly).
The stream is the apiserver's SSE stream over the change log the watcher writes, read as a
client reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import string
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY

from shared.k8s_informer import ChangeQueue
from shared.runs import ClusterRef
from shared.tasks import Backoff, Supervisor
from sim.world import World
from tests.integration.apiserver.conftest import ADMIN, Api, make_api
from tests.integration.apiserver.sse import Event, events
from tests.integration.watcher.harness import (
    RunningWatcher,
    cluster_state,
    dag_workflow,
    db_state,
    eventually,
    submit,
    workflows,
)
from watcher.pg_store import RunStore
from watcher.writing import RunWriter

__all__ = ["make_api"]  # the apiserver's fixture, for the stream

StartWatcher = Callable[..., Awaitable[RunningWatcher]]
TENANT_NS = "kubeopera-data-acme"
FINAL = ("Succeeded", "Failed", "Error")
RunKey = tuple[str, str, str]  # (cluster_id, namespace, name)


def refused(cluster_id: str) -> float:
    sample = REGISTRY.get_sample_value("wm_watcher_records_refused_total", {"cluster": cluster_id})
    return sample or 0.0


def random_letters(count: int) -> str:
    """Incompressible text, so an index row holding it really is that large."""
    rng = random.Random(7)
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(count))


class Stream:
    """The run events an admin's SSE client receives, as they arrive."""

    def __init__(self) -> None:
        self.seen: list[Event] = []

    def last_phases(self) -> dict[RunKey, str]:
        last: dict[RunKey, str] = {}
        for event in self.seen:
            data = event.data
            last[(data["cluster_id"], data["namespace"], data["name"])] = data["phase"]
        return last

    async def caught_up(self, db: asyncpg.Pool) -> bool:
        latest = await db.fetchval("SELECT coalesce(max(seq), 0) FROM run_changes")
        return bool(self.seen) and self.seen[-1].id == latest


@contextlib.asynccontextmanager
async def streaming(api: Api) -> AsyncIterator[Stream]:
    await api.hub.started.wait()
    stream = Stream()
    response = await api.client.get("/api/v1/workflows/stream", headers=ADMIN)
    assert response.status == 200

    async def read() -> None:
        async for event in events(response):
            if event.event == "run":
                stream.seen.append(event)

    reader = asyncio.create_task(read())
    try:
        yield stream
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        response.close()


async def test_tenant_poison_is_stored_sanitised_and_every_other_run_stays_correct(
    world: World, start_watcher: StartWatcher, db: asyncpg.Pool, make_api: Any
) -> None:
    host, other = world.clusters
    api: Api = await make_api()
    async with streaming(api) as stream:
        watcher = await start_watcher()
        host_id = await db.fetchval("SELECT id FROM clusters WHERE is_host")
        ids = {host.name: host_id, other.name: other.id}
        template_ref = dag_workflow("long-template-ref")
        template_ref["spec"] = {"workflowTemplateRef": {"name": f"tpl-{random_letters(3000)}"}}
        submit(host.store, TENANT_NS, template_ref)
        nul = dag_workflow("nul-parameter")
        nul["spec"]["arguments"]["parameters"] = [{"name": "day", "value": "2026\x00-12-02"}]
        submit(host.store, TENANT_NS, nul)
        for index in range(16):
            cluster = world.clusters[index % 2]
            namespace = TENANT_NS if index % 3 else "argo"
            submit(cluster.store, namespace, dag_workflow(f"good-{index}", fail=index % 5 == 0))
            await asyncio.sleep(0.03)

        async def converged() -> bool:
            for cluster in world.clusters:
                state = cluster_state(cluster.store)
                if any(phase not in FINAL for _, phase in state.values()):
                    return False
                if state != await db_state(db, ids[cluster.name]):
                    return False
            return True

        await eventually(converged, within=60, what="every run in PostgreSQL")

        # A finished run's status rewritten with values PostgreSQL or the encoder refuse.
        tampered = {
            "metadata": {"labels": {"tampered": "yes"}},
            "status": {
                "message": "done\x00",
                "resourcesDuration": {"cpu": 2**64, "memory": 7},
                "finishedAt": "300000-01-01T00:00:00Z",
            },
        }
        other.store.patch(
            workflows(other.store),
            TENANT_NS,
            "good-1",
            tampered,
            content_type="application/merge-patch+json",
        )
        submit(host.store, "argo", dag_workflow("after-the-poison", ticks=1))

        async def settled() -> bool:
            labels = await db.fetchval("SELECT labels FROM runs WHERE name = 'good-1'")
            last = await db.fetchval("SELECT phase FROM runs WHERE name = 'after-the-poison'")
            return bool(labels) and labels.get("tampered") == "yes" and last == "Succeeded"

        await eventually(settled, what="the tampered run and a later one stored")
        assert await converged()
        assert watcher.parts[0].writer.problem() is None
        await eventually(lambda: stream.caught_up(db), what="the stream caught up")

    row = await db.fetchrow("SELECT * FROM runs WHERE name = 'good-1'")
    assert row["message"] == "done"
    assert row["resources_duration"] == {"memory": 7}
    assert row["finished_at"] is None
    row = await db.fetchrow("SELECT * FROM runs WHERE name = 'long-template-ref'")
    assert (row["phase"], row["template"]) == ("Error", None)
    row = await db.fetchrow("SELECT * FROM runs WHERE name = 'nul-parameter'")
    assert (row["phase"], row["parameters"]) == ("Succeeded", {"day": "2026-12-02"})
    # The stream: every run's last event carries its final phase, in change-log order.
    assert stream.last_phases() == {
        (ids[cluster.name], namespace, name): phase
        for cluster in world.clusters
        for (namespace, name), (_, phase) in cluster_state(cluster.store).items()
    }
    ids_seen = [e.id or 0 for e in stream.seen]
    assert ids_seen == sorted(ids_seen)


def workflow(name: str, *, rv: int, phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": TENANT_NS,
            "uid": f"uid-{name[:40]}",
            "resourceVersion": str(rv),
        },
        "status": {"phase": phase, "startedAt": "2026-12-01T00:00:00Z"},
    }


@pytest.mark.parametrize("batch_size", [1, 200])
async def test_a_record_postgresql_refuses_costs_only_itself(
    db: asyncpg.Pool, make_api: Any, batch_size: int
) -> None:
    """One batch at a time (1) the refused record is alone, as when it changes on its own;
    otherwise (200) it is among the others and the batch is split around it."""
    cluster = ClusterRef("c-refusals", "refusals")
    await db.execute("INSERT INTO clusters (id, name) VALUES ($1, $2)", cluster.id, cluster.name)
    queue = ChangeQueue()
    poison = f"poison-{random_letters(3000)}"
    names = [f"good-{i}" for i in range(30)]
    order = [*names[:2], poison, *names[2:]]  # the poison right behind the first commits
    for rv, name in enumerate(order, start=1):
        queue.put(
            (cluster.id, TENANT_NS, name, f"uid-{name[:40]}"),
            workflow(name, rv=rv, phase="Running"),
        )
    writer = RunWriter(
        queue=queue, store=RunStore(db), cluster_ref=lambda _: cluster, batch_size=batch_size
    )
    before = refused(cluster.id)
    api: Api = await make_api()
    async with streaming(api) as stream, Supervisor(name="test") as workers:
        # As the watcher runs it: a writer that dies is restarted.
        workers.spawn("writer", writer.run, backoff=Backoff(initial=0.1))

        async def committed() -> bool:
            count = await db.fetchval("SELECT count(*) FROM runs WHERE cluster_id = $1", cluster.id)
            return not queue and count == len(names)

        await eventually(committed, what="every record but the refused one")
        # The next change of each: all committed (the refused one again refused).
        for rv, name in enumerate(order, start=len(order) + 1):
            queue.put(
                (cluster.id, TENANT_NS, name, f"uid-{name[:40]}"),
                workflow(name, rv=rv, phase="Succeeded"),
            )

        async def finished() -> bool:
            rows = await db.fetch("SELECT name, phase FROM runs WHERE cluster_id = $1", cluster.id)
            return {r["name"]: r["phase"] for r in rows} == dict.fromkeys(names, "Succeeded")

        await eventually(finished, what="every record's next change")
        assert writer.problem() is None
        await eventually(lambda: stream.caught_up(db), what="the stream caught up")
        await workers.shutdown(grace=5)
    assert refused(cluster.id) == before + 2
    assert stream.last_phases() == {(cluster.id, TENANT_NS, n): "Succeeded" for n in names}
    changes = await db.fetch("SELECT name, phase FROM run_changes ORDER BY seq")
    assert sorted((c["name"], c["phase"]) for c in changes) == sorted(
        (name, phase) for name in names for phase in ("Running", "Succeeded")
    )
