"""Exactly once per run and channel, through crashes: the real ``wm-compiler`` process (its
leader sends notifications) is SIGKILLed at each step of a delivery, restarted, and left to
finish, against real PostgreSQL, the Kubernetes API emulator and the local receivers.

Each cycle finishes three runs of a pipeline with a Slack and a PagerDuty channel (six
deliveries) through the watcher's own writer, and stops the sender at one step, every delivery
of the cycle at the same step, found by what can be observed, never by time:

- ``enqueue``: the transaction inserting the deliveries has read the changes and waits to
  insert (on an uncommitted row of the test's with the same run and channel): nothing was
  enqueued, the cursor did not move;
- ``enqueued``: the deliveries are committed and each is reading its channel's secret (the
  emulator holds those GETs): no attempt was recorded;
- ``attempted``: each attempt is recorded and its request written, but held on its way (the
  receivers hold it untaken: it never arrives once its sender is gone);
- ``in_flight``: each request was taken by its receiver (posted, incident opened) and the
  answer is held;
- ``answered``: each answer reached the sender, whose outcome update waits on a row lock the
  test holds.

After a restart: PagerDuty is sent again wherever no outcome was recorded (its dedup key keeps
one incident per run); Slack is never sent again once an attempt was recorded without outcome
(``unconfirmed``), so its message is lost exactly in the ``attempted`` step, the documented
window (docs/operations.md, "Run notifications"), and nowhere else. Two rounds of the five
cycles: ten kills, thirty runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import web

from compiler.pipelines.ports import Caller
from compiler.runner import assemble
from shared.k8s import client_from_kubeconfig
from shared.runs import RunRecord
from sim.kube.server import create_app, kubeconfig_yaml
from sim.kube.store import ClusterStore
from sim.ports import free_port
from sim.receivers import Receivers
from sim.world import EVENTS_NAMESPACE
from tests.integration.compiler.notify_helpers import (
    ROUTING_KEY,
    UI,
    deliveries,
    record_runs,
    run_record,
)
from tests.integration.compiler.pipeline_stack import body
from tests.integration.watcher.harness import ensure_namespace, eventually

ROOT = Path(__file__).resolve().parents[3]
HOOK = "T0/B0/crash-test"
BUCKET = "artifacts"
STEPS = ("enqueue", "enqueued", "attempted", "in_flight", "answered")
CHANNELS = [
    {"name": "ops-slack", "type": "slack", "secret": "slack-hook", "on": "always"},
    {"name": "pager", "type": "pagerduty", "secret": "pagerduty"},
]
FINAL = ("sent", "failed", "unconfirmed")

pytestmark = pytest.mark.timeout(300)


class SecretGate:
    """Holds the emulator's answers to GETs of the channels' Secrets while armed (the sender
    reading a channel's secret), counting the held requests."""

    def __init__(self, *names: str) -> None:
        self.paths = tuple(f"/secrets/{name}" for name in names)
        self.held = 0
        self._open = asyncio.Event()
        self._open.set()
        self._changed = asyncio.Condition()

    def arm(self) -> None:
        self.held = 0
        self._open.clear()

    def disarm(self) -> None:
        self._open.set()

    async def wait_held(self, count: int) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.held >= count), 30)

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        held = request.method == "GET" and request.path.endswith(self.paths)
        if held and not self._open.is_set():
            async with self._changed:
                self.held += 1
                self._changed.notify_all()
            await self._open.wait()
        return await handler(request)


@dataclass
class Host:
    store: ClusterStore
    kubeconfig: Path
    gate: SecretGate


@contextlib.asynccontextmanager
async def emulated_host(tmp_path: Path) -> AsyncIterator[Host]:
    """The host cluster's API (the emulator over plain HTTP) with the secret gate in front."""
    store = ClusterStore("host")
    gate = SecretGate(*(channel["secret"] for channel in CHANNELS))
    app = create_app(store, token="crash-token")
    app.middlewares.append(gate.middleware)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    kubeconfig = tmp_path / "host.kubeconfig"
    kubeconfig.write_text(kubeconfig_yaml("host", url, "crash-token"))
    ensure_namespace(store, "workflow-manager")
    ensure_namespace(store, EVENTS_NAMESPACE)  # provisioning binds tenants' sensor accounts there
    try:
        yield Host(store, kubeconfig, gate)
    finally:
        gate.disarm()
        await runner.cleanup()


@dataclass
class Compiler:
    """``wm-compiler`` as a real process; the same pod name on every start, as a restarted
    container keeps its pod's, so it resumes its own lease at once."""

    env: dict[str, str]
    log: Path
    process: asyncio.subprocess.Process | None = None
    starts: int = field(default=0)

    async def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "compiler", env=self.env, cwd=ROOT, stdout=log, stderr=log
            )

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        assert await self.process.wait() == -signal.SIGKILL

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()


