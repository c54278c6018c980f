"""A failed run retried in place (the same uid: Failed, Running, Succeeded) that succeeds
resolves the PagerDuty incident its failure opened, with the same dedup key, through the real
sender and the local PagerDuty receiver; the resolve never reaches PagerDuty before the trigger
it resolves, and Slack is told once per run as before."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from shared.runs import RunPhase
from sim.receivers import Answer
from tests.integration.compiler.notify_helpers import (
    HOOK,
    PAGER,
    ROUTING_KEY,
    SLACK,
    Env,
    deliveries,
    notify_audit,
    record_runs,
    run_record,
    sender_env,
)


@pytest.fixture
async def env(db: asyncpg.Pool, database_url: str) -> AsyncIterator[Env]:
    async with sender_env(db, database_url) as value:
        yield value


async def time_passes(env: Env) -> None:
    await env.pool.execute(
        "UPDATE notification_deliveries SET next_attempt_at = now() WHERE state = 'pending'"
    )


async def test_a_failed_run_retried_to_success_resolves_its_incident_once(env: Env) -> None:
    await env.pipeline("p1", [SLACK, PAGER])
    failed = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    ok = run_record(cluster_id=env.host, pipeline_id="p1", version=1, phase=RunPhase.SUCCEEDED)
    await record_runs(env.pool, failed, ok)
    await env.cycle()
    key = f"wm-{failed.uid}"
    assert env.receivers.incidents[key].status == "triggered"

    def again(phase: RunPhase) -> object:
        return run_record(
            cluster_id=env.host,
            pipeline_id="p1",
            version=1,
            uid=failed.uid,
            name=failed.name,
            phase=phase,
        )

    await record_runs(env.pool, again(RunPhase.RUNNING))  # retried in place
    await env.cycle()
    await record_runs(env.pool, again(RunPhase.SUCCEEDED))
    await env.cycle()
    await record_runs(env.pool, again(RunPhase.SUCCEEDED))  # a later update of the finished run
    await env.cycle()

    incident = env.receivers.incidents[key]
    assert incident.status == "resolved"
    assert [e["event_action"] for e in incident.events] == ["trigger", "resolve"]
    resolve = incident.events[1]
    assert resolve["dedup_key"] == key
    assert resolve["routing_key"] == ROUTING_KEY
    assert "succeeded" in resolve["payload"]["summary"]
    assert resolve["payload"]["custom_details"]["phase"] == "Succeeded"
    assert list(env.receivers.incidents) == [key]  # the run that just succeeded opened none
    # Slack: one message per run and channel, as before (the failure, and the other success).
    assert len(env.receivers.messages(HOOK)) == 2
    resolves = await deliveries(env.pool, "resolve")
    assert set(resolves) == {(failed.uid, "pager")}
    row = resolves[(failed.uid, "pager")]
    assert (row["state"], row["phase"], row["type"]) == ("sent", "Succeeded", "pagerduty")
    audited = [
        (a["parameters"]["channel"], a["parameters"]["kind"], a["outcome"])
        for a in await notify_audit(env.pool)
        if a["run_uid"] == failed.uid
    ]
    assert sorted(audited) == [
        ("ops-slack", "notify", "succeeded"),
        ("pager", "notify", "succeeded"),
        ("pager", "resolve", "succeeded"),
    ]


async def test_the_resolve_waits_for_the_trigger_it_resolves(env: Env) -> None:
    """The run failed, was retried and succeeded before the sender read any of it, and
    PagerDuty refuses the trigger at first: the resolve is sent only after the trigger."""
    await env.pipeline("p1", [PAGER])
    failed = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    await record_runs(env.pool, failed)
    for phase in (RunPhase.RUNNING, RunPhase.SUCCEEDED):
        await record_runs(
            env.pool,
            run_record(
                cluster_id=env.host,
                pipeline_id="p1",
                version=1,
                uid=failed.uid,
                name=failed.name,
                phase=phase,
            ),
        )
    env.receivers.script("pagerduty", Answer(500, '{"status":"error"}'))
    await env.cycle()
    assert [(r.body["event_action"], r.status) for r in env.receivers.of("pagerduty")] == [
        ("trigger", 500)
    ]
    resolve = (await deliveries(env.pool, "resolve"))[(failed.uid, "pager")]
    assert (resolve["state"], resolve["attempts"]) == ("pending", 0)
    await time_passes(env)
    await env.sender.deliver_due(env.http)
    assert [(r.body["event_action"], r.status) for r in env.receivers.of("pagerduty")] == [
        ("trigger", 500),
        ("trigger", 202),
        ("resolve", 202),
    ]
    assert env.receivers.incidents[f"wm-{failed.uid}"].status == "resolved"
    assert await env.sender.deliver_due(env.http) == 0
