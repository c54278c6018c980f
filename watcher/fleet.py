"""The clusters this replica informs on, and the informers it runs for the leases it holds.

``apply(targets)`` follows the registry: new clusters join the sharded election, removed ones
leave it (stopping their informer and releasing their lease), a cluster whose connection
changed is restarted. ``inform(cluster_id)`` is the election's work: it runs exactly while this
replica holds the cluster's lease and is cancelled the moment the lease is lost.
``not_watching()`` names the clusters this replica holds but has failed to watch for
``InformerOptions.unready_after`` seconds: the watcher's readiness check.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from kubernetes_asyncio.client import ApiClient

from shared.argo import ArgoServer
from shared.clusters import WatchTarget
from shared.db.clusters import ClusterStore
from shared.errors import Invalid, WorkflowManagerError
from shared.k8s_informer import ChangeQueue, InformerOptions, Seen, WorkflowInformer
from shared.logging import get_logger
from shared.runs import ClusterRef
from watcher import metrics

log = get_logger(__name__)
ClientFactory = Callable[[str], Awaitable[ApiClient]]
LIST_CONCURRENCY = 4  # clusters listing at once (memory bound; see InformerOptions)


class Election(Protocol):
    """What the fleet needs of ``shared.leader_shards.ShardedElection``."""

    async def update(self, shards: Sequence[str]) -> None: ...
    async def remove(self, shard: str) -> None: ...
    @property
    def held(self) -> frozenset[str]: ...


Failing = tuple[float, str]  # (monotonic time of the first failure, the last error)


def unwatched(
    held: Iterable[str], failing: Mapping[str, Failing], *, now: float, after: float
) -> dict[str, str]:
    """The held clusters that have failed to be watched for ``after`` seconds or more, each with
    why (purely computational). A cluster held by another replica is not this one's concern."""
    late: dict[str, str] = {}
    for cluster_id in sorted(held):
        failure = failing.get(cluster_id)
        if failure is not None and now - failure[0] >= after:
            late[cluster_id] = f"not watching for {now - failure[0]:.0f}s ({failure[1]})"
    return late


class Fleet:
    def __init__(
        self,
        *,
        host_api: ApiClient,
        clusters: ClusterStore,
        queue: ChangeQueue,
        client_factory: ClientFactory,
        options: InformerOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host_api = host_api
        self._clusters = clusters
        self._queue = queue
        self._client_factory = client_factory
        options = options or InformerOptions()
        if options.list_permits is None:
            options = replace(options, list_permits=asyncio.Semaphore(LIST_CONCURRENCY))
        self._options = options
        self._clock = clock
        self.targets: dict[str, WatchTarget] = {}
        self.informers: dict[str, WorkflowInformer] = {}
        self.election: Election | None = None
        # Held clusters whose informer could not start or ended with an error, since when.
        self._stalled: dict[str, Failing] = {}

    def not_watching(self) -> dict[str, str]:
        """Clusters this replica holds but has failed to watch for a while, with why."""
        if self.election is None:
            return {}
        failing = dict(self._stalled)
        for cluster_id, informer in self.informers.items():
            since = informer.state.failing_since
            if since is not None:
                failing[cluster_id] = (since, informer.state.last_error or "failing")
        return unwatched(
            self.election.held, failing, now=self._clock(), after=self._options.unready_after
        )

    def ref(self, cluster_id: str) -> ClusterRef | None:
        """The cluster a queued change belongs to, while we still inform on it."""
        target = self.targets.get(cluster_id)
        return target.ref if target is not None and cluster_id in self.informers else None

    async def apply(self, targets: Sequence[WatchTarget]) -> None:
        """Watch exactly ``targets``."""
        if self.election is None:
            raise RuntimeError("Fleet.apply before the election is attached")
        wanted = {t.ref.id: t for t in targets}
        metrics.CLUSTERS_REGISTERED.set(len(wanted))
        for cluster_id, held in list(self.targets.items()):
            fresh = wanted.get(cluster_id)
            if fresh is None or fresh.connection_key != held.connection_key:
                log.info("cluster_leaving", cluster=cluster_id, removed=fresh is None)
                await self.election.remove(cluster_id)
                self.targets.pop(cluster_id, None)
        for cluster_id, target in wanted.items():
            if cluster_id not in self.targets:
                log.info("cluster_joining", cluster=cluster_id, host=target.is_host)
            self.targets[cluster_id] = target  # a new name or region applies to the next write
        await self.election.update(sorted(wanted))

    async def inform(self, cluster_id: str) -> None:
        """Inform on ``cluster_id`` until cancelled (the lease was lost or the cluster left)."""
        target = self.targets.get(cluster_id)
        if target is None:
            await asyncio.Event().wait()  # not ours to watch any more; wait to be cancelled
            return
        client = self._host_api if target.is_host else None
        informer: WorkflowInformer | None = None
        if client is None:
            assert target.kubeconfig is not None  # plan_targets only keeps reachable ones
            try:
                client = await self._client_factory(target.kubeconfig)
            except Invalid as exc:
                # Retrying cannot help: a corrected kubeconfig changes the connection key,
                # which restarts this work. Until then, one line, not a traceback per retry.
                log.warning(
                    "cluster_kubeconfig_unusable",
                    cluster=cluster_id,
                    error=exc.code,
                    reason=exc.message,
                )
                # Not watched: /readyz names it once it has been so for the informers' limit.
                self._stalled.setdefault(cluster_id, (self._clock(), exc.code))
                try:
                    await asyncio.Event().wait()
                finally:
                    self._stalled.pop(cluster_id, None)
                return
        try:
            known = {
                key: Seen(uid, rv)
                for key, (uid, rv) in (await self._clusters.known_runs(cluster_id)).items()
            }
            informer = WorkflowInformer(
                cluster=target.ref,
                api_client=client,
                queue=self._queue,
                known=known,
                options=self._options,
                clock=self._clock,
                metrics=metrics.INFORMER,
            )
            self._stalled.pop(cluster_id, None)
            self.informers[cluster_id] = informer
            metrics.CLUSTERS_WATCHED.set(len(self.informers))
            log.info("informer_started", cluster=cluster_id, known_runs=len(known))
            await informer.run()
        except asyncio.CancelledError:
            self._stalled.pop(cluster_id, None)  # the lease was lost or the cluster left
            raise
        except Exception as exc:  # the election restarts it; until then it is not watched
            since = informer.state.failing_since if informer is not None else None
            self._stalled.setdefault(cluster_id, (since or self._clock(), type(exc).__name__))
            raise
        finally:
            self.informers.pop(cluster_id, None)
            metrics.CLUSTERS_WATCHED.set(len(self.informers))
            dropped = self._queue.discard_where(lambda key: key[0] == cluster_id)
            log.info("informer_stopped", cluster=cluster_id, dropped_changes=dropped)
            if client is not None and client is not self._host_api:
                await client.close()

    async def report_status(self) -> None:
        """Record, for each cluster we inform on, its last event time and its Argo server."""
        for cluster_id, informer in list(self.informers.items()):
            reachable: bool | None
            version: str | None = None
            try:
                argo = ArgoServer(informer.api_client, timeout=5.0)
                answer = await argo.version()
                version = str(answer.get("version")) if isinstance(answer, dict) else None
                reachable = True
            except WorkflowManagerError:
                reachable = False
            await self._clusters.record_status(
                cluster_id,
                argo_reachable=reachable,
                argo_version=version,
                last_event_at=informer.state.last_event_at,
            )
