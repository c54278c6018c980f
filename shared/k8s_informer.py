"""An informer over Argo ``Workflow`` resources of one cluster, in every namespace (optionally
only those a label selector picks): the watcher runs one per cluster, the stage controller one
over the data controller's workflows on the host.

List (paginated), then watch from the list's resourceVersion with bookmarks; re-watch from the
last seen resourceVersion when a watch times out or its connection drops; relist when the API
answers 410 Gone, detecting the deletions missed meanwhile by diffing against what we knew.
Events go to a coalescing queue keyed by workflow; its consumer (the watcher's writer, the stage
controller's workers) does the rest. The informer keeps
no copy of the objects, only ``(namespace, name) -> (uid, resourceVersion)``, so a cluster with
thousands of runs costs kilobytes, not gigabytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Counter

from shared.errors import WorkflowManagerError
from shared.logging import get_logger
from shared.queueing import CoalescingQueue
from shared.runs import ClusterRef

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "workflows"
log = get_logger(__name__)

# The queue's key: one entry per workflow object (a re-created name is another object).
WorkflowKey = tuple[str, str, str, str]  # (cluster_id, namespace, name, uid)


@dataclass(frozen=True, slots=True)
class Deleted:
    """The workflow left its cluster; ``final`` is its last state when the API sent it."""

    final: dict[str, Any] | None = None


Change = dict[str, Any] | Deleted  # the latest object seen, or its disappearance
ChangeQueue = CoalescingQueue[WorkflowKey, Change]


@dataclass(frozen=True, slots=True)
class Seen:
    uid: str
    resource_version: int


class Expired(Exception):
    """The watch's resourceVersion fell out of the API's window: relist."""


@dataclass(frozen=True)
class InformerMetrics:
    """The counters an informer reports to, each deployable's own: ``events`` labelled
    ``cluster`` and ``type``, the other two ``cluster``."""

    events: Counter
    watch_restarts: Counter
    relists: Counter


@dataclass
class InformerOptions:
    page_size: int = 100
    watch_timeout: int = 300  # seconds the server keeps one watch open
    high_water: int = 1000  # queued workflows before an informer waits for the writer
    # Shared by every informer of a process: how many clusters may list at once. A list holds
    # a page of parsed workflows while it waits for the writer; fifty at once was 500 MB.
    list_permits: asyncio.Semaphore | None = None
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    # An owned cluster whose informer has failed to list or watch for this long makes the
    # watcher not ready (a restarting watch, the API server briefly away, is not a failure yet).
    unready_after: float = 60.0
    # Only the workflows this label selector picks (None: every one).
    label_selector: str | None = None


@dataclass
class InformerState:
    """What an informer knows of its cluster; exposed for tests and the cluster status."""

    resource_version: str | None = None
    known: dict[tuple[str, str], Seen] = field(default_factory=dict)
    last_event_at: float | None = None  # wall-clock seconds
    synced: bool = False  # the first list has been queued
    # Monotonic time of the first of the failures since the last list or watch that
    # succeeded (None while none failed), and the last of them: the readiness check.
    failing_since: float | None = None
    last_error: str | None = None


class WorkflowInformer:
    """Feeds ``queue`` with every change to the Workflows of one cluster, forever."""

    def __init__(
        self,
        *,
        cluster: ClusterRef,
        api_client: ApiClient,
        queue: ChangeQueue,
        known: dict[tuple[str, str], Seen] | None = None,
        options: InformerOptions | None = None,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        metrics: InformerMetrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.api_client = api_client
        self._api = CustomObjectsApi(api_client)
        self._queue = queue
        self._options = options or InformerOptions()
        self._wall_clock = wall_clock
        self._clock = clock
        self.state = InformerState(known=dict(known or {}))
        self._metrics = metrics
        # Labelled children resolved once: .labels() per event costs more than the event.
        self._event_counters = {
            kind: metrics.events.labels(cluster=cluster.id, type=kind)
            for kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
            if metrics is not None
        }
        self._selector: dict[str, Any] = (
            {"label_selector": self._options.label_selector} if self._options.label_selector else {}
        )

    async def run(self) -> None:
        """List and watch until cancelled; transient failures back off and retry."""
        backoff = self._options.backoff_initial
        while True:
            try:
                if self.state.resource_version is None:
                    await self._relist()
                await self._watch_once()
                backoff = self._options.backoff_initial
            except Expired:
                log.info("watch_expired_relisting", cluster=self.cluster.id)
                self.state.resource_version = None
            except (
                ApiException,
                aiohttp.ClientError,
                TimeoutError,
                ValueError,
                WorkflowManagerError,  # the client's own, e.g. a refused TLS certificate
            ) as exc:
                if isinstance(exc, ApiException) and exc.status == 410:
                    self.state.resource_version = None
                    continue
                if self.state.failing_since is None:
                    self.state.failing_since = self._clock()
                status = getattr(exc, "status", None)
                self.state.last_error = type(exc).__name__ + (f" {status}" if status else "")
                log.warning(
                    "watch_failed", cluster=self.cluster.id, retry_in=backoff, **_failure(exc)
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._options.backoff_max)
            if self._metrics is not None:
                self._metrics.watch_restarts.labels(cluster=self.cluster.id).inc()

    async def _relist(self) -> None:
        """List every Workflow page by page; queue changes; tombstone what disappeared."""
        permits = self._options.list_permits
        if permits is None:
            await self._list_all()
            return
        async with permits:
            await self._list_all()

    async def _list_all(self) -> None:
        if self._metrics is not None:
            self._metrics.relists.labels(cluster=self.cluster.id).inc()
        present: set[tuple[str, str]] = set()
        token: str | None = None
        list_rv: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self._options.page_size, **self._selector}
            if token:
                kwargs["_continue"] = token
            page = await self._api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)
            meta = page.get("metadata") or {}
            list_rv = list_rv or meta.get("resourceVersion")
            for obj in page.get("items") or []:
                obj.setdefault("kind", "Workflow")
                key = await self._observe(obj)
                if key is not None:
                    present.add(key)
            token = meta.get("continue") or None
            if not token:
                break
        for key in [k for k in self.state.known if k not in present]:
            await self._forget(key)
        self.state.resource_version = list_rv
        self.state.synced = True
        self.state.failing_since = None
        log.info("cluster_listed", cluster=self.cluster.id, workflows=len(present), rv=list_rv)

    async def _watch_once(self) -> None:
        """Watch from the current resourceVersion until the server ends the stream."""
        assert self.state.resource_version is not None  # set by the list that precedes
        response = await self._api.list_cluster_custom_object(
            GROUP,
            VERSION,
            PLURAL,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.state.resource_version,
            timeout_seconds=self._options.watch_timeout,
            _preload_content=False,
            _request_timeout=self._options.watch_timeout + 30,
            **self._selector,
        )
        self.state.failing_since = None  # the API server answered: watching again
        try:
            handled = 0
            async for line in _lines(response.content):
                await self._handle(orjson.loads(line))
                handled += 1
                if handled % 25 == 0:
                    await asyncio.sleep(0)  # one network read can hold hundreds of events
        finally:
            response.release()

    async def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired(obj.get("message", "resourceVersion expired"))
            raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        counter = self._event_counters.get(str(kind))
        if counter is not None:
            counter.inc()
        if kind == "BOOKMARK":
            self.state.resource_version = rv or self.state.resource_version
            return
        self.state.last_event_at = self._wall_clock()
        if kind in ("ADDED", "MODIFIED"):
            await self._observe(obj)
        elif kind == "DELETED":
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
            held = self.state.known.get(key)
            if held is not None and held.uid == meta.get("uid"):
                await self._forget(key, final=obj)
        if rv:
            self.state.resource_version = rv

    async def _observe(self, obj: dict[str, Any]) -> tuple[str, str] | None:
        """Queue ``obj`` unless we already hold its resourceVersion; returns its key."""
        meta = obj.get("metadata") or {}
        namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        try:
            rv = int(str(meta.get("resourceVersion")))
        except (TypeError, ValueError):
            rv = -1
        if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str)):
            log.warning("workflow_without_identity", cluster=self.cluster.id)
            return None
        key = (namespace, name)
        held = self.state.known.get(key)
        if held is not None and held.uid != uid:
            # Deleted and re-created under the same name while we were not looking.
            await self._forget(key)
        elif held is not None and held.resource_version >= rv >= 0:
            return key
        self.state.known[key] = Seen(uid, rv)
        await self._queue.put_when_room(
            (self.cluster.id, namespace, name, uid), obj, high_water=self._options.high_water
        )
        return key

    async def _forget(self, key: tuple[str, str], *, final: dict[str, Any] | None = None) -> None:
        held = self.state.known.pop(key)
        await self._queue.put_when_room(
            (self.cluster.id, key[0], key[1], held.uid),
            Deleted(final),
            high_water=self._options.high_water,
        )


def _failure(exc: BaseException) -> dict[str, Any]:
    """How a failed list or watch is logged: ours by code and message (which name the cluster
    and the cause, e.g. a refused certificate), a library's by type and HTTP status."""
    if isinstance(exc, WorkflowManagerError):
        return {"error": exc.code, "reason": exc.message}
    return {"error": type(exc).__name__, "status": getattr(exc, "status", None)}


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-delimited frames of any size (aiohttp's readline caps a line at a few MB, and a
    workflow with tens of thousands of nodes is larger than that)."""
    buffer = bytearray()
    async for chunk in content.iter_any():
        buffer.extend(chunk)
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            if end > start:
                yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
    if buffer.strip():
        yield bytes(buffer)
