"""Fixtures for the watcher against simulated clusters and the real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from shared.config import Settings
from shared.k8s_informer import InformerOptions
from shared.tasks import ServiceResult, Supervisor, run_service
from sim.kube.store import ClusterStore
from sim.kube.types import ResourceType
from sim.world import World, start_world
from watcher import runner

Obj = dict[str, Any]


def workflows(store: ClusterStore) -> ResourceType:
    return store.resolve("argoproj.io", "v1alpha1", "workflows")


def dag_workflow(name: str, *, fail: bool = False, ticks: int = 2) -> Obj:
    def step(step_name: str, script: str) -> Obj:
        env = [{"name": "SIM_DURATION_TICKS", "value": str(ticks)}]
        return {
            "name": step_name,
            "container": {
                "image": "busybox",
                "command": ["sh", "-c"],
                "args": [script],
                "env": env,
            },
        }

    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "day", "value": "2026-12-02"}]},
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {"name": "extract", "template": "extract"},
                            {"name": "load", "template": "load", "dependencies": ["extract"]},
                        ]
                    },
                },
                step("extract", "echo extract"),
                step("load", "exit 1" if fail else "echo load"),
            ],
        },
    }


def ensure_namespace(store: ClusterStore, namespace: str) -> None:
    namespaces = store.resolve("", "v1", "namespaces")
    if not store.list(namespaces, None, field_selector=f"metadata.name={namespace}")[0]:
        store.create(namespaces, None, {"metadata": {"name": namespace}})


def submit(store: ClusterStore, namespace: str, workflow: Obj) -> Obj:
    ensure_namespace(store, namespace)
    return store.create(workflows(store), namespace, workflow)


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within: float = 20.0, what: str = "condition"
) -> None:
    """Wait until ``check()`` holds; fail naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def cluster_state(store: ClusterStore) -> dict[tuple[str, str], tuple[str, str]]:
    """(namespace, name) → (uid, phase) of every Workflow on a simulated cluster."""
    items, _ = store.list(workflows(store), None)
    return {
        (w["metadata"]["namespace"], w["metadata"]["name"]): (
            w["metadata"]["uid"],
            (w.get("status") or {}).get("phase") or "Pending",
        )
        for w in items
    }


async def db_state(pool: asyncpg.Pool, cluster_id: str) -> dict[tuple[str, str], tuple[str, str]]:
    rows = await pool.fetch(
        "SELECT namespace, name, uid, phase FROM runs WHERE cluster_id = $1 AND deleted_at IS NULL",
        cluster_id,
    )
    return {(r["namespace"], r["name"]): (r["uid"], r["phase"]) for r in rows}


@pytest.fixture
async def world() -> AsyncIterator[World]:
    running = await start_world(2, tick=0.05, pod_gc_delay=0.5)
    ensure_namespace(running.host.store, "workflow-manager")  # where the Leases live
    try:
        yield running
    finally:
        await running.stop()


@dataclass
class RunningWatcher:
    identity: str
    stop: asyncio.Event
    task: asyncio.Task[ServiceResult]
    parts: list[runner.Watcher]

    def informing(self) -> int:
        """How many clusters this replica has listed and is watching."""
        return sum(
            1 for part in self.parts for i in part.fleet.informers.values() if i.state.synced
        )

    async def halt(self) -> ServiceResult:
        self.stop.set()
        return await asyncio.wait_for(self.task, 15)


@pytest.fixture
async def start_watcher(
    world: World, tmp_path: Path, settings_factory: Callable[..., Settings], db: asyncpg.Pool
) -> AsyncIterator[Callable[..., Awaitable[RunningWatcher]]]:
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(world.host.kubeconfig)
    started: list[RunningWatcher] = []

    async def start(
        identity: str = "replica-a",
        *,
        informing: int | None = 2,
        informer_options: InformerOptions | None = None,
        **overrides: Any,
    ) -> RunningWatcher:
        """Start a replica; wait until it informs on ``informing`` clusters (None: no wait)."""
        values: dict[str, Any] = {
            "HOST_KUBECONFIG": str(kubeconfig),
            "KUBEOPERA_API_BASE_URL": world.registry_url,
            "KUBEOPERA_API_INTERNAL_KEY": world.registry_key,
            "POD_NAME": identity,
            "CLUSTER_REFRESH_INTERVAL": 30.0,
        }
        values.update(overrides)
        settings = settings_factory(**values)
        stop = asyncio.Event()
        ready = asyncio.Event()
        parts: list[runner.Watcher] = []

        async def main(workers: Supervisor) -> None:
            await runner.run(
                settings,
                workers,
                informer_options=informer_options
                or InformerOptions(watch_timeout=5, backoff_max=1.0),
                started=ready,
                expose=parts.append,
            )

        task = asyncio.create_task(run_service(main, grace=5.0, signals=(), stop=stop))
        await asyncio.wait_for(ready.wait(), 15)
        running = RunningWatcher(identity, stop, task, parts)
        started.append(running)
        if informing is not None:

            async def synced() -> bool:
                return running.informing() >= informing

            await eventually(synced, what=f"{identity} informing on {informing} clusters")
        return running

    yield start
    for running in started:
        if not running.task.done():
            await running.halt()