@dataclass
class Rig:
    pool: asyncpg.Pool
    host: Host
    receivers: Receivers
    compiler: Compiler
    cluster_id: str
    pipeline_id: str
    cycles: dict[str, list[list[RunRecord]]] = field(default_factory=dict)

    def new_runs(self) -> list[RunRecord]:
        return [
            run_record(cluster_id=self.cluster_id, pipeline_id=self.pipeline_id, version=1)
            for _ in range(3)
        ]

    async def finish_runs(self) -> list[RunRecord]:
        runs = self.new_runs()
        await record_runs(self.pool, *runs)  # one commit: three finishes, one NOTIFY
        return runs

    async def sender_backends_gone(self) -> None:
        """The killed process's PostgreSQL sessions have ended (an orphaned statement could
        otherwise still run)."""

        async def gone() -> bool:
            count = await self.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name LIKE 'wm-compiler%'"
            )
            return int(count) == 0

        try:
            await eventually(gone, what="the killed sender's sessions to end")
        except AssertionError:
            rows = await self.pool.fetch(
                "SELECT application_name, state, wait_event_type, wait_event, query "
                "FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name LIKE 'wm-compiler%'"
            )
            raise AssertionError([dict(row) for row in rows]) from None

    async def blocked_by(self, conn: asyncpg.Connection, count: int) -> None:
        """``count`` sessions of the sender wait on a lock ``conn`` holds."""
        pid = conn.get_server_pid()

        async def waiting() -> bool:
            value = await self.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) "
                "AND application_name = 'wm-compiler'",
                pid,
            )
            return int(value) >= count

        await eventually(waiting, what=f"{count} sender sessions waiting on the test's lock")

    async def quiescent(self, total: int) -> None:
        """Every delivery enqueued so far has its final state."""

        async def settled() -> bool:
            rows = await self.pool.fetch("SELECT state FROM notification_deliveries")
            return len(rows) == total and all(row["state"] in FINAL for row in rows)

        await eventually(settled, within=60, what=f"{total} deliveries settled")

    async def states(self, runs: list[RunRecord]) -> set[tuple[str, str, int]]:
        rows = await deliveries(self.pool)
        return {
            (row["channel"], row["state"], row["attempts"])
            for (uid, _), row in rows.items()
            if uid in {run.uid for run in runs}
        }


@pytest.fixture
async def rig(
    db: asyncpg.Pool, database_url: str, settings_factory: Any, tmp_path: Path
) -> AsyncIterator[Rig]:
    async with emulated_host(tmp_path) as host, Receivers() as receivers:
        api = await client_from_kubeconfig(host.kubeconfig.read_text())
        try:
            # The pipeline is saved through the compiler's own save path (tenant provisioned,
            # template applied, the version's settings recorded).
            parts = assemble(
                settings_factory(HOST_KUBECONFIG=str(host.kubeconfig), ARTIFACT_BUCKET=BUCKET),
                pool=db,
                host_api=api,
                storage=None,
            )
            # Its channels' data secrets first, through the data-secrets service: a save refuses
            # a channel naming anything else.
            assert parts.secrets is not None
            for name, values in (
                ("slack-hook", {"url": receivers.slack_url(HOOK)}),
                ("pagerduty", {"routing_key": ROUTING_KEY}),
            ):
                await parts.secrets.put("acme", "alice@acme", name, {"data": values})
            saved = await parts.service.create(
                Caller("acme", "alice@acme"),
                "data",
                {**body(fail_step=True), "notifications": CHANNELS},
            )
        finally:
            await api.close()
        # The cursor row as migration 0009 leaves it (the test database is emptied per test).
        await db.execute(
            "INSERT INTO notification_cursor (seq) SELECT coalesce(max(seq), 0) FROM run_changes"
        )
        cluster_id = "host-crash"
        await db.execute(
            "INSERT INTO clusters (id, name, is_host, registered) VALUES ($1, $1, true, true)",
            cluster_id,
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")},
            "DATABASE_URL": database_url,
            "HOST_KUBECONFIG": str(host.kubeconfig),
            "HTTP_PORT": str(free_port()),
            "HEALTH_PORT": "0",
            "INTERNAL_API_KEY": "crash-internal-key",
            "ARTIFACT_BUCKET": BUCKET,
            "POD_NAME": "wm-compiler-0",
            "POD_NAMESPACE": "workflow-manager",
            "LEASE_DURATION": "2s",
            "LEASE_RENEW_PERIOD": "0.5s",
            "DB_POOL_MAX": "16",
            "LOG_JSON": "true",
            "TENANT_RECONCILE_INTERVAL": "1h",
            "PUBLIC_UI_URL": UI,
            "PAGERDUTY_EVENTS_URL": receivers.pagerduty_url,
            "SLACK_WEBHOOK_URL_PREFIXES": f"{receivers.url}/slack/",
        }
        compiler = Compiler(env, tmp_path / "compiler.log")
        try:
            yield Rig(db, host, receivers, compiler, cluster_id, str(saved["id"]))
        finally:
            await compiler.stop()


