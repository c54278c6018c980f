"""The notification sender: run on the compiler's leader of ``wm-compiler-notify`` only.

Two loops over ``shared.db.notifications.NotificationStore``:

- the enqueuer reads ``run_changes`` after the durable cursor (woken by ``NOTIFY runs``, and
  every ``poll_interval`` in case a notification was missed) and, in the transaction that
  moves the cursor, inserts one delivery per finished run and matching channel;
- the deliverer sends what is due: it reads the channel's data secret (a missing secret or
  key fails the delivery with that reason, never the value), records the attempt (committed)
  before the request, POSTs, and records the outcome (``compiler.notifications.retrying``).

When it starts (after a crash, a restart, or on a new leader) it first settles what the last
sender left in flight: PagerDuty deliveries are sent again (same dedup key), Slack deliveries
are marked ``unconfirmed`` and never sent again. docs/operations.md, "Run notifications", has
the exactly-once argument and the one window where a Slack message can be lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import asyncpg
from prometheus_client import Counter

from compiler.notifications.http_senders import NoAnswer, open_session, post_json
from compiler.notifications.planning import (
    PlannedDelivery,
    UnreadableChannels,
    channels_of,
    plan,
    webhook_url_problem,
    with_failed_step,
)
from compiler.notifications.rendering import FinishedRun, with_routing_key
from compiler.notifications.retrying import (
    Outcome,
    after_answer,
    after_no_answer,
    after_secret_unreadable,
)
from compiler.secrets.values import SecretGetter, read_data_secret
from shared.config import Settings
from shared.db.listening import listening
from shared.db.notifications import Delivery, FinishedChange, NotificationStore
from shared.errors import DependencyDown, NotFound, WorkflowManagerError
from shared.logging import get_logger
from shared.pipelines import PagerDutyChannel, SlackChannel
from shared.runs import RunPhase

log = get_logger(__name__)

RUNS_CHANNEL: Final = "runs"
INTERRUPTED: Final = (
    "the sender stopped while the request was in flight; the message may have been posted "
    "and is not sent again (Slack has no idempotency key)"
)
PRUNE_EVERY: Final = 3600.0
VERSIONS_CACHED: Final = 1024

ENQUEUED = Counter(
    "wm_notifications_enqueued_total", "Deliveries enqueued (one per run and channel)", ["type"]
)
OUTCOMES = Counter(
    "wm_notifications_attempts_total",
    "Outcomes of delivery attempts: sent, pending (to be tried again), failed, unconfirmed",
    ["type", "state"],
)


@dataclass(frozen=True, slots=True)
class SenderConfig:
    ui_url: str | None
    pagerduty_url: str
    slack_prefixes: tuple[str, ...]
    retention_days: int
    poll_interval: float = 30.0
    concurrency: int = 8
    batch: int = 200

    @classmethod
    def from_settings(cls, settings: Settings) -> SenderConfig:
        return cls(
            ui_url=settings.PUBLIC_UI_URL,
            pagerduty_url=settings.PAGERDUTY_EVENTS_URL,
            slack_prefixes=tuple(settings.SLACK_WEBHOOK_URL_PREFIXES),
            retention_days=settings.RUN_RETENTION_DAYS,
        )


class NotificationSender:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        objects: SecretGetter,
        config: SenderConfig,
        listen_dsn: Settings | str,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._store = NotificationStore(pool)
        self._objects = objects
        self._config = config
        self._dsn = listen_dsn
        self._jitter = jitter
        self._deliverable = asyncio.Event()
        self._versions: dict[tuple[str, int], list[SlackChannel | PagerDutyChannel]] = {}

    async def run(self) -> None:
        """Settle what a stopped sender left in flight, then enqueue and deliver until
        cancelled (leadership lost, shutdown). Raises when PostgreSQL goes away."""
        async with self._listening() as (wake, lost), open_session() as http:
            settled = await self._store.settle_interrupted(slack_error=INTERRUPTED)
            if settled:
                log.warning(
                    "notifications_interrupted_settled",
                    resent=sum(d.state == "pending" for d in settled),
                    unconfirmed=sum(d.state == "unconfirmed" for d in settled),
                )
            log.info("notifications_started", cursor=await self._store.cursor())
            async with asyncio.TaskGroup() as group:
                group.create_task(self._enqueue_loop(wake, lost))
                group.create_task(self._deliver_loop(http))

    # --- enqueueing ---------------------------------------------------------------------

    async def enqueue_pending(self) -> int:
        """Read every change after the cursor now; the deliveries inserted."""
        enqueued = 0
        while True:
            batch = await self._store.enqueue_batch(self._plan, limit=self._config.batch)
            enqueued += batch.enqueued
            if batch.pruned_from is not None:
                log.error(
                    "notifications_changes_pruned",
                    after_seq=batch.pruned_from - 1,
                    consequence="runs finished in pruned changes were not notified",
                )
            if batch.enqueued:
                self._deliverable.set()
            if not batch.more:
                return enqueued

    def _channels(self, change: FinishedChange) -> list[SlackChannel | PagerDutyChannel]:
        """The version's channels, parsed once per version (versions never change)."""
        key = (change.pipeline_id, change.pipeline_version)
        channels = self._versions.get(key)
        if channels is None:
            if len(self._versions) >= VERSIONS_CACHED:
                self._versions.clear()
            channels = self._versions[key] = channels_of(change.settings)
        return channels

    def _plan(self, change: FinishedChange) -> list[PlannedDelivery]:
        try:
            channels = self._channels(change)
        except UnreadableChannels as exc:
            log.error(
                "notification_channels_unreadable",
                pipeline=change.pipeline_id,
                version=change.pipeline_version,
                error=str(exc),
            )
            return []
        run = FinishedRun(
            cluster_id=change.cluster_id,
            namespace=change.namespace,
            name=change.name,
            uid=change.uid,
            tenant=change.tenant,
            phase=RunPhase(change.phase),
            pipeline_id=change.pipeline_id,
            pipeline_name=change.pipeline_name,
            pipeline_version=change.pipeline_version,
            started_at=change.started_at,
            finished_at=change.finished_at,
            duration_seconds=change.duration_seconds,
            message=change.message,
        )
        planned = plan(with_failed_step(run, change.graph), channels, ui_url=self._config.ui_url)
        for item in planned:
            ENQUEUED.labels(item.type).inc()
        return planned

    async def _enqueue_loop(self, wake: asyncio.Event, lost: asyncio.Event) -> None:
        next_prune = 0.0
        loop = asyncio.get_running_loop()
        while True:
            wake.clear()
            await self.enqueue_pending()
            if loop.time() >= next_prune:
                pruned = await self._store.prune(older_than_days=self._config.retention_days)
                if pruned:
                    log.info("notification_deliveries_pruned", deliveries=pruned)
                next_prune = loop.time() + PRUNE_EVERY
            await _first(wake, lost, within=self._config.poll_interval)
            if lost.is_set():
                raise DependencyDown(
                    "the LISTEN connection to PostgreSQL was lost",
                    details={"dependency": "postgresql"},
                )

    # --- delivering ---------------------------------------------------------------------

    async def deliver_due(self, http: aiohttp.ClientSession) -> int:
        """Send every delivery due now, ``concurrency`` at a time; how many were tried."""
        tried = 0
        limit = asyncio.Semaphore(self._config.concurrency)

        async def one(delivery: Delivery) -> None:
            async with limit:
                await self._deliver(http, delivery)

        while due := await self._store.due(limit=self._config.batch):
            async with asyncio.TaskGroup() as group:
                for delivery in due:
                    group.create_task(one(delivery))
            tried += len(due)
        return tried

    async def _deliver_loop(self, http: aiohttp.ClientSession) -> None:
        while True:
            self._deliverable.clear()
            await self.deliver_due(http)
            due_in = await self._store.next_due_in()
            timeout = self._config.poll_interval if due_in is None else due_in
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._deliverable.wait(), min(timeout, self._config.poll_interval)
                )

    async def _deliver(self, http: aiohttp.ClientSession, delivery: Delivery) -> None:
        target = await self._target(delivery)
        if isinstance(target, Outcome):
            await self._record(delivery, expected="pending", outcome=target, attempts=None)
            return
        url, body = target
        attempts = await self._store.begin_attempt(delivery.id)
        if attempts is None:
            return  # no longer pending: settled elsewhere
        status_code = None
        try:
            answer = await post_json(http, url, body)
        except NoAnswer as exc:
            outcome = after_no_answer(
                "slack" if delivery.type == "slack" else "pagerduty",
                reached=exc.reached,
                error=exc.error,
                attempts=attempts,
                age=delivery.age,
                jitter=self._jitter(),
            )
        else:
            status_code = answer.status
            outcome = after_answer(
                status=answer.status,
                body=answer.body,
                retry_after_header=answer.retry_after,
                attempts=attempts,
                age=delivery.age,
                jitter=self._jitter(),
            )
        await self._record(
            delivery,
            expected="sending",
            outcome=outcome,
            attempts=attempts,
            status_code=status_code,
        )

    async def _target(self, delivery: Delivery) -> tuple[str, dict[str, Any]] | Outcome:
        """Where the delivery goes and what is posted, or the outcome that it cannot go."""
        named = f"the data secret {delivery.secret!r}"
        try:
            values = await read_data_secret(self._objects, delivery.tenant, delivery.secret)
        except NotFound:
            return Outcome("failed", f"{named} does not exist in the tenant's namespace")
        except (WorkflowManagerError, OSError, TimeoutError):
            return after_secret_unreadable(
                attempts=delivery.attempts, age=delivery.age, jitter=self._jitter()
            )
        value = (values.get(delivery.secret_key) or "").strip()
        if not value:
            return Outcome("failed", f"{named} has no key {delivery.secret_key!r}")
        if delivery.type == "slack":
            problem = webhook_url_problem(value, self._config.slack_prefixes)
            if problem:
                return Outcome("failed", problem)
            return value, delivery.message
        return self._config.pagerduty_url, with_routing_key(delivery.message, value)

    async def _record(
        self,
        delivery: Delivery,
        *,
        expected: str,
        outcome: Outcome,
        attempts: int | None,
        status_code: int | None = None,
    ) -> None:
        recorded = await self._store.finish_attempt(
            delivery,
            expected=expected,
            state=outcome.state,
            status_code=status_code,
            error=outcome.error,
            retry_in=outcome.retry_in,
            attempts=delivery.attempts if attempts is None else attempts,
        )
        if not recorded:
            return
        OUTCOMES.labels(delivery.type, outcome.state).inc()
        fields = {
            "channel": delivery.channel,
            "type": delivery.type,
            "tenant": delivery.tenant,
            "namespace": delivery.namespace,
            "workflow": delivery.name,
            "attempts": attempts,
            "status_code": status_code,
        }
        if outcome.state == "sent":
            log.info("notification_sent", **fields)
        elif outcome.state == "pending":
            log.warning(
                "notification_retry",
                error=outcome.error,
                retry_in=round(outcome.retry_in, 1),
                **fields,
            )
        elif outcome.state == "unconfirmed":
            log.warning("notification_unconfirmed", error=outcome.error, **fields)
        else:
            log.warning("notification_failed", error=outcome.error, **fields)

    # --- wiring ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _listening(self) -> AsyncIterator[tuple[asyncio.Event, asyncio.Event]]:
        """A LISTEN connection on ``runs``: (set on every commit of run changes, set when the
        connection is lost)."""
        wake = asyncio.Event()
        channels = {RUNS_CHANNEL: lambda *_: wake.set()}
        async with listening(
            self._dsn, application_name="wm-compiler-notify", channels=channels
        ) as listened:
            yield wake, listened.lost


async def _first(*events: asyncio.Event, within: float) -> None:
    """Return when any of ``events`` is set, or after ``within`` seconds."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
