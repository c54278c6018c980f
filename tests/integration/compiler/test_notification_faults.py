"""Exactly once under ordinary faults, not only crashes: the sender running as the compiler runs
it (a supervised task) against real PostgreSQL, the Kubernetes API emulator and the local
receivers, which hold the requests in flight until the test releases them.

- The sender's LISTEN connection is terminated (``pg_terminate_backend``) while deliveries are
  in flight: they finish, each message arrives once, none ends ``unconfirmed``.
- One delivery fails (the session recording its outcome is terminated) while its siblings are
  in flight: the siblings finish, and the failing one's outcome is still recorded.
- A Slack 5xx may come from a proxy after Slack posted: one POST, ``unconfirmed``; a Slack
  webhook that refused the connection is tried again and posted once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest
from structlog.testing import capture_logs

from compiler.notifications.http_senders import NoAnswer, open_session, post_json
from shared import labels as L
from shared.runs import RunRecord
from shared.tasks import Supervisor
from sim.ports import free_port
from sim.receivers import Answer, Receivers
from tests.integration.compiler.notify_helpers import (
    HOOK,
    PAGER,
    SLACK,
    Env,
    data_secret,
    deliveries,
    listen_backend,
    record_runs,
    run_record,
    sender_env,
    sender_running,
    settled,
)
from tests.integration.watcher.harness import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def env(db: asyncpg.Pool, database_url: str) -> AsyncIterator[Env]:
    async with sender_env(db, database_url) as value:
        yield value


def arrived_once(env: Env, runs: list[RunRecord]) -> None:
    """Each run's Slack message was posted once and its PagerDuty event processed once."""
    for run in runs:
        posted = [m for m in env.receivers.messages(HOOK) if f"`{run.name}`" in m["text"]]
        assert len(posted) == 1, run.name
        events = [
            r
            for r in env.receivers.of("pagerduty")
            if r.taken and r.body.get("dedup_key") == f"wm-{run.uid}"
        ]
        assert len(events) == 1, run.name


async def states(env: Env) -> set[tuple[str, str, int]]:
    return {
        (row["channel"], row["state"], row["attempts"])
        for row in (await deliveries(env.pool)).values()
    }


async def test_a_lost_listen_connection_costs_no_delivery_in_flight(env: Env) -> None:
    await env.pipeline("p1", [SLACK, PAGER])
    env.receivers.hold("slack", taken=False)
    env.receivers.hold("pagerduty", taken=False)
    async with sender_running(env.sender):
        listener = await listen_backend(env.pool)
        runs = [run_record(cluster_id=env.host, pipeline_id="p1", version=1) for _ in "abc"]
        await record_runs(env.pool, *runs)
        await env.receivers.wait_for(lambda: len(env.receivers.held()) == 6)
        assert await env.pool.fetchval("SELECT pg_terminate_backend($1)", listener)
        await listen_backend(env.pool, other_than=listener)  # the sender saw the loss
        env.receivers.release("slack")
        env.receivers.release("pagerduty")
        await settled(env.pool, 6)
        arrived_once(env, runs)
        assert await states(env) == {("ops-slack", "sent", 1), ("pager", "sent", 1)}

        # And it still hears of the next finish, through its new LISTEN connection.
        later = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
        await record_runs(env.pool, later)
        await settled(env.pool, 8)
        arrived_once(env, [*runs, later])


