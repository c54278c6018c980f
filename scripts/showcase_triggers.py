"""The demo's event-trigger showcase: a tenant saves a pipeline with a webhook trigger, reads the
webhook's address and token, and an upstream system POSTs an event with that token to the
(simulated) Argo Events endpoint, which starts a run of the pipeline with the event's field as
its parameter. A POST without the token is refused first.

The demo sets no EVENTS_PUBLIC_HOST, so the answer has the webhook's path and says that there is
no public URL; the path is posted to the host's simulated Argo Events directly (in production,
the Ingress on EVENTS_PUBLIC_HOST routes it there).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

PIPELINE = {
    "name": "sales-upload",
    "description": "load a day of sales when the upstream system says it is ready",
    "definition": {
        "type": "wizard",
        "spec": {
            "apiVersion": "pipelines.kubeopera.io/v1",
            "parameters": [{"name": "day"}, {"name": "source", "default": "erp"}],
            "steps": [
                {
                    "name": "load",
                    "image": "ghcr.io/demo/load:1.4",
                    "command": ["load", "--day", "{{workflow.parameters.day}}"],
                }
            ],
        },
    },
    "triggers": [
        {
            "name": "on-upload",
            "type": "webhook",
            "parameters": {"day": "body.batch.day", "source": "header.X-Source"},
        }
    ],
}


def _log(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


async def triggers_showcase(
    api: str, headers: Mapping[str, str], world: Mapping[str, Any], *, delay: float = 30
) -> None:
    """Run the showcase against the apiserver at ``api`` as the tenant of ``headers``, posting
    events to the Argo Events of ``world`` (the simulator's world.json)."""
    await asyncio.sleep(delay)  # after the pipelines showcase has provisioned the tenant
    events_url = str(world["argo_events"]["url"])
    base = f"{api}/api/v1/data-pipelines"
    async with aiohttp.ClientSession(headers=dict(headers)) as http:
        async with http.post(base, json=PIPELINE) as answer:
            saved = await answer.json()
        if answer.status != 201:
            _log(f"POST /api/v1/data-pipelines (with a webhook trigger) → {answer.status} {saved}")
            return
        pipeline = saved["id"]
        _log(
            f"tenant demo saved {PIPELINE['name']!r} with webhook trigger 'on-upload' → 201: an "
            "EventSource, a Sensor and a token Secret in kubeopera-pipeline-events"
        )
        path = f"{base}/{pipeline}/triggers/on-upload/webhook"
        async with http.get(path) as answer:
            hook = await answer.json()
        if answer.status != 200:
            _log(f"GET .../triggers/on-upload/webhook → {answer.status} {hook}")
            return
        token = hook["token"]
        _log(
            f"GET /api/v1/data-pipelines/{pipeline}/triggers/on-upload/webhook → 200: path "
            f"{hook['path']}, token {token[:6]}… (audited; url: {hook['url']}: "
            f"{hook.get('warning', '')})"
        )
    event = json.dumps({"batch": {"day": "2026-12-03", "rows": 1200}})
    target = f"{events_url}{hook['path']}"
    async with aiohttp.ClientSession() as plain:
        async with plain.post(target, data=event) as answer:
            _log(f"POST {hook['path']} without the token → {answer.status} {await answer.text()}")
        sent = {"Authorization": f"Bearer {token}", "X-Source": "erp-eu"}
        async with plain.post(target, data=event, headers=sent) as answer:
            _log(
                f"POST {hook['path']} with 'Authorization: Bearer {token[:6]}…' and "
                f"{event} → {answer.status} {await answer.text()}"
            )
    async with aiohttp.ClientSession(headers=dict(headers)) as http:
        for _ in range(30):
            async with http.get(
                f"{api}/api/v1/workflows", params={"pipeline": pipeline, "limit": "1"}
            ) as answer:
                items = (await answer.json()).get("items", []) if answer.status == 200 else []
            if items:
                run = items[0]
                async with http.get(
                    f"{api}/api/v1/workflows/{run['cluster']['id']}/{run['namespace']}/"
                    f"{run['name']}"
                ) as answer:
                    detail = await answer.json()
                labels = detail.get("labels") or {}
                _log(
                    f"the event started run {run['namespace']}/{run['name']} (sensor "
                    f"{labels.get('events.argoproj.io/sensor')}, trigger "
                    f"{labels.get('kubeopera.io/trigger')}, parameters "
                    f"{detail.get('parameters')}) — watch it above"
                )
                return
            await asyncio.sleep(1)
        _log("no run appeared for the webhook's event: see .run/demo/sim.log")
