"""Leader election on coordination.k8s.io/v1 Leases: one lease, or one lease per shard.

One lease (``LeaderElector``)
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

Many leases (``ShardedElection``)
    One elector per shard key (lease ``<prefix>-<key>``), plus a membership lease per replica
    (``<prefix>-member-<identity>``) that the replica keeps renewed. Every ``retry_period`` a
    replica lists the membership leases; live members are those renewed within a lease duration
    (judged as above), itself included. Its fair share is ceil(shards / live members): it does
    not acquire a shard while holding its share, and it releases the extras (the last in name
    order) when it holds more, so a new replica receives shards within a few periods and a
    replica alone (the others' membership expired) takes them all. Membership leases unchanged
    for ``member_gc_after`` are deleted; a replica deletes its own on shutdown.

Time comes from a ``Clock``: the running loop's monotonic time for deadlines (so tests run under
looptime), UTC wall time for the MicroTime fields, and ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

from kubernetes_asyncio.client import ApiClient, CoordinationV1Api, V1DeleteOptions, V1Preconditions
from prometheus_client import Gauge

from shared.config import Settings
from shared.errors import ConfigError, Conflict, Invalid, NotFound, WorkflowManagerError
from shared.k8s import translating
from shared.leader_state import (
    Action,
    LeaseRecord,
    LeaseSpec,
    Observation,
    acquisition_spec,
    check_timings,
    decide,
    default_safety_margin,
    extras_to_release,
    fair_share,
    format_microtime,
    holder_deadline,
    is_abandoned,
    is_live,
    lease_name,
    observe,
    release_spec,
)
from shared.logging import get_logger

T = TypeVar("T")
Callback = Callable[[], Awaitable[None]]
ShardCallback = Callable[[str], Awaitable[None]]

LEADER = Gauge("wm_leader", "1 while this process holds the lease, else 0", ["lease"])
MANAGED_BY = {"app.kubernetes.io/managed-by": "workflow-manager"}
SET_LABEL = "workflow-manager.io/lease-set"
ROLE_LABEL = "workflow-manager.io/lease-role"
_LABEL_VALUE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# Call failures that mean "try again later"; Conflict and NotFound are decided on separately.
_RETRYABLE = (WorkflowManagerError, TimeoutError, OSError)

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


class KubernetesLeaseApi:
    """``LeaseApi`` over kubernetes-asyncio's CoordinationV1Api; bodies are sent as dicts so that
    MicroTime fields carry exactly RFC 3339 with microseconds and 'Z'."""

    def __init__(self, api_client: ApiClient, *, request_timeout: float = 10.0) -> None:
        self._api = CoordinationV1Api(api_client)
        self._timeout = request_timeout

    async def read(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            with translating():
                lease = await self._api.read_namespaced_lease(name, namespace, **self._kw)
        except NotFound:
            return None
        return _record(lease)

    async def create(
        self, namespace: str, name: str, spec: LeaseSpec, *, labels: Mapping[str, str]
    ) -> LeaseRecord:
        # A dict, not a V1Lease: the model would render MicroTime without the 'Z' form.
        body: Any = _body(namespace, name, spec, labels=labels, resource_version=None)
        with translating():
            return _record(await self._api.create_namespaced_lease(namespace, body, **self._kw))

    async def replace(
        self,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        *,
        resource_version: str,
        labels: Mapping[str, str],
    ) -> LeaseRecord:
        body: Any = _body(namespace, name, spec, labels=labels, resource_version=resource_version)
        with translating():
            lease = await self._api.replace_namespaced_lease(name, namespace, body, **self._kw)
        return _record(lease)

    async def list(self, namespace: str, *, label_selector: str) -> list[tuple[str, LeaseRecord]]:
        with translating():
            leases = await self._api.list_namespaced_lease(
                namespace, label_selector=label_selector, **self._kw
            )
        return [(lease.metadata.name, _record(lease)) for lease in leases.items or []]

    async def delete(self, namespace: str, name: str, *, resource_version: str) -> None:
        options = V1DeleteOptions(preconditions=V1Preconditions(resource_version=resource_version))
        with translating():
            await self._api.delete_namespaced_lease(name, namespace, body=options, **self._kw)

    @property
    def _kw(self) -> dict[str, Any]:
        return {"_request_timeout": self._timeout}


def _body(
    namespace: str,
    name: str,
    spec: LeaseSpec,
    *,
    labels: Mapping[str, str],
    resource_version: str | None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": spec.holder,
            "leaseDurationSeconds": spec.lease_duration_seconds,
            "acquireTime": format_microtime(spec.acquire_time) if spec.acquire_time else None,
            "renewTime": format_microtime(spec.renew_time) if spec.renew_time else None,
            "leaseTransitions": spec.transitions,
        },
    }


def _record(lease: Any) -> LeaseRecord:
    spec = lease.spec
    return LeaseRecord(
        spec=LeaseSpec(
            holder=(spec.holder_identity or None) if spec else None,
            lease_duration_seconds=(spec.lease_duration_seconds or 0) if spec else 0,
            acquire_time=spec.acquire_time if spec else None,
            renew_time=spec.renew_time if spec else None,
            transitions=(spec.lease_transitions or 0) if spec else 0,
        ),
        resource_version=str(lease.metadata.resource_version),
    )


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
        except _RETRYABLE as exc:
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
        except _RETRYABLE as exc:
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
        except _RETRYABLE as exc:
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
        except _RETRYABLE as exc:
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


class ShardedElection:
    """Campaigns for one lease per shard key, spreading them fairly over the live replicas.

    ``async with ShardedElection(...) as election:`` starts it (and releases everything on
    exit); ``add``/``remove``/``update`` change the keys at runtime; ``held`` tells which this
    replica leads. ``work(key)``, when given, runs while the key is held and is cancelled on loss.
    """

    def __init__(
        self,
        api: LeaseApi | ApiClient,
        *,
        namespace: str,
        prefix: str,
        identity: str,
        shards: Iterable[str] = (),
        lease_duration: float = 15.0,
        renew_period: float = 5.0,
        retry_period: float | None = None,
        safety_margin: float | None = None,
        clock: Clock | None = None,
        on_started_leading: ShardCallback | None = None,
        on_stopped_leading: ShardCallback | None = None,
        work: ShardCallback | None = None,
        member_gc_after: float | None = None,
    ) -> None:
        if not _LABEL_VALUE.match(prefix):
            raise ConfigError(f"lease prefix {prefix!r}: expected lowercase letters, digits, '-'")
        self._api: LeaseApi = KubernetesLeaseApi(api) if isinstance(api, ApiClient) else api
        self.namespace, self.prefix, self.identity = namespace, prefix, identity
        self._timing: dict[str, Any] = {
            "lease_duration": lease_duration,
            "renew_period": renew_period,
            "retry_period": retry_period,
            "safety_margin": safety_margin,
            "clock": clock,
        }
        self._lease_duration = lease_duration
        self._retry_period = retry_period or renew_period
        self._request_timeout = renew_period
        self._gc_after = member_gc_after or 10 * lease_duration
        self._clock: Clock = clock or LoopClock()
        self._on_started, self._on_stopped, self._work = (
            on_started_leading,
            on_stopped_leading,
            work,
        )
        self._log = log.bind(lease_set=prefix, namespace=namespace, identity=identity)
        self._member_name = lease_name(prefix, "member", identity)
        self._membership = LeaderElector(
            self._api,
            namespace=namespace,
            name=self._member_name,
            identity=identity,
            labels=self._labels("member"),
            **self._timing,
        )
        self._electors: dict[str, LeaderElector] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._observations: dict[str, Observation] = {}
        self._members: frozenset[str] = frozenset({identity})
        self._member_since: float | None = None
        self._members_known = False
        self._background: list[asyncio.Task[None]] = []
        self._running = False
        for shard in shards:
            self.add(shard)

    @property
    def held(self) -> frozenset[str]:
        """The shard keys this replica leads now."""
        return frozenset(key for key, elector in self._electors.items() if elector.is_leader)

    @property
    def shards(self) -> frozenset[str]:
        return frozenset(self._electors)

    @property
    def members(self) -> frozenset[str]:
        """Identities of the replicas seen alive at the last scan, this one included."""
        return self._members

    @property
    def fair_share(self) -> int:
        return fair_share(len(self._electors), len(self._members))

    def lease_name(self, shard: str) -> str:
        return lease_name(self.prefix, shard)

    def add(self, shard: str) -> None:
        """Campaign for ``shard`` too (no-op when already campaigning)."""
        if shard in self._electors:
            return
        if shard.startswith("member-"):
            raise Invalid(f"shard key {shard!r} collides with the membership leases")
        elector = LeaderElector(
            self._api,
            namespace=self.namespace,
            name=self.lease_name(shard),
            identity=self.identity,
            labels=self._labels("shard"),
            may_acquire=self._may_acquire,
            on_started_leading=self._bind(self._on_started, shard),
            on_stopped_leading=self._bind(self._on_stopped, shard),
            **self._timing,
        )
        self._electors[shard] = elector
        if self._running:
            self._start(shard, elector)

    async def remove(self, shard: str) -> None:
        """Stop campaigning for ``shard``, stepping down and releasing it if held."""
        self._electors.pop(shard, None)
        task = self._tasks.pop(shard, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def update(self, shards: Iterable[str]) -> None:
        """Campaign for exactly ``shards``."""
        wanted = set(shards)
        for shard in sorted(set(self._electors) - wanted):
            await self.remove(shard)
        for shard in sorted(wanted):
            self.add(shard)

    async def __aenter__(self) -> Self:
        self._running = True
        self._background = [
            asyncio.create_task(self._membership.campaign(), name=f"leader:{self._member_name}"),
            asyncio.create_task(self._scan_loop(), name=f"leader-scan:{self.prefix}"),
        ]
        for shard, elector in self._electors.items():
            self._start(shard, elector)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._running = False
        shard_tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in shard_tasks:
            task.cancel()
        await asyncio.gather(*shard_tasks, return_exceptions=True)
        for task in self._background:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._background = []
        await self._delete_member_lease()

    # --- internals ------------------------------------------------------------------------

    def _labels(self, role: str) -> dict[str, str]:
        return {SET_LABEL: self.prefix, ROLE_LABEL: role}

    @staticmethod
    def _bind(callback: ShardCallback | None, shard: str) -> Callback | None:
        if callback is None:
            return None

        async def bound() -> None:
            await callback(shard)

        return bound

    def _start(self, shard: str, elector: LeaderElector) -> None:
        self._tasks[shard] = asyncio.create_task(
            self._run_shard(shard, elector), name=f"leader:{elector.name}"
        )

    async def _run_shard(self, shard: str, elector: LeaderElector) -> None:
        if self._work is None:
            await elector.campaign()
            return
        async with asyncio.TaskGroup() as group:
            group.create_task(elector.campaign())
            group.create_task(self._work_loop(shard, elector))

    async def _work_loop(self, shard: str, elector: LeaderElector) -> None:
        work = self._bind(self._work, shard)
        assert work is not None
        while True:
            try:
                await elector.run_while_leading(work)
            except Exception:  # guarded: a failing worker is restarted, never lost silently
                self._log.exception("shard_work_failed", shard=shard)
                await self._clock.sleep(self._retry_period)
                continue
            await elector.wait_not_leading()  # returned on its own: run again on the next gain

    def _may_acquire(self) -> bool:
        if not self._members_known or not self._membership.is_leader:
            return False
        load = sum(1 for e in self._electors.values() if e.is_leader or e.acquiring)
        return load < self.fair_share

    async def _scan_loop(self) -> None:
        while True:
            try:
                await self._scan()
            except _RETRYABLE as exc:
                self._log.warning("lease_set_scan_failed", error=str(exc))
            except Exception:  # guarded: a bug in one pass must not stop the next
                self._log.exception("lease_set_scan_error")
            await self._clock.sleep(self._retry_period)

    async def _scan(self) -> None:
        started = self._clock.monotonic()
        if self._membership.is_leader and self._member_since is None:
            self._member_since = started
        elif not self._membership.is_leader:
            self._member_since = None
        selector = f"{SET_LABEL}={self.prefix},{ROLE_LABEL}=member"
        call = self._api.list(self.namespace, label_selector=selector)
        leases = await within(self._clock, call, self._request_timeout)
        now = self._clock.monotonic()
        members, seen = {self.identity}, set()
        for name, record in leases:
            seen.add(name)
            observation = observe(self._observations.get(name), record, now)
            assert observation is not None
            self._observations[name] = observation
            if record.holder and is_live(
                record, observation, now=now, lease_duration=self._lease_duration
            ):
                members.add(record.holder)
            elif name != self._member_name and is_abandoned(
                record, observation, now=now, after=self._gc_after
            ):
                await self._delete(name, record)
        self._observations = {k: v for k, v in self._observations.items() if k in seen}
        if members != self._members:
            self._log.info("lease_set_members", members=sorted(members))
        self._members = frozenset(members)
        # Shards are taken only once every replica that started with us had time to appear.
        if self._member_since is not None and started - self._member_since >= self._retry_period:
            self._members_known = True
        await self._rebalance()

    async def _rebalance(self) -> None:
        share = self.fair_share
        for shard in extras_to_release(self.held, share):
            elector = self._electors.get(shard)
            if elector is not None:
                self._log.info("shard_rebalance_release", shard=shard, share=share)
                await elector.release()

    async def _delete(self, name: str, record: LeaseRecord) -> None:
        try:
            call = self._api.delete(self.namespace, name, resource_version=record.resource_version)
            await within(self._clock, call, self._request_timeout)
        except _RETRYABLE as exc:
            self._log.info("member_lease_gc_skipped", member_lease=name, error=str(exc))
        else:
            self._log.info("member_lease_collected", member_lease=name)

    async def _delete_member_lease(self) -> None:
        try:
            call = self._api.read(self.namespace, self._member_name)
            record = await within(self._clock, call, self._request_timeout)
            if record is not None and record.holder in (None, self.identity):
                await self._delete(self._member_name, record)
        except _RETRYABLE as exc:
            self._log.info("member_lease_delete_failed", error=str(exc))
