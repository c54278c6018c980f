"""The in-process fan-out of run changes to this replica's SSE subscribers.

One loop per replica holds the LISTEN connection (``ChangeSource.listening``), reads every
committed change after its position from ``run_changes`` in seq order, encodes it once, and
offers it to each subscriber whose scope and filters match, matching once per group of
subscribers with the same scope and filters (``fanout.Routing``). The last ``history``
changes stay in memory: a client reconnecting with a Last-Event-ID they cover is answered
without reading the change log, so a reconnect storm does not hold up everyone's live events.
Queues are bounded: a subscriber that falls ``queue_size`` events behind is disconnected (it
resumes with Last-Event-ID) rather than slowing anyone else. A lost connection is re-opened
and the loop catches up from its position, so nothing is skipped; a poll every
``poll_seconds`` also covers a notification lost without the connection dropping.

Which runs a stream sees follows its tenant's access grants as they change: the same LISTEN
connection hears ``access_grants`` (a trigger names the tenant on every change), and the loop
re-reads that tenant's grants once (shared with concurrent look-ups, ``scopes.ScopeCache``) and
moves its open streams to the new scope before it dispatches anything more. A stream that lost
a namespace stays open and stops receiving its runs. After the connection was lost, every
open stream's grants are re-read (notifications may have been missed meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from apiserver import metrics
from apiserver.runs.query import RunFilters, matches, run_item
from apiserver.scope import Scope
from apiserver.stream.fanout import Recent, Routing, narrow_tenant
from apiserver.stream.scopes import ScopeCache
from apiserver.stream.sse import frame
from shared.errors import WorkflowManagerError
from shared.logging import get_logger
from shared.tasks import Backoff, Supervisor

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Change:
    """One committed change with the run as it is now (None when the row is gone)."""

    seq: int
    kind: str
    cluster_id: str
    namespace: str
    name: str
    tenant: str | None
    phase: str
    run: Mapping[str, Any] | None

    @property
    def fields(self) -> Mapping[str, Any]:
        """What filters are matched against (the run's columns when the run still exists)."""
        if self.run is not None:
            return self.run
        return {
            "cluster_id": self.cluster_id,
            "namespace": self.namespace,
            "name": self.name,
            "tenant": self.tenant,
            "phase": self.phase,
        }

    def encode(self) -> bytes:
        return frame(
            event="run",
            event_id=self.seq,
            data={
                "seq": self.seq,
                "kind": self.kind,
                "cluster_id": self.cluster_id,
                "namespace": self.namespace,
                "name": self.name,
                "phase": self.run["phase"] if self.run is not None else self.phase,
                "run": run_item(self.run) if self.run is not None else None,
            },
        )


@dataclass(frozen=True, slots=True)
class Encoded:
    seq: int
    change: Change
    frame: bytes
    tenant: str | None  # the run's, as filters see it (a cheap first test when resuming)

    @classmethod
    def of(cls, change: Change) -> Encoded:
        """The change with its SSE frame, encoded once for every subscriber."""
        tenant = change.fields.get("tenant")
        return cls(change.seq, change, change.encode(), tenant if isinstance(tenant, str) else None)


class ChangeSource(Protocol):
    async def latest(self) -> int: ...

    async def oldest(self) -> int | None: ...

    async def changes_after(self, seq: int, *, limit: int) -> list[Change]: ...

    async def grants_of(self, tenant: str) -> frozenset[tuple[str, str]]: ...

    def listening(
        self, wake: asyncio.Event, *, grants_changed: Callable[[str], None]
    ) -> AbstractAsyncContextManager[asyncio.Event]:
        """Hold a LISTEN; set ``wake`` on every change notification and call
        ``grants_changed(tenant)`` on every grants one; yield an Event set when the
        connection is lost."""
        ...


@dataclass(eq=False)
class Subscriber:
    filters: RunFilters
    scope: Scope  # changed through StreamHub.rescope only (it is the subscriber's group)
    start: int  # the hub's position when it subscribed: live events are after it
    queue: asyncio.Queue[Encoded | None]
    overflowed: bool = False
    closed: bool = False
    # The changes it missed, from the hub's memory (subscribe(resume_after=...)); None when the
    # hub no longer holds all of them and they are read from the change log.
    missed: list[Encoded] | None = None

    def wants(self, change: Change) -> bool:
        return matches(self.filters, self.scope, change.fields)

    def offer(self, item: Encoded) -> None:
        if self.overflowed or self.closed:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.overflowed = True
            metrics.STREAM_OVERFLOWS.inc()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(None)


@dataclass(eq=False)
class StreamHub:
    source: ChangeSource
    queue_size: int = 1000
    poll_seconds: float = 5.0
    batch: int = 500
    history: int = 5000
    position: int = 0
    dispatched: int = 0
    scopes: ScopeCache = field(default_factory=ScopeCache)
    _routing: Routing[Subscriber] = field(default_factory=Routing)
    _recent: Recent[Encoded] = field(init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: Supervisor | None = None
    on_dispatch: Callable[[Change], None] | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)
    grants_applied: int = 0  # grants changes applied to open streams
    _stale_grants: set[str] = field(default_factory=set)  # tenants whose grants changed

    def __post_init__(self) -> None:
        self._recent = Recent(self.history, after=self.position)

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Follow the change log from its newest change (found once PostgreSQL answers)."""
        self._tasks = Supervisor(name="stream-hub")
        self._tasks.spawn("stream-listen", self._follow, backoff=Backoff(initial=0.5, maximum=10))

    async def stop(self) -> None:
        self.close_subscribers()
        if self._tasks is not None:
            await self._tasks.shutdown(grace=5.0)
            self._tasks = None

    def close_subscribers(self) -> None:
        for subscriber in self._routing.members():
            subscriber.close()

    # --- subscribers --------------------------------------------------------------------------
    def subscribe(
        self, filters: RunFilters, scope: Scope, *, resume_after: int | None = None
    ) -> Subscriber:
        """Register now (synchronously): every change after ``position`` will be offered.

        With ``resume_after`` below ``position``, ``missed`` holds the matching changes in
        between when the hub still has them all (else None: read them from the change log)."""
        subscriber = Subscriber(filters, scope, self.position, asyncio.Queue(self.queue_size))
        self._routing.add(subscriber, scope, filters)
        metrics.STREAM_SUBSCRIBERS.set(len(self._routing))
        if resume_after is not None and resume_after < subscriber.start:
            held = self._recent.since(resume_after, subscriber.start)
            if held is not None:
                confined = narrow_tenant(scope)
                if confined is not None:  # the cheap test first: hundreds of changes to skip
                    held = [item for item in held if item.tenant == confined]
                subscriber.missed = [item for item in held if subscriber.wants(item.change)]
        return subscriber

    async def scope_of(self, tenant: str | None) -> Scope:
        """The runs a caller of ``tenant`` (None: an administrator for everyone) may see, as
        its streams see them (grants included)."""
        return await self.scopes.scope_of(tenant, self._load_scope)

    async def _load_scope(self, tenant: str | None) -> Scope:
        if tenant is None:
            return Scope(None)
        return Scope(tenant, await self.source.grants_of(tenant))

    def rescope(self, subscriber: Subscriber, scope: Scope) -> None:
        """The subscriber's scope changed (its grants did): the next changes follow the new one."""
        if scope == subscriber.scope:
            return
        if self._routing.remove(subscriber, subscriber.scope, subscriber.filters):
            self._routing.add(subscriber, scope, subscriber.filters)
        subscriber.scope = scope

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._routing.remove(subscriber, subscriber.scope, subscriber.filters)
        metrics.STREAM_SUBSCRIBERS.set(len(self._routing))

    @property
    def subscriber_count(self) -> int:
        return len(self._routing)

    @property
    def group_count(self) -> int:
        """How many distinct (scope, filters) the subscribers have: matches per change."""
        return self._routing.group_count

    # --- following ----------------------------------------------------------------------------
    async def _follow(self) -> None:
        while True:
            try:
                listening = self.source.listening(self._wake, grants_changed=self._grants_changed)
                async with listening as lost:
                    # Grants may have changed unseen while nobody listened: re-read every open
                    # stream's, and answer no look-up read before now.
                    self.scopes.clear()
                    self._stale_grants |= {
                        subscriber.scope.tenant
                        for subscriber in self._routing.members()
                        if subscriber.scope.tenant is not None
                    }
                    if not self.started.is_set():
                        self.position = await self.source.latest()
                        self._recent.reset(self.position)
                        self.started.set()
                    await self.catch_up()  # whatever committed while we were not listening
                    while not lost.is_set():
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
                        self._wake.clear()
                        await self.catch_up()
                log.warning("stream_listen_lost", position=self.position)
            except WorkflowManagerError as exc:
                log.warning("stream_listen_failed", error=exc.code, reason=exc.message)
                await asyncio.sleep(1.0)

    def _grants_changed(self, tenant: str) -> None:
        """A grants notification (on the LISTEN connection, synchronously): nothing read
        before it is answered any more, and the loop applies the tenant's new grants."""
        self.scopes.invalidate(tenant)
        self._stale_grants.add(tenant)
        self._wake.set()

    async def apply_grants(self) -> None:
        """Move the open streams of every tenant whose grants changed to their new scope,
        reading each tenant's grants once (not per stream, not per event)."""
        while self._stale_grants:
            tenant = next(iter(self._stale_grants))
            affected = [s for s in self._routing.members() if s.scope.tenant == tenant]
            if affected:
                scope = await self.scopes.scope_of(tenant, self._load_scope)
                # Streams that subscribed during the read hold a scope read after the change.
                for subscriber in affected:
                    self.rescope(subscriber, scope)
                self.grants_applied += 1
                log.info("stream_grants_applied", tenant=tenant, streams=len(affected))
            self._stale_grants.discard(tenant)

    async def catch_up(self) -> None:
        """Dispatch every change after ``position``, in seq order, each under the grants
        known when it is read."""
        while True:
            await self.apply_grants()
            changes = await self.source.changes_after(self.position, limit=self.batch)
            for change in changes:
                self.dispatch(change)
            if len(changes) < self.batch:
                metrics.STREAM_CAUGHT_UP.set(time.time())
                return

    def dispatch(self, change: Change) -> None:
        """Offer one change to every matching subscriber (synchronous: no interleaving)."""
        if change.seq <= self.position:
            return
        self.position = change.seq
        self.dispatched += 1
        encoded = Encoded.of(change)
        self._recent.append(encoded)
        for subscriber in self._routing.recipients(change.fields):
            subscriber.offer(encoded)
        if self.on_dispatch is not None:
            self.on_dispatch(change)
