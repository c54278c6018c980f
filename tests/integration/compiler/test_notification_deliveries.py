"""The notification sender against real PostgreSQL, the Kubernetes API emulator (data secrets)
and the local receivers: which finishes are enqueued (once, from the run's own version, never
across tenants), retries honouring Retry-After, permanent failures and their reasons, and the
audit, which never holds a webhook URL or routing key."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from shared.db.notifications import NotificationStore
from shared.runs import RunPhase
from sim.receivers import Answer, Cut
from tests.integration.compiler.notify_helpers import (
    HOOK,
    PAGER,
    ROUTING_KEY,
    SLACK,
    Env,
    data_secret,
    delete_runs,
    deliveries,
    notify_audit,
    record_runs,
    run_record,
    sender_env,
)
from watcher.pg_store import RUN_CHANGES_LOCK, UPSERT_AND_LOG_SQL, record_columns


@pytest.fixture
async def env(db: asyncpg.Pool, database_url: str) -> AsyncIterator[Env]:
    async with sender_env(db, database_url) as value:
        yield value


async def test_a_finish_seen_three_times_is_enqueued_once_and_a_running_run_not_at_all(
    env: Env,
) -> None:
    await env.pipeline("p1", [SLACK, PAGER])
    running = run_record(cluster_id=env.host, pipeline_id="p1", version=1, phase=RunPhase.RUNNING)
    await record_runs(env.pool, running)
    await env.sender.enqueue_pending()
    assert await deliveries(env.pool) == {}

    failed = run_record(cluster_id=env.host, pipeline_id="p1", version=1, uid=running.uid)
    await record_runs(env.pool, failed)
    relabelled = run_record(cluster_id=env.host, pipeline_id="p1", version=1, uid=running.uid)
    await record_runs(env.pool, relabelled)  # a later update of the finished run
    await delete_runs(env.pool, relabelled)  # and Argo removing it
    await env.sender.enqueue_pending()
    await env.sender.enqueue_pending()
    enqueued = await deliveries(env.pool)
    assert set(enqueued) == {(running.uid, "ops-slack"), (running.uid, "pager")}
    assert {row["phase"] for row in enqueued.values()} == {"Failed"}
    assert await env.pool.fetchval(
        "SELECT seq FROM notification_cursor"
    ) == await env.pool.fetchval("SELECT max(seq) FROM run_changes")
    assert await NotificationStore(env.pool).lag() == 0

    await env.sender.deliver_due(env.http)
    await env.cycle()
    assert len(env.receivers.messages(HOOK)) == 1
    assert len(env.receivers.of("pagerduty")) == 1


async def test_the_channels_of_the_version_the_run_was_started_from_apply(env: Env) -> None:
    await env.pipeline("p1", [SLACK, PAGER], [])  # version 2 (current) has no channels
    from_v1 = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    from_v2 = run_record(cluster_id=env.host, pipeline_id="p1", version=2)
    unversioned = run_record(cluster_id=env.host, pipeline_id="p1", version=None)
    await record_runs(env.pool, from_v1, from_v2, unversioned)
    await env.pipeline("p2", [], [{**SLACK, "on": "success"}])
    p2_failed = run_record(cluster_id=env.host, pipeline_id="p2", version=None)
    p2_ok = run_record(
        cluster_id=env.host, pipeline_id="p2", version=None, phase=RunPhase.SUCCEEDED
    )
    await record_runs(env.pool, p2_failed, p2_ok)
    await env.sender.enqueue_pending()
    assert set(await deliveries(env.pool)) == {
        (from_v1.uid, "ops-slack"),
        (from_v1.uid, "pager"),
        (p2_ok.uid, "ops-slack"),  # no version label: the current version's channels
    }


async def test_runs_outside_the_pipelines_tenant_or_off_the_host_are_never_notified(
    env: Env,
) -> None:
    await env.pipeline("p1", [SLACK, PAGER])
    other_tenant = run_record(cluster_id=env.host, pipeline_id="p1", version=1, tenant="globex")
    await env.pool.execute(
        "INSERT INTO clusters (id, name, is_host, registered) VALUES ('edge', 'edge', false, true)"
    )
    off_host = run_record(cluster_id="edge", pipeline_id="p1", version=1)
    unknown = run_record(cluster_id=env.host, pipeline_id="nope", version=1)
    await record_runs(env.pool, other_tenant, off_host, unknown)
    await env.cycle()
    assert await deliveries(env.pool) == {}
    assert env.receivers.requests == []


async def test_a_finish_committed_late_behind_the_cursor_is_still_notified(env: Env) -> None:
    """A watcher transaction holding the change-log lock with its change uncommitted: the
    sender reads past everything committed, then the late commit is still read next time."""
    await env.pipeline("p1", [PAGER])
    late = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    async with env.pool.acquire() as writer:
        transaction = writer.transaction()
        await transaction.start()
        await writer.fetchval(UPSERT_AND_LOG_SQL, *record_columns([late]), RUN_CHANGES_LOCK)
        early = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
        await env.pool.execute("SELECT 1")  # the pool still answers while the writer waits
        await env.sender.enqueue_pending()
        assert await deliveries(env.pool) == {}
        await transaction.commit()
    await record_runs(env.pool, early)
    await env.sender.enqueue_pending()
    assert set(await deliveries(env.pool)) == {(late.uid, "pager"), (early.uid, "pager")}


async def test_429_and_5xx_are_tried_again_no_sooner_than_retry_after_then_sent(
    env: Env,
) -> None:
    await env.pipeline("p1", [SLACK, PAGER])
    run = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    env.receivers.script("slack", Answer(429, "rate_limited", {"Retry-After": "7"}))
    env.receivers.script("pagerduty", Answer(500, '{"status":"error"}'), Answer(503, ""))
    await record_runs(env.pool, run)
    await env.cycle()
    rows = await deliveries(env.pool)
    slack, pager = rows[(run.uid, "ops-slack")], rows[(run.uid, "pager")]
    assert (slack["state"], slack["attempts"], slack["status_code"]) == ("pending", 1, 429)
    assert slack["last_error"] == "HTTP 429: rate_limited"
    waited = (slack["next_attempt_at"] - slack["attempted_at"]).total_seconds()
    assert waited >= 7.0
    assert (pager["state"], pager["status_code"]) == ("pending", 500)
    await env.sender.deliver_due(env.http)  # nothing is due yet
    assert len(env.receivers.requests) == 2

    async def time_passes() -> None:
        await env.pool.execute("UPDATE notification_deliveries SET next_attempt_at = now()")

    await time_passes()
    await env.sender.deliver_due(env.http)
    await time_passes()
    await env.sender.deliver_due(env.http)
    rows = await deliveries(env.pool)
    assert [(r["state"], r["attempts"]) for r in rows.values()] == [("sent", 2), ("sent", 3)]
    assert len(env.receivers.messages(HOOK)) == 1
    assert [r.status for r in env.receivers.of("pagerduty")] == [500, 503, 202]
    assert len(env.receivers.incidents[f"wm-{run.uid}"].events) == 1
    audit = await notify_audit(env.pool)
    assert [(a["outcome"], a["detail"]["attempts"]) for a in audit] == [
        ("succeeded", 2),
        ("succeeded", 3),
    ]


async def test_permanent_failures_are_recorded_with_their_reason_never_a_secret(
    env: Env,
) -> None:
    store = env.cluster.store
    data_secret(store, "acme", "no-url", {"webhook": "x"})
    data_secret(store, "acme", "internal", {"url": "http://10.0.0.1:2746/api/v1/workflows"})
    channels = [
        SLACK,
        {"name": "gone", "type": "slack", "secret": "deleted-secret"},
        {"name": "keyless", "type": "slack", "secret": "no-url"},
        {"name": "inward", "type": "slack", "secret": "internal"},
        {**PAGER, "key": "other"},
    ]
    await env.pipeline("p1", channels)
    run = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    env.receivers.script("slack", Answer(404, "channel_not_found"))
    await record_runs(env.pool, run)
    await env.cycle()
    rows = await deliveries(env.pool)
    outcome = {
        channel: (row["state"], row["attempts"], row["last_error"])
        for (_, channel), row in rows.items()
    }
    assert outcome == {
        "ops-slack": ("failed", 1, "HTTP 404: channel_not_found"),
        "gone": (
            "failed",
            0,
            "the data secret 'deleted-secret' does not exist in the tenant's namespace",
        ),
        "keyless": ("failed", 0, "the data secret 'no-url' has no key 'url'"),
        "inward": (
            "failed",
            0,
            "the webhook URL in the channel's secret is not a Slack webhook "
            "(it must start with one of SLACK_WEBHOOK_URL_PREFIXES)",
        ),
        "pager": ("failed", 0, "the data secret 'pagerduty' has no key 'other'"),
    }
    assert len(env.receivers.requests) == 1  # only the one Slack answered 404
    audit = await notify_audit(env.pool)
    assert sorted(a["parameters"]["channel"] for a in audit) == sorted(outcome)
    assert {(a["actor"], a["outcome"], a["tenant"], a["run_uid"]) for a in audit} == {
        ("workflow-manager", "failed", "acme", run.uid)
    }
    everything = json.dumps([dict(r) for r in audit], default=str) + json.dumps(
        [dict(r) for r in rows.values()], default=str
    )
    for secret in (HOOK, ROUTING_KEY, "10.0.0.1"):
        assert secret not in everything


async def test_a_lost_answer_resends_to_pagerduty_but_never_to_slack(env: Env) -> None:
    await env.pipeline("p1", [SLACK, PAGER])
    run = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    env.receivers.script("slack", Cut())
    env.receivers.script("pagerduty", Cut())
    await record_runs(env.pool, run)
    await env.cycle()
    rows = await deliveries(env.pool)
    slack, pager = rows[(run.uid, "ops-slack")], rows[(run.uid, "pager")]
    assert slack["state"] == "unconfirmed"
    assert "not sent again" in slack["last_error"]
    assert pager["state"] == "pending"
    await env.pool.execute("UPDATE notification_deliveries SET next_attempt_at = now()")
    await env.sender.deliver_due(env.http)
    assert len(env.receivers.messages(HOOK)) == 1  # the cut one was posted; never again
    assert len(env.receivers.of("slack")) == 1
    assert len(env.receivers.of("pagerduty")) == 2
    assert list(env.receivers.incidents) == [f"wm-{run.uid}"]  # one incident, two events
    assert (await deliveries(env.pool))[(run.uid, "pager")]["state"] == "sent"


async def test_settled_deliveries_are_forgotten_after_run_retention(env: Env) -> None:
    await env.pipeline("p1", [PAGER])
    old, recent = (run_record(cluster_id=env.host, pipeline_id="p1", version=1) for _ in "ab")
    await record_runs(env.pool, old, recent)
    await env.cycle()
    await env.pool.execute(
        "UPDATE notification_deliveries SET updated_at = now() - interval '91 days' "
        "WHERE run_uid = $1",
        old.uid,
    )
    assert await NotificationStore(env.pool).prune(older_than_days=90) == 1
    assert set(await deliveries(env.pool)) == {(recent.uid, "pager")}
