"""One ApiClient per watched cluster id, decided the way the watcher decides it.

The registry (kubeopera-api) lists the clusters and their kubeconfigs; the host cluster is the
one whose kube-system UID is ours, reached with the in-cluster identity (or HOST_KUBECONFIG),
under its registered id or, until registered, ``host-<uid>`` (``shared.clusters``). Clients
are built on first use and kept; ``invalidate`` (on ``POST /internal/v1/clusters/refresh``)
makes the next use re-read the registry, replacing clients whose kubeconfig changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from shared.clusters import plan_targets
from shared.errors import DependencyDown, WorkflowManagerError
from shared.k8s import client_from_kubeconfig, translating
from shared.logging import get_logger
from shared.registry_client import RegistryClient

log = get_logger(__name__)

HostFactory = Callable[[], Awaitable[ApiClient]]
ClientFactory = Callable[[str], Awaitable[ApiClient]]


async def host_identity(api: ApiClient) -> str:
    """The UID of the cluster's kube-system namespace."""
    with translating():
        namespace = await CoreV1Api(api).read_namespace("kube-system")
    return str(namespace.metadata.uid)


class ConnectionCache:
    def __init__(
        self,
        *,
        registry: RegistryClient | None,
        host_factory: HostFactory | None,
        client_factory: ClientFactory | None = None,
        min_refresh_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._host_factory = host_factory
        self._client_factory: ClientFactory = client_factory or (
            lambda text: client_from_kubeconfig(text)
        )
        self._min_refresh = min_refresh_seconds
        self._clock = clock
        self._lock = asyncio.Lock()
        self._clients: dict[str, ApiClient] = {}
        self._kubeconfigs: dict[str, str] = {}
        self._host: ApiClient | None = None
        self._host_uid: str | None = None
        self._refreshed_at: float | None = None
        self._stale = True

    async def api(self, cluster_id: str) -> ApiClient:
        """The client for ``cluster_id``; DependencyDown when there is no way to reach it."""
        if not self._stale and cluster_id in self._clients:
            return self._clients[cluster_id]
        await self._refresh(force=self._stale)
        client = self._clients.get(cluster_id)
        if client is None:
            raise DependencyDown(
                f"cluster {cluster_id!r} cannot be reached: the registry gives no way to reach it",
                details={"cluster": cluster_id, "dependency": "cluster"},
            )
        return client

    async def invalidate(self) -> None:
        self._stale = True

    async def _host_client(self) -> ApiClient | None:
        if self._host is None and self._host_factory is not None:
            try:
                self._host = await self._host_factory()
            except WorkflowManagerError as exc:
                log.warning("host_cluster_unreachable", error=exc.code, reason=exc.message)
                return None
        if self._host is not None and self._host_uid is None:
            try:
                self._host_uid = await host_identity(self._host)
            except WorkflowManagerError as exc:
                log.warning("host_identity_unknown", error=exc.code, reason=exc.message)
        return self._host

    async def _refresh(self, *, force: bool) -> None:
        async with self._lock:
            now = self._clock()
            if (
                not force
                and self._refreshed_at is not None
                and now - self._refreshed_at < self._min_refresh
            ):
                return
            host = await self._host_client()
            entries = await self._registry.clusters() if self._registry is not None else []
            targets = plan_targets(entries, host_uid=self._host_uid)
            clients: dict[str, ApiClient] = {}
            kubeconfigs: dict[str, str] = {}
            for target in targets:
                cluster_id = target.ref.id
                if target.is_host:
                    if host is not None:
                        clients[cluster_id] = host
                    continue
                if target.kubeconfig is None:
                    continue
                held = self._clients.get(cluster_id)
                if held is not None and self._kubeconfigs.get(cluster_id) == target.kubeconfig:
                    clients[cluster_id] = held
                else:
                    try:
                        clients[cluster_id] = await self._client_factory(target.kubeconfig)
                    except WorkflowManagerError as exc:
                        log.warning(
                            "cluster_kubeconfig_unusable", cluster=cluster_id, reason=exc.message
                        )
                        continue
                kubeconfigs[cluster_id] = target.kubeconfig
            dropped = [
                client
                for cluster_id, client in self._clients.items()
                if client is not host and clients.get(cluster_id) is not client
            ]
            self._clients, self._kubeconfigs = clients, kubeconfigs
            self._refreshed_at, self._stale = now, False
        for client in dropped:
            with contextlib.suppress(Exception):
                await client.close()

    async def close(self) -> None:
        clients = {id(c): c for c in self._clients.values()}
        if self._host is not None:
            clients[id(self._host)] = self._host
        self._clients.clear()
        for client in clients.values():
            with contextlib.suppress(Exception):
                await client.close()
