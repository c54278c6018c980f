"""Leader election over many leases: ``ShardedElection``, one lease per shard key, shared fairly.

One ``LeaderElector`` (``shared.leader``) per shard key (lease ``<prefix>-<key>``), plus a
membership lease per replica (``<prefix>-member-<identity>``) that the replica keeps renewed.
Every ``retry_period`` a replica lists the membership leases; live members are those renewed
within a lease duration (judged as ``shared.leader`` judges any lease), itself included. Its fair
share is ceil(shards / live members): it does not acquire a shard while holding its share, and it
releases the extras (the last in name order) when it holds more, so a new replica receives shards
within a few periods and a replica alone (the others' membership expired) takes them all.
Membership leases unchanged for ``member_gc_after`` are deleted; a replica deletes its own on
shutdown. The decisions (fair share, liveness, which extras to release) are the pure functions of
``shared.leader_state``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Self

from kubernetes_asyncio.client import ApiClient

from shared.errors import ConfigError, Invalid
from shared.k8s_leases import KubernetesLeaseApi
from shared.leader import RETRYABLE, Callback, Clock, LeaderElector, LeaseApi, LoopClock, within
from shared.leader_state import (
    LeaseRecord,
    Observation,
    extras_to_release,
    fair_share,
    is_abandoned,
    is_live,
    lease_name,
    observe,
)
from shared.logging import get_logger

ShardCallback = Callable[[str], Awaitable[None]]

SET_LABEL = "workflow-manager.io/lease-set"
ROLE_LABEL = "workflow-manager.io/lease-role"
_LABEL_VALUE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

log = get_logger(__name__)


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
            except RETRYABLE as exc:
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
        except RETRYABLE as exc:
            self._log.info("member_lease_gc_skipped", member_lease=name, error=str(exc))
        else:
            self._log.info("member_lease_collected", member_lease=name)

    async def _delete_member_lease(self) -> None:
        try:
            call = self._api.read(self.namespace, self._member_name)
            record = await within(self._clock, call, self._request_timeout)
            if record is not None and record.holder in (None, self.identity):
                await self._delete(self._member_name, record)
        except RETRYABLE as exc:
            self._log.info("member_lease_delete_failed", error=str(exc))