async def test_a_failing_delivery_costs_none_of_its_siblings_in_flight(env: Env) -> None:
    """One PagerDuty delivery's outcome cannot be recorded (its session is terminated while it
    waits on a lock) while the Slack deliveries are in flight."""
    await env.pipeline("p1", [SLACK, PAGER])
    env.receivers.hold("slack", taken=False)
    env.receivers.hold("pagerduty", taken=False)
    async with sender_running(env.sender):
        runs = [run_record(cluster_id=env.host, pipeline_id="p1", version=1) for _ in "ab"]
        await record_runs(env.pool, *runs)
        await env.receivers.wait_for(lambda: len(env.receivers.held()) == 4)
        async with env.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            await conn.fetch(
                "SELECT id FROM notification_deliveries WHERE run_uid = $1 AND channel = 'pager' "
                "FOR UPDATE",
                runs[0].uid,
            )
            env.receivers.release("pagerduty")
            blocked: list[int] = []

            async def waiting() -> bool:
                rows = await env.pool.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                    conn.get_server_pid(),
                )
                blocked[:] = [int(row["pid"]) for row in rows]
                return len(blocked) == 1

            await eventually(waiting, what="the outcome of one delivery waiting on the lock")
            assert await env.pool.fetchval("SELECT pg_terminate_backend($1)", blocked[0])
            await env.receivers.wait_for(
                lambda: any(r.status == 202 for r in env.receivers.of("pagerduty"))
            )
            await transaction.rollback()
        env.receivers.release("slack")
        await settled(env.pool, 4)
        arrived_once(env, runs)
        assert await states(env) == {("ops-slack", "sent", 1), ("pager", "sent", 1)}


async def test_a_slack_5xx_is_unconfirmed_and_never_posted_again(env: Env) -> None:
    """A 504 may come from a proxy after Slack posted the message: one POST, ``unconfirmed``."""
    await env.pipeline("p1", [SLACK])
    env.receivers.script("slack", Answer(504, "upstream timed out"), Answer(502, ""))
    run = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    await record_runs(env.pool, run)
    await env.cycle()
    await env.pool.execute("UPDATE notification_deliveries SET next_attempt_at = now()")
    await env.sender.deliver_due(env.http)  # nothing is due: it is settled
    assert len(env.receivers.of("slack")) == 1
    row = (await deliveries(env.pool))[(run.uid, "ops-slack")]
    assert (row["state"], row["attempts"], row["status_code"]) == ("unconfirmed", 1, 504)
    assert row["last_error"].startswith("HTTP 504: upstream timed out")
    assert "not sent again" in row["last_error"]


async def test_a_slack_webhook_that_refused_the_connection_is_posted_once_when_up(
    env: Env,
) -> None:
    port = free_port()
    data_secret(env.cluster.store, "acme", "late-hook", {"url": f"http://127.0.0.1:{port}/slack/x"})
    await env.pipeline("p1", [{**SLACK, "secret": "late-hook"}])
    run = run_record(cluster_id=env.host, pipeline_id="p1", version=1)
    await record_runs(env.pool, run)
    await env.cycle()
    row = (await deliveries(env.pool))[(run.uid, "ops-slack")]
    assert (row["state"], row["attempts"]) == ("pending", 1)
    assert row["last_error"].startswith("could not connect")
    late = Receivers()
    await late.start(port=port)
    try:
        await env.pool.execute("UPDATE notification_deliveries SET next_attempt_at = now()")
        await env.sender.deliver_due(env.http)
        assert len(late.of("slack")) == 1
        assert len(late.messages("x")) == 1
    finally:
        await late.stop()
    row = (await deliveries(env.pool))[(run.uid, "ops-slack")]
    assert (row["state"], row["attempts"], row["status_code"]) == ("sent", 2, 200)


