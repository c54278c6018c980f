"""Leader election on one coordination.k8s.io/v1 Lease: ``LeaderElector``.

This module holds the elector, the ``LeaseApi`` protocol it talks through, its ``Clock``, and
``LeadershipLost``. The Kubernetes implementation of ``LeaseApi`` is ``shared.k8s_leases``;
election over one lease per shard (``ShardedElection``, built from electors) is
``shared.leader_shards``, which imports this module (never the other way round).

The algorithm
    A candidate reads the Lease and asks ``leader_state.decide`` what to do. A missing Lease is
    created (409: someone else was first). A Lease naming us is renewed; one with no holder (a
    release) is acquired at once; one held by another is acquired only after its
    ``resourceVersion`` has stayed the same for a whole lease duration *as measured on our own
    monotonic clock from when we first saw it* (never from the holder's wall-clock renewTime).
    Every write is a replace carrying the ``resourceVersion`` we read, so of two candidates
    racing for the same record one gets 409 and keeps waiting.

    The leader renews every ``renew_period``, again every ``retry_period`` after a failure. It
    believes it leads until ``lease_duration - safety_margin`` after it *sent* its last
    successful write; observers saw that write no earlier and wait a whole lease duration after
    seeing it, so the leader stops before anyone may take over, even with clocks that run at
    slightly different rates. A 409 or 404 on renewal means someone else wrote the Lease: the
    leader steps down at once. On shutdown it steps down first (work cancelled, callbacks run)
    and then releases: holderIdentity null, so the next candidate takes over without waiting.

    Many leases: see ``shared.leader_shards`` for how shards are spread over live replicas.

Time comes from a ``Clock``: the running loop's monotonic time for deadlines (so tests run under
looptime), UTC wall time for the MicroTime fields, and ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

from kubernetes_asyncio.client import ApiClient
from prometheus_client import Gauge

from shared.config import Settings
from shared.errors import ConfigError, Conflict, NotFound, WorkflowManagerError
from shared.k8s_leases import KubernetesLeaseApi
from shared.leader_state import (
    Action,
    LeaseRecord,
    LeaseSpec,
    Observation,
    acquisition_spec,
    check_timings,
    decide,
    default_safety_margin,
    holder_deadline,
    observe,
    release_spec,
)
from shared.logging import get_logger

__all__ = [
    "RETRYABLE",
    "Clock",
    "KubernetesLeaseApi",
    "LeaderElector",
    "LeadershipLost",
    "LeaseApi",
    "LoopClock",
    "default_identity",
    "within",
]

T = TypeVar("T")
Callback = Callable[[], Awaitable[None]]

LEADER = Gauge("wm_leader", "1 while this process holds the lease, else 0", ["lease"])
MANAGED_BY = {"app.kubernetes.io/managed-by": "workflow-manager"}
# Call failures that mean "try again later"; Conflict and NotFound are decided on separately.
RETRYABLE = (WorkflowManagerError, TimeoutError, OSError)

log = get_logger(__name__)


class LeadershipLost(WorkflowManagerError):
    """Raised out of ``LeaderElector.leading()`` when leadership ended while its body ran."""

    status = 503
    code = "leadership_lost"
    retryable = True


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def wall(self) -> datetime: ...
    async def sleep(self, seconds: float) -> None: ...


class LoopClock:
    """The running loop's monotonic time (fake under looptime), UTC wall time, asyncio.sleep."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


@runtime_checkable
class LeaseApi(Protocol):
    """The five Lease calls election needs. Raise Conflict on 409, NotFound on 404 (except
    ``read``, which answers None), and another WorkflowManagerError when the call failed."""

    async def read(self, namespace: str, name: str) -> LeaseRecord | None: ...
    async def create(
        self, namespace: str, name: str, spec: LeaseSpec, *, labels: Mapping[str, str]
    ) -> LeaseRecord: ...
    async def replace(
        self,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        *,
        resource_version: str,
        labels: Mapping[str, str],
    ) -> LeaseRecord: ...
    async def list(
        self, namespace: str, *, label_selector: str
    ) -> list[tuple[str, LeaseRecord]]: ...
    async def delete(self, namespace: str, name: str, *, resource_version: str) -> None: ...


