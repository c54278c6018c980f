"""Run notifications in PostgreSQL: the sender's cursor over ``run_changes`` and the deliveries
(tables ``notification_cursor`` and ``notification_deliveries``, migrations 0009 and 0015).

The one module that holds their SQL: the compiler's sender writes through ``NotificationStore``
and the apiserver reads a run's deliveries through ``deliveries_of_run``.

Exactly once per run, channel and kind, in two halves (docs/operations.md, "Run
notifications"). A kind is ``notify`` (the message of the run's finish) or ``resolve`` (the
PagerDuty resolve of a failed run's incident once the run, retried in place, succeeded):

- ``enqueue_batch`` reads the changes after the cursor, in one transaction that holds the
  cursor row, inserts a delivery per run and matching channel (``ON CONFLICT (run_uid,
  channel, kind) DO NOTHING``) and moves the cursor past what it read. The watcher makes sequence
  numbers visible in commit order (its advisory lock), so nothing committed later can land
  behind the cursor: a finish is never skipped, and the unique key never enqueues it twice.
- The sender records each attempt (``begin_attempt``, committed) before its request and the
  outcome after it (``finish_attempt``); a row left ``sending`` by a sender that stopped is
  settled by ``settle_interrupted`` when the next one starts. A resolve is due only once the
  trigger it resolves has its outcome, so PagerDuty never sees it first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, Protocol

import asyncpg

from shared.db.audit import record_action
from shared.db.pool import translate_db_errors
from shared.labels import DATA_NAMESPACE_PREFIX

# The actor of the audit records the sender writes.
ACTOR: Final = "workflow-manager"
ACTION: Final = "notify"
FINAL_STATES: Final = ("sent", "failed", "unconfirmed")

# The migration writes the one row; should it ever be missing, reading starts again from the
# start of the change log (the unique key keeps what was enqueued already from coming twice).
_ENSURE_CURSOR = "INSERT INTO notification_cursor (id, seq) VALUES (true, 0) ON CONFLICT DO NOTHING"
_READ_CURSOR = "SELECT seq FROM notification_cursor FOR UPDATE"
_BOUNDS = "SELECT min(seq) AS oldest, coalesce(max(seq), 0) AS newest FROM run_changes"
# The next ``$3`` changes after the cursor that finished a run (a batch scans at most that many,
# in seq order, whatever they belong to), each with its run when that run is one of the
# tenant's own pipelines (tenancy from the namespace, never from the run's labels) on the host
# cluster where pipelines run, and its version — the one the run was started from; the current
# one when the run names none — has channels; else the run's columns are NULL. Of the run's
# graph (up to 1 MiB) only the failed nodes are read: the failed step is among them.
_FINISHED_CHANGES = f"""
SELECT c.seq, c.phase AS change_phase, m.*
FROM (
    SELECT seq, run_id, phase FROM run_changes
    WHERE seq > $1 AND seq <= $2 AND phase IN ('Succeeded', 'Failed', 'Error')
    ORDER BY seq LIMIT $3
) AS c
LEFT JOIN LATERAL (
    SELECT r.cluster_id, r.namespace, r.name, r.uid, r.tenant, r.started_at, r.finished_at,
           r.duration_seconds, r.message,
           jsonb_build_object('nodes', coalesce(jsonb_path_query_array(r.graph,
               '$.nodes[*] ? (@.phase == "Failed" || @.phase == "Error")'), '[]'::jsonb))
               AS graph,
           p.id AS pipeline_id, p.name AS pipeline_name, v.version, v.settings,
           array(SELECT d.channel FROM notification_deliveries AS d
                 WHERE d.run_uid = r.uid AND d.kind = 'notify') AS notified
    FROM runs AS r
    JOIN clusters AS k ON k.id = r.cluster_id AND k.is_host
    JOIN pipelines AS p ON p.id = r.pipeline_id AND p.tenant = r.tenant
    JOIN pipeline_versions AS v ON v.pipeline_id = p.id AND v.version = (
        CASE WHEN r.pipeline_version ~ '^[0-9]{{1,9}}$' THEN r.pipeline_version::integer
             ELSE p.current_version END)
    WHERE r.id = c.run_id
      AND r.namespace = '{DATA_NAMESPACE_PREFIX}' || r.tenant
      AND jsonb_typeof(v.settings -> 'notifications') = 'array'
      AND jsonb_array_length(v.settings -> 'notifications') > 0
) AS m ON true
ORDER BY c.seq
"""
_INSERT_DELIVERIES = """
INSERT INTO notification_deliveries (run_uid, channel, kind, type, cluster_id, namespace, name,
    tenant, pipeline_id, pipeline_version, phase, secret, secret_key, message, change_seq)