async def test_a_delivery_that_cannot_be_prepared_costs_none_of_its_siblings_in_flight(
    env: Env,
) -> None:
    """A channel's Secret that is not what a Secret should be (its ``data`` a list): reading it
    fails with an error of ours, while the Slack deliveries are in flight. Nothing was sent
    for it: it is tried again later; the others are sent."""
    secrets = env.cluster.store.resolve("", "v1", "secrets")
    env.cluster.store.create(
        secrets,
        "kubeopera-data-acme",
        {
            "metadata": {"name": "odd", "labels": {L.DATA_SECRET: L.DATA_SECRET_VALUE}},
            "data": ["x"],
        },
    )
    await env.pipeline("p1", [SLACK, {**PAGER, "secret": "odd"}])
    env.receivers.hold("slack", taken=False)
    async with sender_running(env.sender):
        runs = [run_record(cluster_id=env.host, pipeline_id="p1", version=1) for _ in "ab"]
        await record_runs(env.pool, *runs)
        await env.receivers.wait_for(lambda: len(env.receivers.held()) == 2)

        async def put_off() -> bool:
            rows = await deliveries(env.pool)
            return all(
                row["state"] == "pending" and row["last_error"] is not None
                for (_, channel), row in rows.items()
                if channel == "pager"
            )

        await eventually(put_off, what="the odd channel's deliveries put off")
        env.receivers.release("slack")

        async def sent() -> bool:
            rows = await deliveries(env.pool)
            return all(row["state"] == "sent" for (_, c), row in rows.items() if c == "ops-slack")

        await eventually(sent, what="the Slack deliveries sent")
    rows = await deliveries(env.pool)
    assert {(c, r["state"], r["attempts"]) for (_, c), r in rows.items()} == {
        ("ops-slack", "sent", 1),
        ("pager", "pending", 0),
    }
    assert {r["last_error"] for (_, c), r in rows.items() if c == "pager"} == {
        "the delivery could not be prepared (AttributeError)"
    }
    assert len(env.receivers.messages(HOOK)) == 2
    assert env.receivers.of("pagerduty") == []


async def test_a_stopping_sender_lets_its_requests_in_flight_end(env: Env) -> None:
    """A graceful stop (shutdown, or the Lease lost) while requests are on their way: they are
    let end and their outcomes recorded, not left for the next sender to call unconfirmed."""
    await env.pipeline("p1", [SLACK])
    env.receivers.hold("slack", taken=False)
    workers = Supervisor(name="notifications-test")
    workers.spawn("notifications", env.sender.run)
    runs = [run_record(cluster_id=env.host, pipeline_id="p1", version=1) for _ in "ab"]
    try:
        with capture_logs() as logged:
            await record_runs(env.pool, *runs)
            await env.receivers.wait_for(lambda: len(env.receivers.held()) == 2)
            stopping = asyncio.create_task(workers.shutdown(grace=30.0))

            async def draining() -> bool:
                return any(entry["event"] == "notifications_draining" for entry in logged)

            await eventually(draining, what="the sender stopping")
            env.receivers.release("slack")
            assert await stopping == []
    finally:
        await workers.shutdown(grace=10.0)
    assert len(env.receivers.messages(HOOK)) == 2
    rows = await deliveries(env.pool)
    assert {(uid, row["state"], row["attempts"]) for (uid, _), row in rows.items()} == {
        (runs[0].uid, "sent", 1),
        (runs[1].uid, "sent", 1),
    }


@contextlib.asynccontextmanager
async def tcp_server(answer: bytes) -> AsyncIterator[int]:
    """A TCP server on a free port that reads what comes and writes ``answer`` (not TLS)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4096)
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def test_only_requests_that_never_left_count_as_not_reached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What makes a Slack delivery retryable: no byte of the request sent (a TLS handshake
    that failed, a name that does not resolve, a proxy refusing the tunnel). A proxy's 504
    for a request it forwarded is an answer (and for Slack, unconfirmed)."""
    refused = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"
    async with tcp_server(refused) as plain, open_session() as http:
        for url in (f"https://127.0.0.1:{plain}/slack/x", "https://hooks.example.invalid/x"):
            with pytest.raises(NoAnswer) as no_answer:
                await post_json(http, url, {"text": "hi"})
            assert no_answer.value.reached is False, url
            assert no_answer.value.error.startswith("could not connect"), url
    async with tcp_server(refused) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy}")
        async with open_session() as http:
            with pytest.raises(NoAnswer) as no_answer:
                await post_json(http, "https://hooks.example.com/services/x", {"text": "hi"})
    assert no_answer.value.reached is False
    gateway = b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\n\r\n"
    async with tcp_server(gateway) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy}")
        async with open_session() as http:
            answer = await post_json(http, "http://hooks.example.com/services/x", {"text": "hi"})
    assert answer.status == 504