def default_identity(pod_name: str | None) -> str:
    """POD_NAME when set, else hostname and pid: unique among live candidates."""
    return pod_name or f"{socket.gethostname()}-{os.getpid()}"


@dataclass(eq=False)
class _Scope:
    """A piece of work running under ``leading()``: cancelled when leadership ends."""

    task: asyncio.Task[Any]
    cancelled: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def cancel(self) -> None:
        self.cancelled = True
        self.task.cancel()


class LeaderElector:
    """Campaigns for one Lease; see the module docstring for the algorithm.

    Run it with ``async with elector:`` (campaigns in an owned task, releases on exit) or by
    awaiting ``campaign()`` in a task of your own; do work only while leading with
    ``run_while_leading(work)`` or ``async with elector.leading():``.
    """

    def __init__(
        self,
        api: LeaseApi | ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_period: float = 5.0,
        retry_period: float | None = None,
        safety_margin: float | None = None,
        clock: Clock | None = None,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        labels: Mapping[str, str] | None = None,
        may_acquire: Callable[[], bool] | None = None,
    ) -> None:
        margin = (
            default_safety_margin(lease_duration, renew_period)
            if safety_margin is None
            else safety_margin
        )
        problem = check_timings(
            lease_duration=lease_duration, renew_period=renew_period, safety_margin=margin
        )
        if problem:
            raise ConfigError(f"leader election for {name}: {problem}")
        self._api: LeaseApi = KubernetesLeaseApi(api) if isinstance(api, ApiClient) else api
        self.namespace, self.name, self.identity = namespace, name, identity
        self._lease_duration = lease_duration
        self._renew_period = renew_period
        self._margin = margin
        self._retry_period = retry_period or renew_period
        self._request_timeout = renew_period
        self._clock: Clock = clock or LoopClock()
        self._on_started, self._on_stopped = on_started_leading, on_stopped_leading
        self._labels = {**MANAGED_BY, **(labels or {})}
        self._may_acquire = may_acquire
        self._log = log.bind(lease=name, namespace=namespace, identity=identity)

        self._record: LeaseRecord | None = None  # as last read or written
        self._observation: Observation | None = None
        self._leading = False
        self._deadline = float("-inf")
        self._next_renew = float("-inf")
        self._acquiring = False
        self._leader_event = asyncio.Event()
        self._follower_event = asyncio.Event()
        self._follower_event.set()
        self._release_requested = asyncio.Event()
        self._scopes: set[_Scope] = set()
        self._started_task: asyncio.Task[None] | None = None
        self._campaign_task: asyncio.Task[None] | None = None
        self._campaigning = False

    @classmethod
    def from_settings(
        cls, api: LeaseApi | ApiClient, settings: Settings, *, name: str, **options: Any
    ) -> Self:
        """An elector for lease ``name`` in POD_NAMESPACE, timed by LEASE_DURATION and
        LEASE_RENEW_PERIOD, named by POD_NAME."""
        return cls(
            api,
            namespace=settings.POD_NAMESPACE,
            name=name,
            identity=default_identity(settings.POD_NAME),
            lease_duration=settings.LEASE_DURATION,
            renew_period=settings.LEASE_RENEW_PERIOD,
            **options,
        )

    @property
    def is_leader(self) -> bool:
        """True only while the local deadline has not passed, whatever the loop is doing."""
        return self._leading and self._clock.monotonic() < self._deadline

    @property
    def acquiring(self) -> bool:
        """True while an acquisition request is in flight (lets ``may_acquire`` count it)."""
        return self._acquiring

    async def __aenter__(self) -> Self:
        self._campaign_task = asyncio.create_task(self.campaign(), name=f"leader:{self.name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._campaign_task = self._campaign_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def campaign(self) -> None:
        """Campaign until cancelled; then step down and release the lease if we hold it."""
        self._campaigning = True
        try:
            while True:
                try:
                    if self._leading:
                        await self._hold()
                    else:
                        await self._contend()
                except Exception:  # the guarded loop: log a bug, never end the campaign with it
                    self._log.exception("leader_loop_error")
                    await self._step_down("error")
                    await self._clock.sleep(self._retry_period)
        finally:
            self._campaigning = False
            await self._step_down("shutdown")
            await self._release()

    async def wait_leading(self) -> None:
        """Return once this candidate leads."""
        while not self.is_leader:
            if self._leader_event.is_set():
                await self._follower_event.wait()  # deadline passed: the step-down is under way
            else:
                await self._leader_event.wait()

    async def wait_not_leading(self) -> None:
        await self._follower_event.wait()

    @contextlib.asynccontextmanager
    async def leading(self) -> AsyncIterator[None]:
        """Wait for leadership, then run the body; on loss the body is cancelled and
        ``LeadershipLost`` raised. The step-down waits for the body to finish."""
        await self.wait_leading()
        task = asyncio.current_task()
        assert task is not None, "leading() needs a task"
        scope = _Scope(task)
        self._scopes.add(scope)
        try:
            yield
        except asyncio.CancelledError:
            if scope.cancelled and task.uncancel() == 0:
                raise LeadershipLost(f"lost the lease {self.name}") from None
            raise
        finally:
            self._scopes.discard(scope)
            scope.done.set()
        if scope.cancelled:  # the body swallowed the cancellation: still report the loss
            task.uncancel()
            raise LeadershipLost(f"lost the lease {self.name}")

    async def run_while_leading(self, work: Callback) -> None:
        """Run ``work`` whenever this candidate leads, cancelled on each loss and started again
        on the next gain; return when ``work`` returns. Needs the campaign running."""
        while True:
            with contextlib.suppress(LeadershipLost):
                async with self.leading():
                    await work()
                return

    async def run(self, work: Callback) -> None:
        """Campaign, run ``work`` while leading (see ``run_while_leading``), release at the end."""
        async with self:
            await self.run_while_leading(work)

    async def release(self) -> None:
        """Step down now and give the lease up so another candidate takes it at once. The
        campaign goes on (after a pause that lets the others in), subject to ``may_acquire``."""
        if not self._leading or not self._campaigning:
            return
        self._release_requested.set()
        await self._follower_event.wait()

    # --- the campaign ---------------------------------------------------------------------

    async def _contend(self) -> None:
        try:
            record = await within(
                self._clock, self._api.read(self.namespace, self.name), self._request_timeout
            )
        except RETRYABLE as exc:
            self._log.warning("lease_read_failed", error=str(exc))
            await self._clock.sleep(self._retry_period)
            return
        now = self._clock.monotonic()
        self._record = record
        self._observation = observe(self._observation, record, now)
        decision = decide(
            record,
            self._observation,
            identity=self.identity,
            now=now,
            lease_duration=self._lease_duration,
        )
        if decision.action is Action.WAIT:
            await self._clock.sleep(min(decision.wait, self._retry_period))
            return
        if self._may_acquire is not None and not self._may_acquire():
            if decision.action is Action.RENEW:  # still ours from before: let the others have it
                await self._release()
            await self._clock.sleep(self._retry_period)
            return
        sent = self._clock.monotonic()
        self._acquiring = True
        try:
            written = await within(self._clock, self._write(record), self._request_timeout)
        except (Conflict, NotFound):
            self._log.debug("lease_contended", action=decision.action.value)
            return  # someone else wrote it first: read again
        except RETRYABLE as exc:
            self._log.warning("lease_acquire_failed", error=str(exc))
            await self._clock.sleep(self._retry_period)
            return
        finally:
            self._acquiring = False
        self._record = written
        deadline = holder_deadline(
            sent, lease_duration=self._lease_duration, safety_margin=self._margin
        )
        if self._clock.monotonic() < deadline:
            self._gain(sent, deadline, decision.reason, written)

    def _gain(self, sent: float, deadline: float, reason: str, record: LeaseRecord) -> None:
        self._leading, self._deadline = True, deadline
        self._next_renew = sent + self._renew_period
        self._release_requested.clear()
        self._follower_event.clear()
        self._leader_event.set()
        LEADER.labels(lease=self.name).set(1)
        self._log.info("leader_acquired", reason=reason, transitions=record.spec.transitions)
        if self._on_started is not None:
            self._started_task = asyncio.create_task(
                self._notify(self._on_started, "on_started_leading")
            )

    async def _hold(self) -> None:
        while self._leading:
            now = self._clock.monotonic()
            if now >= self._deadline:
                await self._step_down("renew_deadline_exceeded")
                return
            if self._release_requested.is_set():
                await self._step_down("released")
                await self._release()
                await self._clock.sleep(2 * self._retry_period)
                return
            if now < self._next_renew:
                await self._pause(min(self._next_renew, self._deadline) - now)
                continue
            await self._renew(now)

    async def _renew(self, sent: float) -> None:
        try:
            written = await within(self._clock, self._write(self._record), self._deadline - sent)
        except (Conflict, NotFound) as exc:
            await self._step_down("conflict" if isinstance(exc, Conflict) else "deleted")
            return
        except RETRYABLE as exc:
            left = self._deadline - self._clock.monotonic()
            self._log.warning("leader_renew_failed", error=str(exc), seconds_left=round(left, 3))
            self._next_renew = self._clock.monotonic() + self._retry_period
            return
        self._record = written
        self._deadline = holder_deadline(
            sent, lease_duration=self._lease_duration, safety_margin=self._margin
        )
        self._next_renew = sent + self._renew_period

    async def _step_down(self, reason: str) -> None:
        """Stop leading: cancel the work of ``leading()`` and wait for it, then notify."""
        if not self._leading:
            return
        self._leading, self._deadline = False, float("-inf")
        self._leader_event.clear()
        self._follower_event.set()
        LEADER.labels(lease=self.name).set(0)
        self._log.info("leader_lost", reason=reason)
        pending: list[Awaitable[Any]] = []
        started, self._started_task = self._started_task, None
        if started is not None:
            started.cancel()
            pending.append(started)
        for scope in list(self._scopes):
            scope.cancel()
            pending.append(scope.done.wait())
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self._on_stopped is not None:
            await self._notify(self._on_stopped, "on_stopped_leading")

    async def _release(self) -> None:
        """Write holderIdentity null (we must not be leading any more), so others need not wait."""
        record = self._record
        if record is None or record.holder != self.identity:
            return
        call = self._write(record, release_spec(record, wall_now=self._clock.wall()))
        try:
            self._record = await within(self._clock, call, self._request_timeout)
        except (Conflict, NotFound):
            self._log.info("leader_release_skipped", reason="lease_changed")
        except RETRYABLE as exc:
            self._log.warning("leader_release_failed", error=str(exc))
        else:
            self._log.info("leader_released")

    def _write(
        self, record: LeaseRecord | None, spec: LeaseSpec | None = None
    ) -> Awaitable[LeaseRecord]:
        """Create the lease, or replace ``record`` at its resourceVersion; by default with
        ourselves as the holder."""
        if spec is None:
            spec = acquisition_spec(
                record,
                identity=self.identity,
                wall_now=self._clock.wall(),
                lease_duration=self._lease_duration,
            )
        if record is None:
            return self._api.create(self.namespace, self.name, spec, labels=self._labels)
        return self._api.replace(
            self.namespace,
            self.name,
            spec,
            resource_version=record.resource_version,
            labels=self._labels,
        )

    async def _notify(self, callback: Callback, what: str) -> None:
        try:
            await callback()
        except asyncio.CancelledError:
            raise
        except Exception:  # a failing callback must not end the campaign
            self._log.exception("leader_callback_failed", callback=what)

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds`` on our clock, waking early when a release is requested."""
        waiter = asyncio.ensure_future(self._release_requested.wait())
        with contextlib.suppress(TimeoutError):
            await within(self._clock, waiter, seconds)


async def within(clock: Clock, call: Awaitable[T], limit: float) -> T:
    """Await ``call`` for at most ``limit`` seconds of ``clock``, else cancel it: TimeoutError."""
    task = asyncio.ensure_future(call)
    timer = asyncio.ensure_future(clock.sleep(limit))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        if not task.done():
            task.cancel()
            task.add_done_callback(_retrieve)
    if task.cancelled() or not task.done():
        raise TimeoutError(f"no answer within {limit:.3f}s")
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a cancelled call's outcome as seen, so asyncio does not report it as lost."""
    if not task.cancelled():
        task.exception()
