"""Helpers the benchmarks share: a throwaway database, realistic workflows, RSS readings."""

from __future__ import annotations

import contextlib
import json
import os
import random
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

ADMIN_DSN = os.environ.get("WM_BENCH_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextlib.asynccontextmanager
async def scratch_database(prefix: str = "wm_bench") -> AsyncIterator[str]:
    """A migrated database for one benchmark run, dropped afterwards."""
    from shared.db.migrations import apply_migrations

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = ADMIN_DSN.rpartition("/")[0] + "/" + name
    try:
        await apply_migrations(url)
        yield url
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def realistic_workflow(
    index: int, *, namespace: str, nodes: int = 12, rng: random.Random | None = None
) -> dict[str, Any]:
    """A finished Argo Workflow like a real one: a DAG of pods with inputs, outputs and artifacts.
    With the default 12 nodes its JSON is about 10 KB."""
    rng = rng or random.Random(index)
    name = f"etl-{index:07d}"
    start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=index)
    phase = "Failed" if index % 10 == 0 else "Succeeded"
    node_map: dict[str, Any] = {
        name: {
            "id": name,
            "name": name,
            "displayName": name,
            "type": "DAG",
            "templateName": "main",
            "phase": phase,
            "startedAt": _time(start),
            "finishedAt": _time(start + timedelta(minutes=nodes)),
            "children": [f"{name}-{n}" for n in range(nodes)],
            "progress": f"{nodes}/{nodes}",
        }
    }
    for n in range(nodes):
        node_id = f"{name}-{n}"
        node_map[node_id] = {
            "id": node_id,
            "name": f"{name}.step-{n}",
            "displayName": f"step-{n}",
            "type": "Pod",
            "templateName": "step",
            "phase": "Failed" if phase == "Failed" and n == nodes - 1 else "Succeeded",
            "boundaryID": name,
            "startedAt": _time(start + timedelta(minutes=n)),
            "finishedAt": _time(start + timedelta(minutes=n + 1)),
            "hostNodeName": f"ip-10-0-{rng.randrange(255)}-{rng.randrange(255)}.ec2.internal",
            "resourcesDuration": {"cpu": rng.randrange(1, 90), "memory": rng.randrange(1, 300)},
            "inputs": {"parameters": [{"name": "day", "value": "2026-11-01"}]},
            "outputs": {
                "parameters": [{"name": "rows", "value": str(rng.randrange(10**6))}],
                "artifacts": [
                    {
                        "name": "main-logs",
                        "s3": {"key": f"{name}/{name}-step-{n}/main.log"},
                    },
                    {
                        "name": "result",
                        "s3": {"key": f"{namespace}/{name}/step-{n}/result.tgz"},
                    },
                ],
                "exitCode": "0",
            },
        }
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "workflows.argoproj.io/phase": phase,
                "workflows.argoproj.io/completed": "true",
                "workflows.argoproj.io/workflow-template": "nightly-etl",
                "kubeopera.io/pipeline-kind": "data",
                "kubeopera.io/pipeline-id": f"p-{index % 37}",
            },
        },
        "spec": {
            "workflowTemplateRef": {"name": "nightly-etl"},
            "arguments": {"parameters": [{"name": "day", "value": "2026-11-01"}]},
        },
        "status": {
            "phase": phase,
            "startedAt": _time(start),
            "finishedAt": _time(start + timedelta(minutes=nodes)),
            "progress": f"{nodes}/{nodes}",
            "estimatedDuration": nodes * 60,
            "resourcesDuration": {"cpu": 312, "memory": 1210},
            "nodes": node_map,
        },
    }


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """(current RSS, peak RSS) in MB of a process, from /proc."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def size_kb(obj: Any) -> float:
    return len(json.dumps(obj, separators=(",", ":"))) / 1024