SELECT run_uid, channel, kind, type, cluster_id, namespace, name, tenant, pipeline_id,
       pipeline_version, phase, secret, secret_key, message::jsonb, change_seq
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
            $8::text[], $9::text[], $10::int[], $11::text[], $12::text[], $13::text[],
            $14::text[], $15::bigint[])
    AS d(run_uid, channel, kind, type, cluster_id, namespace, name, tenant, pipeline_id,
         pipeline_version, phase, secret, secret_key, message, change_seq)
ON CONFLICT (run_uid, channel, kind) DO NOTHING
"""
_DELIVERY = (
    "id, run_uid, channel, kind, type, cluster_id, namespace, name, tenant, secret, "
    "secret_key, message, attempts, state, extract(epoch FROM now() - created_at)::float8 AS age"
)
# A pending delivery may be tried, save a resolve whose trigger (the same run and channel's
# notify) has no outcome yet: PagerDuty must see the trigger first.
_TRIABLE = """
state = 'pending' AND NOT (kind = 'resolve' AND EXISTS (
    SELECT 1 FROM notification_deliveries AS t
    WHERE t.run_uid = notification_deliveries.run_uid
      AND t.channel = notification_deliveries.channel
      AND t.kind = 'notify' AND t.state IN ('pending', 'sending')))