async def kill_at(rig: Rig, step: str) -> list[RunRecord]:
    """Finish three runs and SIGKILL the sender once all six deliveries reached ``step``."""
    receivers, gate = rig.receivers, rig.host.gate
    if step == "enqueue":
        runs = rig.new_runs()
        cursor = await rig.pool.fetchval("SELECT seq FROM notification_cursor")
        async with rig.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            # An uncommitted delivery of the first run's Slack channel: the sender's insert of
            # the same (run, channel), inside its enqueue transaction, waits on it.
            await conn.execute(
                "INSERT INTO notification_deliveries (run_uid, channel, type, cluster_id, "
                "namespace, name, tenant, pipeline_id, pipeline_version, phase, secret, "
                "secret_key, message, change_seq) VALUES ($1, 'ops-slack', 'slack', $2, $3, "
                "$4, 'acme', $5, 1, 'Failed', 'x', 'url', '{}', 0)",
                runs[0].uid,
                rig.cluster_id,
                runs[0].namespace,
                runs[0].name,
                rig.pipeline_id,
            )
            await record_runs(rig.pool, *runs)
            await rig.blocked_by(conn, 1)
            await rig.compiler.kill()
            await transaction.rollback()
        assert await rig.pool.fetchval("SELECT seq FROM notification_cursor") == cursor
        assert not await rig.states(runs)
        return runs
    if step == "enqueued":
        gate.arm()
        runs = await rig.finish_runs()
        await gate.wait_held(6)
        await rig.compiler.kill()
        gate.disarm()
        assert await rig.states(runs) == {("ops-slack", "pending", 0), ("pager", "pending", 0)}
        return runs
    for kind in ("slack", "pagerduty"):
        receivers.hold(kind, taken=step != "attempted")  # type: ignore[arg-type]
    runs = await rig.finish_runs()
    await receivers.wait_for(lambda: len(receivers.held()) == 6)
    if step == "attempted":
        await rig.compiler.kill()
        receivers.drop("slack")
        receivers.drop("pagerduty")
    elif step == "in_flight":
        await rig.compiler.kill()
        receivers.release("slack")
        receivers.release("pagerduty")
    else:  # answered
        async with rig.pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            await conn.fetch(
                "SELECT id FROM notification_deliveries WHERE run_uid = ANY($1::text[]) FOR UPDATE",
                [run.uid for run in runs],
            )
            receivers.release("slack")
            receivers.release("pagerduty")
            await rig.blocked_by(conn, 6)
            await rig.compiler.kill()
            await transaction.rollback()
        answered = [r for r in receivers.requests if r.taken and r.status in (200, 202)]
        assert {r.body.get("dedup_key") for r in answered if r.kind == "pagerduty"} >= {
            f"wm-{run.uid}" for run in runs
        }
    assert await rig.states(runs) == {("ops-slack", "sending", 1), ("pager", "sending", 1)}
    return runs


def slack_messages_of(receivers: Receivers, run: RunRecord) -> int:
    return sum(f"`{run.name}`" in message["text"] for message in receivers.messages(HOOK))


async def test_killed_at_every_step_no_incident_or_message_twice_none_lost_outside_the_window(
    rig: Rig,
) -> None:
    total = 0
    await rig.compiler.start()
    for _round in range(2):
        for step in STEPS:
            runs = await kill_at(rig, step)
            rig.cycles.setdefault(step, []).append(runs)
            total += 6
            await rig.sender_backends_gone()
            await rig.compiler.start()
            await rig.quiescent(total)

    receivers = rig.receivers
    every_run = [run for cycles in rig.cycles.values() for runs in cycles for run in runs]
    assert len(every_run) == 30
    # PagerDuty: exactly one incident per run, whatever the step.
    assert sorted(receivers.incidents) == sorted(f"wm-{run.uid}" for run in every_run)
    for step, cycles in rig.cycles.items():
        resent = step in ("attempted", "in_flight", "answered")
        for runs in cycles:
            for run in runs:
                events = [
                    r
                    for r in receivers.of("pagerduty")
                    if r.body.get("dedup_key") == f"wm-{run.uid}"
                ]
                assert len(events) == (2 if resent else 1), (step, run.name)
                assert all(r.body["routing_key"] == ROUTING_KEY for r in events)
                # Slack: never twice; lost exactly in the documented window.
                expected = 0 if step == "attempted" else 1
                assert slack_messages_of(receivers, run) == expected, (step, run.name)
            unconfirmed = step in ("attempted", "in_flight", "answered")
            assert await rig.states(runs) == {
                ("ops-slack", "unconfirmed" if unconfirmed else "sent", 1),
                ("pager", "sent", 2 if resent else 1),
            }, step
    assert len(receivers.messages(HOOK)) == 30 - 3 * 2
    # Every final outcome is audited once, none holds the webhook or the routing key.
    audited = await rig.pool.fetch(
        "SELECT run_uid, parameters->>'channel' AS channel, outcome, detail FROM run_actions "
        "WHERE action = 'notify'"
    )
    assert len(audited) == 60
    assert len({(row["run_uid"], row["channel"]) for row in audited}) == 60
    assert HOOK not in str([dict(row) for row in audited])
    assert ROUTING_KEY not in str([dict(row) for row in audited])
    assert rig.compiler.starts == 11
