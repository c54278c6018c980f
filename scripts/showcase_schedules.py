"""The demo's schedules showcase: a tenant schedules a pipeline, sees its next run times in its
time zone, has a too-frequent and an @every schedule refused, watches the data controller fire
it (a run with source "schedule" in the run list), then pauses it. A zone that is not a
canonical IANA name is refused naming the current one; the pause is recorded in PostgreSQL, so
when the CronWorkflow is deleted behind the platform's back (a `kubectl delete`), the compiler's
drift reconciler makes it again from the current version, still paused (demo.py sets
PIPELINE_RECONCILE_INTERVAL=10s).

The demo's simulated clusters run on the wall clock, so the demo's compiler takes
SCHEDULE_MIN_INTERVAL=1m (demo.py sets it; the default is 5m) and the schedule is every minute:
the first run comes within a minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

SCHEDULED = {
    "name": "minutely-report",
    "description": "a report every minute (the demo's floor is 1 minute)",
    "definition": {
        "type": "wizard",
        "spec": {
            "apiVersion": "pipelines.kubeopera.io/v1",
            "steps": [{"name": "report", "image": "ghcr.io/demo/report:1.0", "command": ["r"]}],
        },
    },
    "schedule": {"cron": ["* * * * *"], "timezone": "Europe/Helsinki"},
}


async def schedules_showcase(
    api: str, headers: Mapping[str, str], log: Callable[[str], None], *, kubeconfig: str
) -> None:
    await asyncio.sleep(12)
    base = f"{api}/api/v1/data-pipelines"
    async with aiohttp.ClientSession(headers=dict(headers)) as http:
        for cron in (["*/2 * * * *", "1 * * * *"], ["@every 30s"]):
            refused = {**SCHEDULED, "schedule": {**SCHEDULED["schedule"], "cron": cron}}  # type: ignore[dict-item]
            async with http.post(f"{base}/validate", json=refused) as answer:
                errors = (await answer.json()).get("details", {}).get("errors", [])
            for error in errors:
                log(f"schedule {cron} → {answer.status} {error['field']}: {error['message']}")
        for zone in ("Europe/Kiev", "localtime"):
            refused = {**SCHEDULED, "schedule": {**SCHEDULED["schedule"], "timezone": zone}}  # type: ignore[dict-item]
            async with http.post(f"{base}/validate", json=refused) as answer:
                errors = (await answer.json()).get("details", {}).get("errors", [])
            for error in errors:
                log(f"time zone {zone!r} → {answer.status} {error['field']}: {error['message']}")
        async with http.post(base, json=SCHEDULED) as answer:
            saved: dict[str, Any] = await answer.json()
        if answer.status != 201:
            log(f"POST /api/v1/data-pipelines (scheduled) → {answer.status} {saved}")
            return
        pipeline = saved["id"]
        async with http.get(f"{base}/{pipeline}") as answer:
            schedule = (await answer.json())["schedule"]
        log(
            f"tenant demo scheduled {SCHEDULED['name']!r} ({schedule['cron']}, "
            f"{schedule['timezone']}) → CronWorkflow {schedule['cron_workflow']} for the data "
            f"controller; next runs {', '.join(schedule['next_runs'][:3])}"
        )
        run = await _first_scheduled_run(http, api, pipeline)
        if run is None:
            log("no scheduled run appeared within 90 s")
            return
        log(
            f"the data controller fired it: {run['namespace']}/{run['name']} "
            f"source={run['source']} phase={run['phase']} (GET /api/v1/workflows?source=schedule)"
        )
        async with http.post(f"{base}/{pipeline}/schedule/pause") as answer:
            paused = await answer.json()
        log(
            f"POST .../{pipeline}/schedule/pause → {answer.status}: paused by "
            f"{paused.get('paused_by')} at {paused.get('paused_at')}; a save keeps it paused"
        )
        await _deleted_and_made_again(
            kubeconfig, namespace=run["namespace"], name=schedule["cron_workflow"], log=log
        )


async def _deleted_and_made_again(
    kubeconfig: str, *, namespace: str, name: str, log: Callable[[str], None]
) -> None:
    """Delete the CronWorkflow behind the platform's back; wait for the reconciler to make it
    again, paused as recorded."""
    from kubernetes_asyncio.client import CustomObjectsApi

    from shared.k8s import client_from_kubeconfig

    client = await client_from_kubeconfig(await asyncio.to_thread(Path(kubeconfig).read_text))
    try:
        api = CustomObjectsApi(client)
        plural = ("argoproj.io", "v1alpha1", namespace, "cronworkflows", name)
        await api.delete_namespaced_custom_object(*plural)
        log(f"CronWorkflow {namespace}/{name} deleted out of band (as a kubectl delete would)")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await asyncio.sleep(2)
            try:
                again = await api.get_namespaced_custom_object(*plural)
            except Exception:  # not there yet
                continue
            log(
                f"the compiler's drift reconciler made {name} again from the current version, "
                f"suspend={again['spec'].get('suspend')} (the pause recorded in PostgreSQL)"
            )
            return
        log(f"{name} did not come back within 60 s (see .run/demo/compiler.log)")
    finally:
        await client.close()


async def _first_scheduled_run(
    http: aiohttp.ClientSession, api: str, pipeline: str
) -> dict[str, Any] | None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        params = {"source": "schedule", "pipeline": pipeline, "limit": "5"}
        async with http.get(f"{api}/api/v1/workflows", params=params) as answer:
            items = (await answer.json()).get("items", []) if answer.status == 200 else []
        if items:
            return dict(items[0])
        await asyncio.sleep(3)
    return None