"""


@dataclass(frozen=True, slots=True)
class FinishedChange:
    """A change that finished a run of a pipeline with channels, and the run as it is now."""

    seq: int
    phase: str  # as the change recorded it
    cluster_id: str
    namespace: str
    name: str
    uid: str
    tenant: str
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None
    message: str | None
    graph: dict[str, Any]  # {"nodes": [the failed nodes]}
    pipeline_id: str
    pipeline_name: str
    pipeline_version: int
    settings: dict[str, Any]
    # The channels already told of this run (a ``notify`` delivery), before this change.
    notified: frozenset[str] = frozenset()


class Planned(Protocol):
    """One delivery to enqueue (``compiler.notifications.planning.PlannedDelivery``)."""

    @property
    def channel(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def secret(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def message(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Batch:
    """What one ``enqueue_batch`` did."""

    cursor: int  # where the cursor is now
    finished: int  # changes read that finished a run of a pipeline with channels
    enqueued: int  # deliveries inserted (a finish seen before inserts none)
    more: bool  # the batch was full: more changes may be waiting
    pruned_from: int | None = None  # changes after the cursor were pruned before being read


@dataclass(frozen=True, slots=True)
class Delivery:
    """A delivery as the sender handles it."""

    id: int
    run_uid: str
    channel: str
    kind: str  # notify or resolve
    type: str
    cluster_id: str
    namespace: str
    name: str
    tenant: str
    secret: str
    secret_key: str
    message: dict[str, Any]
    attempts: int
    state: str
    age: float  # seconds since it was enqueued, by the database's clock


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """A delivery as the run's detail shows it (never the secret's name or value)."""

    channel: str
    kind: str
    type: str
    state: str
    attempts: int
    status_code: int | None
    last_error: str | None
    attempted_at: datetime | None
    sent_at: datetime | None
    created_at: datetime


def _delivery(row: asyncpg.Record) -> Delivery:
    return Delivery(**dict(row))


class NotificationStore:
    """The sender's queries, each in its own transaction."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def cursor(self) -> int:
        with translate_db_errors():
            value = await self._pool.fetchval("SELECT max(seq) FROM notification_cursor")
        return int(value or 0)

    async def lag(self) -> int:
        """Changes committed after the cursor."""
        with translate_db_errors():
            value = await self._pool.fetchval(
                "SELECT count(*) FROM run_changes "
                "WHERE seq > (SELECT coalesce(max(seq), 0) FROM notification_cursor)"
            )
        return int(value)

    async def enqueue_batch(
        self, plan: Callable[[FinishedChange], Sequence[Planned]], *, limit: int = 50
    ) -> Batch:
        """Read up to ``limit`` finishing changes after the cursor, insert what ``plan`` (pure)
        makes of each and move the cursor past them, in one transaction."""
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(_ENSURE_CURSOR)
                cursor = int(await conn.fetchval(_READ_CURSOR))
                bounds = await conn.fetchrow(_BOUNDS)
                newest = int(bounds["newest"])
                oldest = bounds["oldest"]
                rows = await conn.fetch(_FINISHED_CHANGES, cursor, newest, limit)
                changes = [_finished(row) for row in rows if row["uid"] is not None]
                planned = _plan_in_order(changes, plan)
                enqueued = 0
                if planned:
                    status = await conn.execute(_INSERT_DELIVERIES, *_columns(planned))
                    enqueued = int(status.split()[-1])
                more = len(rows) == limit
                moved_to = int(rows[-1]["seq"]) if more else newest
                if moved_to > cursor:
                    await conn.execute(
                        "UPDATE notification_cursor SET seq = $1, updated_at = now()", moved_to
                    )
        pruned_from = None
        if oldest is not None and int(oldest) > cursor + 1 and moved_to > cursor:
            pruned_from = cursor + 1
        return Batch(max(cursor, moved_to), len(changes), enqueued, more, pruned_from)

    async def due(self, *, limit: int) -> list[Delivery]:
        """Pending deliveries whose next attempt is due, oldest first."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_DELIVERY} FROM notification_deliveries "
                f"WHERE {_TRIABLE} AND next_attempt_at <= now() "
                "ORDER BY next_attempt_at, id LIMIT $1",
                limit,
            )
        return [_delivery(row) for row in rows]

    async def next_due_in(self) -> float | None:
        """Seconds until the next pending delivery is due (0 when one is); None if none."""
        with translate_db_errors():
            value = await self._pool.fetchval(
                "SELECT greatest(0, extract(epoch FROM min(next_attempt_at) - now()))::float8 "
                f"FROM notification_deliveries WHERE {_TRIABLE}"
            )
        return None if value is None else float(value)

    async def begin_attempt(self, delivery_id: int) -> int | None:
        """Record, committed, that a request is about to be sent: ``sending``, one more
        attempt. The attempt count now, or None when the delivery is no longer pending."""
        with translate_db_errors():
            value = await self._pool.fetchval(
                "UPDATE notification_deliveries SET state = 'sending', attempts = attempts + 1, "
                "attempted_at = now(), updated_at = now() "
                "WHERE id = $1 AND state = 'pending' RETURNING attempts",
                delivery_id,
            )
        return None if value is None else int(value)

    async def finish_attempt(
        self,
        delivery: Delivery,
        *,
        expected: str,
        state: str,
        status_code: int | None,
        error: str | None,
        retry_in: float,
        attempts: int,
    ) -> bool:
        """Record an outcome on a delivery still in state ``expected``, and audit it when it
        is final (in the same transaction). False when the delivery had moved on."""
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                updated = await conn.fetchval(
                    "UPDATE notification_deliveries SET state = $3, status_code = $4, "
                    "last_error = $5, next_attempt_at = now() + make_interval(secs => $6), "
                    "sent_at = CASE WHEN $3 = 'sent' THEN now() ELSE sent_at END, "
                    "updated_at = now() WHERE id = $1 AND state = $2 RETURNING id",
                    delivery.id,
                    expected,
                    state,
                    status_code,
                    error,
                    retry_in,
                )
                if updated is None:
                    return False
                if state in FINAL_STATES:
                    await _audit(
                        conn,
                        delivery,
                        state=state,
                        status_code=status_code,
                        error=error,
                        attempts=attempts,
                    )
        return True

    async def settle_interrupted(self, *, slack_error: str) -> list[Delivery]:
        """Deliveries a stopped sender left ``sending``: PagerDuty ones become pending again
        (due now: the dedup key makes the resend harmless); Slack ones become ``unconfirmed``
        with ``slack_error`` and are audited, never sent again. Returns the settled rows."""
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    "UPDATE notification_deliveries SET "
                    "state = CASE WHEN type = 'slack' THEN 'unconfirmed' ELSE 'pending' END, "
                    "last_error = CASE WHEN type = 'slack' THEN $1 ELSE last_error END, "
                    "next_attempt_at = now(), updated_at = now() "
                    f"WHERE state = 'sending' RETURNING {_DELIVERY}",
                    slack_error,
                )
                settled = [_delivery(row) for row in rows]
                for delivery in settled:
                    if delivery.state == "unconfirmed":
                        await _audit(
                            conn,
                            delivery,
                            state="unconfirmed",
                            status_code=None,
                            error=slack_error,
                            attempts=delivery.attempts,
                        )
        return settled

    async def prune(self, *, older_than_days: int) -> int:
        """Forget settled deliveries older than run retention (their runs are gone too)."""
        with translate_db_errors():
            status = await self._pool.execute(
                "DELETE FROM notification_deliveries WHERE state IN ('sent', 'failed', "
                "'unconfirmed') AND updated_at < now() - make_interval(days => $1)",
                older_than_days,
            )
        return int(status.split()[-1])


async def deliveries_of_run(
    pool: asyncpg.Pool, *, cluster_id: str, run_uid: str
) -> list[DeliveryView]:
    """The deliveries of one run, by channel name (the caller checked it may see the run)."""
    with translate_db_errors():
        rows = await pool.fetch(
            "SELECT channel, kind, type, state, attempts, status_code, last_error, attempted_at, "
            "sent_at, created_at FROM notification_deliveries "
            "WHERE cluster_id = $1 AND run_uid = $2 ORDER BY channel, kind",
            cluster_id,
            run_uid,
        )
    return [DeliveryView(**dict(row)) for row in rows]


def _finished(row: asyncpg.Record) -> FinishedChange:
    values = dict(row)
    values["phase"] = values.pop("change_phase")
    values["pipeline_version"] = values.pop("version")
    values["graph"] = values["graph"] if isinstance(values["graph"], dict) else {}
    values["notified"] = frozenset(values["notified"] or ())
    return FinishedChange(**values)


def _plan_in_order(
    changes: Sequence[FinishedChange], plan: Callable[[FinishedChange], Sequence[Planned]]
) -> list[tuple[FinishedChange, Planned]]:
    """What ``plan`` makes of each change, in seq order, each change knowing the channels told
    of its run before it: those recorded, and those planned for its run earlier in the batch
    (a run that failed, was retried and succeeded between two reads)."""
    notified: dict[str, set[str]] = {}
    planned: list[tuple[FinishedChange, Planned]] = []
    for change in changes:
        told = notified.setdefault(change.uid, set(change.notified))
        for item in plan(replace(change, notified=frozenset(told))):
            planned.append((change, item))
            if item.kind == "notify":
                told.add(item.channel)
    return planned


def _columns(planned: Sequence[tuple[FinishedChange, Planned]]) -> list[list[Any]]:
    """Column arrays of the deliveries, the first of each (run, channel, kind) only: a batch may
    hold two changes finishing one run (its last update and its deletion)."""
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for change, item in planned:
        if (change.uid, item.channel, item.kind) not in seen:
            seen.add((change.uid, item.channel, item.kind))
            unique.append((change, item))
    rows = [
        (
            change.uid,
            item.channel,
            item.kind,
            item.type,
            change.cluster_id,
            change.namespace,
            change.name,
            change.tenant,
            change.pipeline_id,
            change.pipeline_version,
            change.phase,
            item.secret,
            item.key,
            json.dumps(item.message),
            change.seq,
        )
        for change, item in unique
    ]
    return [list(column) for column in zip(*rows, strict=True)]


async def _audit(
    conn: asyncpg.Connection,
    delivery: Delivery,
    *,
    state: str,
    status_code: int | None,
    error: str | None,
    attempts: int,
) -> None:
    """The run's audit record of a delivery's final outcome: channel and result, never the
    secret's value (nor its name: the channel names it for the tenant)."""
    detail: dict[str, Any] = {"state": state, "attempts": attempts}
    if status_code is not None:
        detail["status_code"] = status_code
    if error:
        detail["error"] = error
    await record_action(
        conn,
        cluster_id=delivery.cluster_id,
        namespace=delivery.namespace,
        name=delivery.name,
        run_uid=delivery.run_uid,
        tenant=delivery.tenant,
        actor=ACTOR,
        action=ACTION,
        parameters={"channel": delivery.channel, "type": delivery.type, "kind": delivery.kind},
        outcome="succeeded" if state == "sent" else "failed",
        detail=detail,
    )
