"""One emulated cluster's state: objects and the resourceVersion counter, with the reads and
writes (create, get, list, replace, patch, delete with finalizers and cascades) the API serves.

``ClusterStore`` is the one interface (``INTERFACE.md``); it delegates the change history, watch
streams and subscribers to ``sim.kube.changes``, the owner-reference index garbage collection
uses to ``sim.kube.ownership``, pod logs to ``sim.kube.logs`` and service-proxy handlers to
``sim.kube.proxying``.

Stored objects are never mutated: every write builds a new object (a merge patch shares the
subtrees it does not touch) and serialises it once; watch lines, list bodies and GET answers
reuse those bytes. Only the `parsed_objects` most recently written or read versions keep their
parsed dict (the memory that matters with many clusters of large Workflows); history keeps bytes.
Public methods hand out and take in copies; the `*_raw` methods used by the server work on owned
objects and return `Stored` records to avoid copying.
"""

from __future__ import annotations

import builtins
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from sim.kube.changes import ChangeLog, Subscriber
from sim.kube.faults import Faults
from sim.kube.logs import ContainerLog, PodLogs
from sim.kube.objects import ParsedPool, Stored, owned, with_status_of
from sim.kube.ownership import Key, OwnerIndex
from sim.kube.patching import apply_patch, patch_media
from sim.kube.proxying import ProxyHandler, ProxyRegistry
from sim.kube.selectors import (
    FieldSelector,
    LabelSelector,
    field_selector_for,
    parse_label_selector,
)
from sim.kube.types import (
    BUILTIN_TYPES,
    ApiError,
    JsonObject,
    ResourceType,
    WatchEvent,
    not_found,
)
from sim.kube.validation import (
    check_resource_version,
    check_unchanged_fields,
    resource_name,
    typed_body,
    validate_metadata,
)
from sim.kube.watching import WatchStream

NAMESPACES_KEY: Key = ("", "v1", "namespaces")
PODS_KEY: Key = ("", "v1", "pods")

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_UNCHANGED_BY_SPEC = frozenset({"metadata", "status", "apiVersion", "kind"})


