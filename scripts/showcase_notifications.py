"""The demo's run notifications: a tenant's pipeline with a Slack and a PagerDuty channel fails,
and the compiler's leader posts both messages to local receivers (``sim/receivers.py``), which
print them as they arrive; then the run's detail shows the deliveries.

The compiler must be started with ``COMPILER_ENV`` (where PagerDuty is, which Slack URLs are
allowed, the UI link); ``scripts/demo.py`` adds it to every deployable's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

RECEIVERS_PORT = 8126
RECEIVERS = f"http://127.0.0.1:{RECEIVERS_PORT}"
COMPILER_ENV = {
    "PAGERDUTY_EVENTS_URL": f"{RECEIVERS}/v2/enqueue",
    "SLACK_WEBHOOK_URL_PREFIXES": f"{RECEIVERS}/slack/",
    "PUBLIC_UI_URL": "https://kubeopera.example/workflow-manager",
}
HOOK = "T0DEMO/B0DEMO/not-a-real-token"
TENANT = "demo"
PIPELINE: dict[str, Any] = {
    "name": "nightly-report",
    "description": "builds the nightly report; its load step fails on purpose",
    "definition": {
        "type": "wizard",
        "spec": {
            "apiVersion": "pipelines.kubeopera.io/v1",
            "steps": [
                {"name": "extract", "image": "ghcr.io/demo/extract:1.4", "command": ["extract"]},
                {
                    "name": "load",
                    "image": "ghcr.io/demo/load:1.4",
                    "command": ["load"],
                    "depends_on": ["extract"],
                    "env": [{"name": "SIM_FAIL", "value": "true"}],
                },
            ],
        },
    },
}
CHANNELS: list[dict[str, str]] = [
    {"name": "ops-slack", "type": "slack", "secret": "ops-slack-webhook", "on": "always"},
    {"name": "on-call", "type": "pagerduty", "secret": "pagerduty", "severity": "error"},
]
PIPELINE["notifications"] = CHANNELS


def _show(log: Callable[[str], None], request: Any) -> None:
    body = request.body if isinstance(request.body, dict) else {}
    if request.kind == "slack":
        hook = request.path.rsplit("/", 1)[0] + "/…"  # the token part of a webhook is a secret
        log(f"Slack ← POST {hook}: {body.get('text', '')}")
    else:
        payload = body.get("payload") or {}
        log(
            f"PagerDuty ← {body.get('event_action')} dedup_key={body.get('dedup_key')} "
            f"severity={payload.get('severity')}: {payload.get('summary')}"
        )


async def _data_secrets(http: object, api: str, log: Callable[[str], None]) -> bool:
    """The channels' data secrets, stored through the data-secrets API (a save refuses a channel
    naming anything else); True when both were stored."""
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    for name, key, value in (
        ("ops-slack-webhook", "url", f"{RECEIVERS}/slack/{HOOK}"),
        ("pagerduty", "routing_key", "R0UT1NGKEYDEM0000000000000000000"),
    ):
        async with http.put(
            f"{api}/api/v1/data-secrets/{name}",
            json={"data": {key: value}},
            headers={"X-Kubeopera-Permissions": "pipelines.read,secrets.write"},
        ) as answer:
            if answer.status not in (200, 201):
                log(f"notifications: PUT /api/v1/data-secrets/{name} → {answer.status}")
                return False
    return True


async def notifications_showcase(
    *, api: str, headers: dict[str, str], kubeconfig: str, log: Callable[[str], None]
) -> None:
    """Start the receivers, save and run the failing pipeline, print what arrives, then the
    run's deliveries; the receivers stay up until the demo stops."""
    import aiohttp

    from sim.receivers import Receivers

    receivers = Receivers()
    receivers.listeners.append(lambda request: _show(log, request))
    await receivers.start(port=RECEIVERS_PORT)
    try:
        await asyncio.sleep(12)  # after the pipelines showcase has provisioned the tenant
        base = f"{api}/api/v1/data-pipelines"
        async with aiohttp.ClientSession(headers=headers) as http:
            if not await _data_secrets(http, api, log):
                return
            async with http.post(base, json=PIPELINE) as answer:
                saved = await answer.json()
            if answer.status != 201:
                log(f"notifications: POST /api/v1/data-pipelines → {answer.status} {saved}")
                return
            channels = ", ".join(
                f"{c['name']} ({c['type']}, on {c.get('on', 'failure')})" for c in CHANNELS
            )
            log(f"tenant {TENANT} saved {PIPELINE['name']!r} with notifications: {channels}")
            async with http.post(f"{base}/{saved['id']}/run", json={}) as answer:
                run = await answer.json()
            if answer.status != 201:
                log(f"notifications: POST .../run → {answer.status} {run}")
                return
            workflow = run["workflow"]
            log(f"ran {workflow['name']}; its load step fails, and the compiler's leader tells")
            log(f"Slack and PagerDuty (local receivers on {RECEIVERS}):")
            with contextlib.suppress(TimeoutError):
                await receivers.wait_for(
                    lambda: bool(receivers.messages()) and bool(receivers.incidents), within=180
                )
            await asyncio.sleep(1)
            path = f"workflows/{workflow['cluster']}/{workflow['namespace']}/{workflow['name']}"
            async with http.get(f"{api}/api/v1/{path}") as answer:
                detail = await answer.json() if answer.status == 200 else {}
            for delivery in detail.get("notifications", []):
                log(f"GET /api/v1/{path} notifications: {json.dumps(delivery)}")
        await asyncio.Event().wait()  # keep answering until the demo stops
    finally:
        await receivers.stop()
