"""The demo's schedules showcase: a tenant schedules a pipeline, sees its next run times in its
time zone, has a too-frequent and an @every schedule refused, watches the data controller fire
it (a run with source "schedule" in the run list), then pauses it.

The demo's simulated clusters run on the wall clock, so the demo's compiler takes
SCHEDULE_MIN_INTERVAL=1m (demo.py sets it; the default is 5m) and the schedule is every minute:
the first run comes within a minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
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
    api: str, headers: Mapping[str, str], log: Callable[[str], None]
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