class ClusterStore:
    """The state of one emulated cluster. Synchronous, except streaming."""

    def __init__(
        self,
        name: str,
        *,
        compaction_window: int = 10_000,
        clock: Callable[[], float] = time.time,
        bookmark_interval: float = 1.0,
        history_bytes: int = 64 * 1024 * 1024,
        watch_queue_limit: int = 500_000,
        kube_system_uid: str | None = None,
        parsed_objects: int = 256,
    ) -> None:
        self.name = name
        self.bookmark_interval = bookmark_interval
        self._clock = clock
        self._types: dict[Key, ResourceType] = {}
        self._objects: dict[Key, dict[str, dict[str, Stored]]] = {}
        self._rv = 0
        self._changes = ChangeLog(
            current_rv=lambda: self._rv,
            compaction_window=compaction_window,
            history_bytes=history_bytes,
            watch_queue_limit=watch_queue_limit,
        )
        self._logs = PodLogs()
        self._proxies = ProxyRegistry()
        self._pool = ParsedPool(parsed_objects)
        self._owners = OwnerIndex()
        # Refusals at the API's edge (tests): ``faults.refuse(rtype, ...)``.
        self.faults = Faults()
        for rtype in BUILTIN_TYPES:
            self.register(rtype)
        namespaces = self._types[NAMESPACES_KEY]
        kube_system = {"metadata": {"name": "kube-system"}}
        created = self.create_raw(namespaces, None, kube_system, uid=kube_system_uid)
        self.kube_system_uid: str = created.meta["uid"]
        self.create_raw(namespaces, None, {"metadata": {"name": "default"}})
        # The API server's own Service, as every cluster has it (pods reach the API there).
        api_service = {
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver"}},
            "spec": {
                "clusterIP": "10.96.0.1",
                "clusterIPs": ["10.96.0.1"],
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
            },
        }
        self.create_raw(self._types[("", "v1", "services")], "default", api_service)

    # -- types ------------------------------------------------------------------------------

    def register(self, rtype: ResourceType) -> None:
        self._types[rtype.key] = rtype
        self._objects.setdefault(rtype.key, {})

    def resolve(self, group: str, version: str, plural: str) -> ResourceType:
        rtype = self._types.get((group, version, plural))
        if rtype is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rtype

    def types(self) -> builtins.list[ResourceType]:
        return list(self._types.values())

    @property
    def resource_version(self) -> int:
        """The cluster's current resourceVersion."""
        return self._rv

    # -- public, copying API ----------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str | None, obj: JsonObject) -> JsonObject:
        return self.create_raw(rtype, namespace, owned(obj)).copy()

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> JsonObject:
        return self.get_raw(rtype, namespace, name).copy()

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[JsonObject], str]:
        items = self.list_raw(
            rtype, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [item.copy() for item in items], str(self._rv)

    def replace(
        self, rtype: ResourceType, namespace: str | None, name: str, obj: JsonObject
    ) -> JsonObject:
        return self.replace_raw(rtype, namespace, name, owned(obj)).copy()

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: bytes | JsonObject | builtins.list[Any],
        *,
        content_type: str,
    ) -> JsonObject:
        private = body if isinstance(body, bytes) else owned(body)
        return self.patch_raw(rtype, namespace, name, private, content_type=content_type).copy()

    def delete(self, rtype: ResourceType, namespace: str | None, name: str) -> JsonObject:
        return self.delete_raw(rtype, namespace, name).copy()

    # -- writes -----------------------------------------------------------------------------

    def create_raw(
        self,
        rtype: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        uid: str | None = None,
    ) -> Stored:
        """Create from an owned body (it becomes part of the stored object)."""
        ns = self._scope(rtype, namespace)
        obj = typed_body(rtype, body)
        meta = obj["metadata"]
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix or not isinstance(prefix, str):
                raise ApiError(
                    422, "Invalid", f"{rtype.kind}: metadata.name or generateName is required"
                )
            name = self._generate_name(rtype, ns, prefix)
        if not isinstance(name, str):
            raise ApiError(422, "Invalid", "metadata.name must be a string")
        meta["name"] = name
        if rtype.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            meta["namespace"] = ns
            if ns not in self._objects[NAMESPACES_KEY].get("", {}):
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')
        else:
            meta.pop("namespace", None)
        bucket = self._objects[rtype.key].get(ns, {})
        if name in bucket:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{resource_name(rtype)} "{name}" already exists',
                details={"name": name, "group": rtype.group, "kind": rtype.plural},
            )
        validate_metadata(rtype, obj)
        if meta.get("resourceVersion"):
            # What the API server's storage answers (a 500), e.g. for a copied object.
            raise ApiError(
                500, "InternalError", "resourceVersion should not be set on objects to be created"
            )
        rv = self._next_rv()
        meta["uid"] = uid or str(uuid.uuid4())
        meta["resourceVersion"] = str(rv)
        meta["generation"] = 1
        meta["creationTimestamp"] = self._now()
        meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        if rtype.key == NAMESPACES_KEY:
            obj.setdefault("status", {"phase": "Active"})
        stored = Stored(obj, self._pool)
        self._objects[rtype.key].setdefault(ns, {})[name] = stored
        self._owners.update((rtype.key, ns, name), stored, None)
        self._changes.record(rtype, "ADDED", ns, stored, None)
        return stored

    def get_raw(self, rtype: ResourceType, namespace: str | None, name: str) -> Stored:
        ns = self._scope(rtype, namespace)
        stored = self._objects[rtype.key].get(ns, {}).get(name)
        if stored is None:
            raise not_found(rtype, name)
        return stored

    def list_raw(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Stored]:
        """Matching objects sorted by namespace and name."""
        labels = parse_label_selector(label_selector) if label_selector else None
        return self._select(rtype, namespace, labels, field_selector_for(rtype, field_selector))

    def replace_raw(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        status_only: bool = False,
    ) -> Stored:
        """PUT: 409 when the body's resourceVersion is set and stale."""
        current = self.get_raw(rtype, namespace, name)
        obj = typed_body(rtype, body)
        body_name = obj["metadata"].get("name")
        if body_name not in (None, "", name):
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({body_name}) does not match the name on the URL ({name})",
            )
        check_resource_version(rtype, current, obj["metadata"].get("resourceVersion"))
        if status_only:
            obj = with_status_of(current.obj, obj)
        return self._update(rtype, current, obj)

    def patch_raw(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: bytes | JsonObject | builtins.list[Any],
        *,
        content_type: str,
        status_only: bool = False,
    ) -> Stored:
        """PATCH with an owned body; the content type chooses merge or JSON patch."""
        media = patch_media(content_type, custom=rtype.custom)
        current = self.get_raw(rtype, namespace, name)
        result = apply_patch(current.obj, body, media)
        if result["metadata"].get("name") != name:
            raise ApiError(422, "Invalid", "metadata.name: Invalid value: field is immutable")
        check_resource_version(rtype, current, result["metadata"].get("resourceVersion"))
        if status_only:
            result = with_status_of(current.obj, result)
        return self._update(rtype, current, result)

    def delete_raw(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        *,
        preconditions: JsonObject | None = None,
    ) -> Stored:
        """DELETE: with finalizers the object only gets a deletionTimestamp."""
        current = self.get_raw(rtype, namespace, name)
        meta = current.meta
        for field, key in (("uid", "uid"), ("resourceVersion", "resourceVersion")):
            wanted = (preconditions or {}).get(field)
            if wanted and wanted != meta.get(key):
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource_name(rtype)} "{name}": '
                    f"Precondition failed: {field} in precondition: {wanted}, "
                    f"{field} in object meta: {meta.get(key)}",
                )
        if not meta.get("finalizers"):
            return self._remove(rtype, current, current.obj)
        if "deletionTimestamp" in meta:
            return current
        obj = dict(current.obj)
        new_meta = dict(meta)
        new_meta["deletionTimestamp"] = self._now()
        new_meta["deletionGracePeriodSeconds"] = 0
        new_meta["resourceVersion"] = str(self._next_rv())
        obj["metadata"] = new_meta
        stored = Stored(obj, self._pool, current)
        self._objects[rtype.key][self._ns_of(current)][name] = stored
        self._changes.record(rtype, "MODIFIED", self._ns_of(current), stored, current)
        return stored

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Stored]:
        items = self.list_raw(
            rtype, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [
            self.delete_raw(rtype, item.meta.get("namespace"), item.meta["name"]) for item in items
        ]

    # -- watch ------------------------------------------------------------------------------

    def open_watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        resource_version: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout: float | None = None,
        bookmarks: bool = False,
    ) -> WatchStream:
        """Start a watch: queued replay (or synthetic ADDED events), then live events."""
        labels = parse_label_selector(label_selector) if label_selector else None
        fields = field_selector_for(rtype, field_selector)
        return self._changes.open_watch(
            rtype,
            namespace,
            resource_version=resource_version,
            labels=labels,
            fields=fields,
            timeout=timeout,
            bookmark_interval=self.bookmark_interval if bookmarks else None,
            snapshot=lambda: self._select(rtype, namespace, labels, fields),
        )

    async def watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        resource_version: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the watch's own timeoutSeconds
        bookmarks: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """Watch events as dicts; raises ApiError(410) for a compacted resourceVersion."""
        stream = self.open_watch(
            rtype,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout=timeout,
            bookmarks=bookmarks,
        )
        try:
            while (batch := await stream.next_batch()) is not None:
                for line in batch:
                    event: WatchEvent = json.loads(line)
                    yield event
        finally:
            stream.close()

    def compact(self, keep: int = 0) -> None:
        """Drop all but the last `keep` history events: older resourceVersions answer 410."""
        self._changes.compact(keep)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback` synchronously on every change, in order; returns unsubscribe."""
        return self._changes.subscribe(callback)

    def close_streams(self) -> None:
        """End every watch and log follow (server shutdown)."""
        self._changes.end_streams()
        self._logs.close_all()

    # -- pod logs ---------------------------------------------------------------------------

    def append_log(self, namespace: str, pod: str, line: str, container: str = "main") -> None:
        self._logs.get_or_create(namespace, pod, container).append(line.rstrip("\n"))

    def close_log(self, namespace: str, pod: str, container: str = "main") -> None:
        self._logs.get_or_create(namespace, pod, container).close()

    def open_log(self, namespace: str, pod: str, container: str | None) -> ContainerLog:
        """404 when the pod does not exist, 400 when it has no such container log."""
        self.get_raw(self._types[PODS_KEY], namespace, pod)
        return self._logs.open(namespace, pod, container)

    async def read_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = "main",
        *,
        follow: bool = False,
        tail_lines: int | None = None,
    ) -> AsyncIterator[str]:
        """Lines of a container log; following ends when it is closed or the pod deleted."""
        log = self.open_log(namespace, pod, container)
        async for line in log.read(follow=follow, tail_lines=tail_lines):
            yield line

    # -- service proxy ----------------------------------------------------------------------

    def register_proxy(
        self, namespace: str, service: str, port: str, handler: ProxyHandler
    ) -> Callable[[], None]:
        """Serve `/api/v1/namespaces/{ns}/services/[scheme:]{service}:{port}/proxy/{path}`
        with `handler(request, path)` (`path` without its leading slash); returns unregister."""
        return self._proxies.register(namespace, service, port, handler)

    def resolve_proxy(self, namespace: str, name: str) -> ProxyHandler:
        """The handler for a proxy name `[scheme:]service[:port]`; 503 when none."""
        return self._proxies.resolve(namespace, name)

    # -- internals --------------------------------------------------------------------------

    def _scope(self, rtype: ResourceType, namespace: str | None) -> str:
        if not rtype.namespaced:
            return ""
        if not namespace:
            raise ApiError(400, "BadRequest", f"{rtype.kind} is namespaced: namespace required")
        return namespace

    @staticmethod
    def _ns_of(stored: Stored) -> str:
        namespace: str = stored.meta.get("namespace", "")
        return namespace

    def _update(self, rtype: ResourceType, current: Stored, obj: JsonObject) -> Stored:
        """Store `obj` as the next version of `current`, keeping system metadata."""
        old = current.obj
        old_meta = old["metadata"]
        meta = dict(obj.get("metadata") or {})
        obj = {"apiVersion": rtype.api_version, "kind": rtype.kind, **obj, "metadata": meta}
        for field in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
            if field in old_meta:
                meta[field] = old_meta[field]
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        spec_changed = any(
            old.get(key) != obj.get(key)
            for key in old.keys() | obj.keys()
            if key not in _UNCHANGED_BY_SPEC
        )
        meta["generation"] = int(old_meta.get("generation", 1)) + (1 if spec_changed else 0)
        validate_metadata(rtype, obj)
        check_unchanged_fields(rtype, old, obj)
        if obj == old:
            return current
        if "deletionTimestamp" in meta and not meta.get("finalizers"):
            return self._remove(rtype, current, obj)
        meta["resourceVersion"] = str(self._next_rv())
        stored = Stored(obj, self._pool, current)
        ns = self._ns_of(current)
        self._objects[rtype.key][ns][meta["name"]] = stored
        self._owners.update((rtype.key, ns, meta["name"]), stored, current)
        self._changes.record(rtype, "MODIFIED", ns, stored, current)
        return stored

    def _remove(self, rtype: ResourceType, current: Stored, final: JsonObject) -> Stored:
        """Delete for good: DELETED event, then namespace, pod-log and owner cascades."""
        ns = self._ns_of(current)
        name = current.meta["name"]
        obj = dict(final)
        meta = dict(obj["metadata"])
        meta["resourceVersion"] = str(self._next_rv())
        obj["metadata"] = meta
        stored = Stored(obj, self._pool, current)
        buckets = self._objects[rtype.key]
        del buckets[ns][name]
        if not buckets[ns]:
            del buckets[ns]
        self._owners.update((rtype.key, ns, name), None, current)
        self._changes.record(rtype, "DELETED", ns, stored, current)
        if rtype.key == PODS_KEY:
            self._logs.drop_pod(ns, name)
        elif rtype.key == NAMESPACES_KEY:
            self._delete_namespace_contents(name)
        self._collect_dependents(str(meta.get("uid", "")))
        return stored

    def _delete_namespace_contents(self, namespace: str) -> None:
        for key, buckets in self._objects.items():
            rtype = self._types[key]
            if not rtype.namespaced:
                continue
            for name in list(buckets.get(namespace, {})):
                if name in buckets.get(namespace, {}):
                    self.delete_raw(rtype, namespace, name)

    def _collect_dependents(self, owner_uid: str) -> None:
        """Garbage-collect objects whose owners are all gone."""
        for key, ns, name in self._owners.take_dependents(owner_uid):
            stored = self._objects[key].get(ns, {}).get(name)
            if stored is None:
                continue
            owners = stored.meta.get("ownerReferences") or []
            if not any(
                self._owners.exists(ref.get("uid")) for ref in owners if isinstance(ref, dict)
            ):
                self.delete_raw(self._types[key], ns or None, name)

    def _select(
        self,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
    ) -> builtins.list[Stored]:
        buckets = self._objects[rtype.key]
        if rtype.namespaced and namespace is not None:
            chosen = [(namespace, buckets.get(namespace, {}))]
        else:
            chosen = sorted(buckets.items())
        result: builtins.list[Stored] = []
        for _, bucket in chosen:
            for name in sorted(bucket):
                item = bucket[name]
                if labels is not None and not labels.matches(item.meta.get("labels")):
                    continue
                if fields is not None and not fields.matches(
                    {"metadata": item.meta} if fields.metadata_only else item.obj
                ):
                    continue
                result.append(item)
        return result

    def _generate_name(self, rtype: ResourceType, ns: str, prefix: str) -> str:
        bucket = self._objects[rtype.key].get(ns, {})
        while True:
            name = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            if name not in bucket:
                return name

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _now(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))
