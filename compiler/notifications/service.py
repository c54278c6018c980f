"""The notification sender: run on the compiler's leader of ``wm-compiler-notify`` only.

Two loops over ``shared.db.notifications.NotificationStore``:

- the enqueuer reads ``run_changes`` after the durable cursor (woken by ``NOTIFY runs`` on a
  LISTEN connection reopened whenever it is lost, and every ``poll_interval`` in case a
  notification was missed) and, in the transaction that moves the cursor, inserts one
  delivery per finished run, matching channel and kind (a PagerDuty resolve is the second);
- the deliverer sends what is due: it reads the channel's data secret (a missing secret or
  key fails the delivery with that reason, never the value), records the attempt (committed)
  before the request, POSTs, and records the outcome (``compiler.notifications.retrying``).
  Each delivery is on its own: one failing never cancels another in flight.

When it starts (after a crash, a restart, or on a new leader) it first settles what the last
sender left in flight: PagerDuty deliveries are sent again (same dedup key), Slack deliveries
are marked ``unconfirmed`` and never sent again. docs/operations.md, "Run notifications", has
the exactly-once argument and the one window where a Slack message can be lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import asyncpg
from prometheus_client import Counter

from compiler.notifications.http_senders import (
    REQUEST_TIMEOUT,
    NoAnswer,
    open_session,
    post_json,
)
from compiler.notifications.planning import (
    ChannelType,
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
    after_fault,
    after_no_answer,
    after_secret_unreadable,
)
from compiler.secrets.values import SecretGetter, read_data_secret
from shared.config import Settings
from shared.db.listening import listen_forever
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
# A stopping sender waits this long for its requests in flight: one request's timeout and some
# time to record its outcome (SHUTDOWN_GRACE, 25 s by default, leaves room for it).
DRAIN: Final = REQUEST_TIMEOUT + 2.0
RETRY_FIRST: Final = 0.1
RETRY_CAP: Final = 5.0
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
        self._faults = 0  # deliveries that failed with an error of their own, ever
        self._stopping = False
        self._versions: dict[tuple[str, int], list[SlackChannel | PagerDutyChannel]] = {}

    async def run(self) -> None:
        """Settle what a stopped sender left in flight, then enqueue and deliver until
        cancelled (leadership lost, shutdown). Nothing that befalls one part stops another: a
        lost LISTEN connection is opened again (and the changes it missed read), PostgreSQL
        refusing a pass is retried, and one delivery's failure is its own; raises only when
        the settling at the start cannot be done."""
        self._stopping = False
        async with open_session() as http:
            settled = await self._store.settle_interrupted(slack_error=INTERRUPTED)
            if settled:
                log.warning(
                    "notifications_interrupted_settled",
                    resent=sum(d.state == "pending" for d in settled),
                    unconfirmed=sum(d.state == "unconfirmed" for d in settled),
                )
            log.info("notifications_started", cursor=await self._store.cursor())
            wake = asyncio.Event()
            async with asyncio.TaskGroup() as group:
                group.create_task(self._listen(wake))
                group.create_task(self._enqueue_loop(wake))
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
        planned = plan(
            with_failed_step(run, change.graph),
            channels,
            ui_url=self._config.ui_url,
            notified=change.notified,
        )
        for item in planned:
            ENQUEUED.labels(item.type).inc()
        return planned

    async def _enqueue_loop(self, wake: asyncio.Event) -> None:
        next_prune = 0.0
        failures = 0
        loop = asyncio.get_running_loop()
        while True:
            wake.clear()
            try:
                await self.enqueue_pending()
                if loop.time() >= next_prune:
                    pruned = await self._store.prune(older_than_days=self._config.retention_days)
                    if pruned:
                        log.info("notification_deliveries_pruned", deliveries=pruned)
                    next_prune = loop.time() + PRUNE_EVERY
                failures = 0
            except Exception as exc:  # a pass that failed never stops the deliveries in flight
                failures += 1
                log.warning("notifications_enqueue_failed", error=_fault(exc), failures=failures)
                await asyncio.sleep(_pause(failures))
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self._config.poll_interval)

    # --- delivering ---------------------------------------------------------------------

    async def deliver_due(self, http: aiohttp.ClientSession) -> int:
        """Send every delivery due now, ``concurrency`` at a time; how many were tried.

        Each delivery is on its own: one that fails (an error of ours, PostgreSQL refusing to
        record its attempt) never cancels the others in flight. A batch with such a failure
        ends the pass, so that a failure that repeats is not tried again at once."""
        tried = 0
        limit = asyncio.Semaphore(self._config.concurrency)

        async def one(delivery: Delivery) -> bool:
            async with limit:
                return await self._deliver_alone(http, delivery)

        while due := await self._store.due(limit=self._config.batch):
            tasks = [asyncio.create_task(one(delivery)) for delivery in due]
            try:
                await asyncio.wait(tasks)
            except asyncio.CancelledError:
                await self._drain(tasks)
                raise
            tried += len(due)
            if not all(task.result() for task in tasks):
                break
        return tried

    async def _drain(self, tasks: list[asyncio.Task[bool]]) -> None:
        """The sender is stopping (shutdown, leadership lost): deliveries not yet begun stay
        pending for the next sender, and requests already on their way are given ``DRAIN``
        seconds to end and have their outcomes recorded, so that a stop is not what leaves a
        Slack message ``unconfirmed``."""
        self._stopping = True
        in_flight = [task for task in tasks if not task.done()]
        log.info("notifications_draining", deliveries=len(in_flight))
        try:
            if in_flight:
                await asyncio.wait(in_flight, timeout=DRAIN)
        finally:
            for task in in_flight:
                task.cancel()

    async def _deliver_loop(self, http: aiohttp.ClientSession) -> None:
        failures = 0
        while True:
            self._deliverable.clear()
            faults = self._faults
            try:
                await self.deliver_due(http)
                due_in = await self._store.next_due_in()
                failures = 0 if self._faults == faults else failures + 1
            except Exception as exc:  # a pass that failed: tried again, never a crash loop
                failures += 1
                log.warning("notifications_deliver_failed", error=_fault(exc), failures=failures)
                due_in = None
            if failures:
                due_in = max(due_in or 0.0, _pause(failures))
            timeout = self._config.poll_interval if due_in is None else due_in
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._deliverable.wait(), min(timeout, self._config.poll_interval)
                )

    async def _deliver_alone(self, http: aiohttp.ClientSession, delivery: Delivery) -> bool:
        """Deliver, keeping whatever goes wrong to this delivery (logged, never a value);
        False when something did."""
        try:
            await self._deliver(http, delivery)
        except Exception as exc:  # the boundary of one delivery: nothing crosses to the others
            self._faults += 1
            log.error(
                "notification_delivery_crashed",
                channel=delivery.channel,
                type=delivery.type,
                tenant=delivery.tenant,
                workflow=delivery.name,
                error=_fault(exc),
            )
            return False
        return True

    async def _deliver(self, http: aiohttp.ClientSession, delivery: Delivery) -> None:
        try:
            target = await self._target(delivery)
        except Exception as exc:  # an error of ours before any request: tried again later
            target = after_fault(
                f"the delivery could not be prepared ({type(exc).__name__})",
                attempts=delivery.attempts,
                age=delivery.age,
                jitter=self._jitter(),
            )
        if isinstance(target, Outcome):
            await self._record(delivery, expected="pending", outcome=target, attempts=None)
            return
        url, body = target
        if self._stopping:
            return  # not begun: pending for the next sender
        attempts = await self._store.begin_attempt(delivery.id)
        if attempts is None:
            return  # no longer pending: settled elsewhere
        status_code = None
        try:
            answer = await post_json(http, url, body)
        except NoAnswer as exc:
            outcome = after_no_answer(
                _channel_type(delivery),
                reached=exc.reached,
                error=exc.error,
                attempts=attempts,
                age=delivery.age,
                jitter=self._jitter(),
            )
        except Exception as exc:  # may have been sent: what a lost answer is
            outcome = after_no_answer(
                _channel_type(delivery),
                reached=True,
                error=f"the request failed ({type(exc).__name__})",
                attempts=attempts,
                age=delivery.age,
                jitter=self._jitter(),
            )
        else:
            status_code = answer.status
            outcome = after_answer(
                _channel_type(delivery),
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
        failures = 0
        while True:  # the outcome is known: it is recorded once PostgreSQL takes it
            try:
                recorded = await self._store.finish_attempt(
                    delivery,
                    expected=expected,
                    state=outcome.state,
                    status_code=status_code,
                    error=outcome.error,
                    retry_in=outcome.retry_in,
                    attempts=delivery.attempts if attempts is None else attempts,
                )
                break
            except DependencyDown as exc:
                failures += 1
                log.warning(
                    "notification_outcome_not_recorded",
                    channel=delivery.channel,
                    workflow=delivery.name,
                    state=outcome.state,
                    error=exc.message,
                    failures=failures,
                )
                await asyncio.sleep(_pause(failures))
        if not recorded:
            return
        OUTCOMES.labels(delivery.type, outcome.state).inc()
        fields = {
            "channel": delivery.channel,
            "kind": delivery.kind,
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

    async def _listen(self, wake: asyncio.Event) -> None:
        """LISTEN on ``runs`` for as long as the sender runs: ``wake`` is set on every commit
        of run changes, and each time the LISTEN is in place again after a loss (the changes
        committed meanwhile are read then; the cursor makes reading them idempotent)."""
        await listen_forever(
            self._dsn,
            name="notifications",
            application_name="wm-compiler-notify",
            channels={RUNS_CHANNEL: lambda *_: wake.set()},
            on_listening=wake.set,
        )


def _channel_type(delivery: Delivery) -> ChannelType:
    return "slack" if delivery.type == "slack" else "pagerduty"


def _fault(exc: Exception) -> str:
    """What went wrong, for a log line: our own message, else only the exception's type (an
    aiohttp or asyncpg text may hold a URL or a value)."""
    return exc.message if isinstance(exc, WorkflowManagerError) else type(exc).__name__


def _pause(failures: int) -> float:
    """Seconds before a pass PostgreSQL refused is tried again: 0.1, 0.2 … at most 5."""
    return float(min(RETRY_CAP, RETRY_FIRST * 2 ** min(failures - 1, 16)))
