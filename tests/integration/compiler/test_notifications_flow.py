"""Run notifications end to end: a tenant saves a pipeline with a Slack and a PagerDuty channel
(the apiserver and the compiler), runs it on the sim host's data controller, the real watcher
records the finish, the compiler's sender (its production loop) posts to the local receivers,
and the run's detail shows the deliveries and their audit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from shared.config import Settings
from shared.k8s_informer import InformerOptions
from shared.tasks import Supervisor, run_service
from sim.receivers import Receivers
from tests.integration.compiler.notify_helpers import ROUTING_KEY, UI
from tests.integration.compiler.pipeline_stack import (
    WRITE,
    Stack,
    body,
    finish,
    headers,
    make_stack,
)
from tests.integration.watcher.harness import ensure_namespace, eventually
from watcher import runner as watcher_runner

HOOK = "T0001/B0001/s3cr3tT0ken"
CHANNELS = [
    {"name": "ops-slack", "type": "slack", "secret": "slack-hook", "on": "always"},
    {"name": "pager", "type": "pagerduty", "secret": "pagerduty", "severity": "critical"},
]


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    async with Receivers() as running:
        yield running


@pytest.fixture
async def nstack(
    db: asyncpg.Pool, database_url: str, settings_factory: Any, receivers: Receivers
) -> AsyncIterator[Stack]:
    async for value in make_stack(
        db,
        database_url,
        settings_factory,
        PUBLIC_UI_URL=UI,
        PAGERDUTY_EVENTS_URL=receivers.pagerduty_url,
        SLACK_WEBHOOK_URL_PREFIXES=[f"{receivers.url}/slack/"],
    ):
        yield value


@contextlib.asynccontextmanager
async def watching(stack: Stack, settings_factory: Any, tmp_path: Path) -> AsyncIterator[None]:
    """The real watcher over the sim host (no registry: the host alone)."""
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(stack.world.host.kubeconfig)
    ensure_namespace(stack.world.host.store, "workflow-manager")
    settings: Settings = settings_factory(HOST_KUBECONFIG=str(kubeconfig), POD_NAME="watcher-0")
    stop, ready = asyncio.Event(), asyncio.Event()

    async def main(workers: Supervisor) -> None:
        await watcher_runner.run(
            settings,
            workers,
            informer_options=InformerOptions(watch_timeout=5, backoff_max=1.0),
            started=ready,
        )

    task = asyncio.create_task(run_service(main, grace=5.0, signals=(), stop=stop))
    await asyncio.wait_for(ready.wait(), 15)
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def sending(stack: Stack) -> AsyncIterator[None]:
    """The sender's production loop, as the leader of wm-compiler-notify runs it."""
    task = asyncio.create_task(stack.compiler.notifications.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run_pipeline(stack: Stack, pipeline_id: str) -> str:
    status, started = await stack.call("POST", f"data-pipelines/{pipeline_id}/run", json={})
    assert status == 201, started
    name: str = started["workflow"]["name"]
    return name


async def test_a_failed_and_a_succeeded_run_notify_their_channels_once_with_what_happened(
    nstack: Stack, receivers: Receivers, settings_factory: Any, tmp_path: Path
) -> None:
    stack = nstack
    # The channels' data secrets first, through the API: a save refuses a channel naming
    # anything but one of the tenant's data secrets.
    for name, values in (
        ("slack-hook", {"url": receivers.slack_url(HOOK)}),
        ("pagerduty", {"routing_key": ROUTING_KEY}),
    ):
        status, stored = await stack.call(
            "PUT",
            f"data-secrets/{name}",
            json={"data": values},
            as_=headers(permissions=f"{WRITE},secrets.write"),
        )
        assert status == 201, stored
    status, saved = await stack.call(
        "POST", "data-pipelines", json={**body(fail_step=True), "notifications": CHANNELS}
    )
    assert status == 201, saved
    pipeline = saved["id"]
    # A PagerDuty channel told of successes is refused at save, naming the field.
    for on in ("success", "always"):
        paging = [CHANNELS[0], {**CHANNELS[1], "on": on}]
        status, refused = await stack.call(
            "POST", "data-pipelines", json={**body(name="paging"), "notifications": paging}
        )
        assert status == 400, refused
        assert [e["field"] for e in refused["details"]["errors"]] == ["notifications[1].on"]

    async with watching(stack, settings_factory, tmp_path), sending(stack):
        failed = await run_pipeline(stack, pipeline)
        workflow = await finish(stack, failed)
        assert workflow["status"]["phase"] == "Failed"
        await receivers.wait_for(lambda: len(receivers.messages()) == 1 and receivers.incidents)

        # Version 2 succeeds: Slack (always) is told, PagerDuty (failure) is not.
        status, _ = await stack.call(
            "PUT", f"data-pipelines/{pipeline}", json={**body(), "notifications": CHANNELS}
        )
        assert status == 200
        succeeded = await run_pipeline(stack, pipeline)
        assert (await finish(stack, succeeded))["status"]["phase"] == "Succeeded"
        await receivers.wait_for(lambda: len(receivers.messages()) == 2)

        async def settled() -> bool:
            states = await stack.pool.fetch("SELECT state FROM notification_deliveries")
            return len(states) == 3 and all(row["state"] == "sent" for row in states)

        await eventually(settled, what="three deliveries sent")

    uid = workflow["metadata"]["uid"]
    host = await stack.pool.fetchval("SELECT id FROM clusters WHERE is_host")
    link = f"{UI}/workflows/{host}/kubeopera-data-acme/{failed}"
    first, second = receivers.messages(HOOK)
    assert first["text"].startswith(":x: Pipeline *<")
    assert f"<{link}|nightly>*" in first["text"]
    assert f"(v1) run `{failed}` *failed* after" in first["text"]
    assert "at step `extract`" in first["text"]
    assert second["text"].startswith(":white_check_mark:")
    assert f"(v2) run `{succeeded}` *succeeded*" in second["text"]

    assert list(receivers.incidents) == [f"wm-{uid}"]
    (event,) = receivers.incidents[f"wm-{uid}"].events
    assert event["routing_key"] == ROUTING_KEY
    assert event["payload"]["severity"] == "critical"
    assert event["payload"]["custom_details"]["failed_step"] == "extract"
    assert event["links"][0]["href"] == link

    # The run shows its deliveries and their audit; neither holds the secret's value.
    reader = headers(permissions="workflows.read")
    status, detail = await stack.call(
        "GET", f"workflows/{host}/kubeopera-data-acme/{failed}", as_=reader
    )
    assert status == 200, detail
    assert [
        (n["channel"], n["type"], n["state"], n["attempts"]) for n in detail["notifications"]
    ] == [("ops-slack", "slack", "sent", 1), ("pager", "pagerduty", "sent", 1)]
    assert all(n["sent_at"] and n["status_code"] in (200, 202) for n in detail["notifications"])
    notified = [a for a in detail["actions"] if a["action"] == "notify"]
    assert sorted((a["parameters"]["channel"], a["actor"], a["outcome"]) for a in notified) == [
        ("ops-slack", "workflow-manager", "succeeded"),
        ("pager", "workflow-manager", "succeeded"),
    ]
    assert HOOK not in str(detail)
    assert ROUTING_KEY not in str(detail)

    status, other = await stack.call(
        "GET",
        f"workflows/{host}/kubeopera-data-acme/{failed}",
        as_=headers("globex", permissions="workflows.read"),
    )
    assert status == 404, other
