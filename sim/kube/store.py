"""One emulated cluster's state: objects, the resourceVersion counter, change history, watches,
pod logs and service-proxy handlers.

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
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from sim.kube.logs import ContainerLog, PodLogs
from sim.kube.objects import ParsedPool, Stored, owned
from sim.kube.patching import json_patch, merge_patch
from sim.kube.proxying import ProxyHandler, ProxyRegistry
from sim.kube.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)
from sim.kube.types import (
    BUILTIN_TYPES,
    ApiError,
    EventType,
    JsonObject,
    ResourceType,
    WatchEvent,
    not_found,
)
from sim.kube.validation import validate_metadata
from sim.kube.watching import Event, WatchStream, event_line

Subscriber = Callable[[WatchEvent, ResourceType], None]
Key = tuple[str, str, str]
ObjectRef = tuple[Key, str, str]

NAMESPACES_KEY: Key = ("", "v1", "namespaces")
PODS_KEY: Key = ("", "v1", "pods")
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

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
        self._compaction_window = compaction_window
        self._history_bytes_limit = history_bytes
        self._watch_queue_limit = watch_queue_limit
        self._clock = clock
        self._types: dict[Key, ResourceType] = {}
        self._objects: dict[Key, dict[str, dict[str, Stored]]] = {}
        self._rv = 0
        self._history: deque[Event] = deque()
        self._history_size = 0
        self._compacted_rv = 0
        self._watchers: dict[Key, builtins.list[WatchStream]] = {}
        self._subscribers: builtins.list[Subscriber] = []
        self._pending: deque[tuple[Event, ResourceType]] = deque()
        self._dispatching = False
        self._logs = PodLogs()
        self._proxies = ProxyRegistry()
        self._pool = ParsedPool(parsed_objects)
        self._uids: dict[str, ObjectRef] = {}
        self._dependents: dict[str, set[ObjectRef]] = {}
        for rtype in BUILTIN_TYPES:
            self.register(rtype)
        namespaces = self._types[NAMESPACES_KEY]
        kube_system = {"metadata": {"name": "kube-system"}}
        created = self.create_raw(namespaces, None, kube_system, uid=kube_system_uid)
        self.kube_system_uid: str = created.meta["uid"]
        self.create_raw(namespaces, None, {"metadata": {"name": "default"}})

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
        obj = self._typed(rtype, body)
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
                f'{_resource(rtype)} "{name}" already exists',
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
        self._index(rtype.key, ns, name, stored, None)
        self._commit(rtype, "ADDED", ns, stored, None)
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
        fields = parse_field_selector(field_selector) if field_selector else None
        return self._select(rtype, namespace, labels, fields)

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
        obj = self._typed(rtype, body)
        body_name = obj["metadata"].get("name")
        if body_name not in (None, "", name):
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({body_name}) does not match the name on the URL ({name})",
            )
        self._check_resource_version(rtype, current, obj["metadata"].get("resourceVersion"))
        if status_only:
            obj = self._with_status_of(current.obj, obj)
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
        media = content_type.split(";", 1)[0].strip().lower()
        if media not in (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format ({media}) - accepted media "
                f"types include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}",
            )
        current = self.get_raw(rtype, namespace, name)
        patch: Any = body
        if isinstance(body, bytes):
            try:
                patch = json.loads(body)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", f"invalid patch body: {exc}") from exc
        if media == JSON_PATCH:
            result = json_patch(current.obj, patch)
        elif isinstance(patch, dict):
            result = merge_patch(current.obj, patch)
        else:
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
            raise ApiError(422, "Invalid", "the patched object has no metadata")
        if result["metadata"].get("name") != name:
            raise ApiError(422, "Invalid", "metadata.name: Invalid value: field is immutable")
        self._check_resource_version(rtype, current, result["metadata"].get("resourceVersion"))
        if status_only:
            result = self._with_status_of(current.obj, result)
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
                    f'Operation cannot be fulfilled on {_resource(rtype)} "{name}": '
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
        self._commit(rtype, "MODIFIED", self._ns_of(current), stored, current)
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
        fields = parse_field_selector(field_selector) if field_selector else None
        stream = WatchStream(
            rtype=rtype,
            namespace=namespace,
            labels=labels,
            fields=fields,
            timeout=timeout,
            bookmark_interval=self.bookmark_interval if bookmarks else None,
            current_rv=lambda: self._rv,
            on_close=self._forget_watcher,
            queue_limit=self._watch_queue_limit,
        )
        if resource_version in (None, "", "0"):
            for item in self._select(rtype, namespace, labels, fields):
                stream.push(event_line("ADDED", item.data))
        else:
            try:
                since = int(str(resource_version))
            except ValueError as exc:
                raise ApiError(
                    400, "BadRequest", f"invalid resourceVersion: {resource_version}"
                ) from exc
            if since < self._compacted_rv:
                raise ApiError(
                    410, "Expired", f"too old resource version: {since} ({self._compacted_rv})"
                )
            for event in self._history_after(since):
                if event.key != rtype.key or (
                    namespace is not None and event.namespace != namespace
                ):
                    continue
                line = (
                    stream.select(event) if stream.selective else event_line(event.type, event.data)
                )
                if line is not None:
                    stream.push(line)
        self._watchers.setdefault(rtype.key, []).append(stream)
        return stream

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
        while len(self._history) > keep:
            self._drop_oldest()
        if not self._history:
            self._compacted_rv = self._rv

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback` synchronously on every change, in order; returns unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def close_streams(self) -> None:
        """End every watch and log follow (server shutdown)."""
        for streams in self._watchers.values():
            for stream in list(streams):
                stream.end()
        self._logs.close_all()

    # -- pod logs ---------------------------------------------------------------------------

    def append_log(self, namespace: str, pod: str, line: str, container: str = "main") -> None:
        self._logs.get_or_create(namespace, pod, container).append(line.rstrip("\n"))

    def close_log(self, namespace: str, pod: str, container: str = "main") -> None:
        self._logs.get_or_create(namespace, pod, container).close()

    def open_log(self, namespace: str, pod: str, container: str | None) -> ContainerLog:
        """404 when the pod does not exist, 400 when it has no such container log."""
        self.get_raw(self._types[PODS_KEY], namespace, pod)
        containers = self._logs.containers(namespace, pod)
        if container is None:
            if "main" in containers or len(containers) != 1:
                container = "main"
            else:
                container = next(iter(containers))
        log = containers.get(container)
        if log is None:
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{pod}" is not available: choose one of: '
                f"[{' '.join(sorted(containers))}]",
            )
        return log

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

    def _typed(self, rtype: ResourceType, body: Any) -> JsonObject:
        """The body with apiVersion and kind first; 400 when they name another type."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", f"the body must be a {rtype.kind} object")
        for field, expected in (("apiVersion", rtype.api_version), ("kind", rtype.kind)):
            if body.get(field) not in (None, "", expected):
                raise ApiError(
                    400,
                    "BadRequest",
                    f"the body {field} {body.get(field)!r} does not match the resource "
                    f"({expected})",
                )
        obj: JsonObject = {"apiVersion": rtype.api_version, "kind": rtype.kind, **body}
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        meta = obj.get("metadata")
        obj["metadata"] = dict(meta) if isinstance(meta, dict) else {}
        return obj

    def _check_resource_version(self, rtype: ResourceType, current: Stored, given: Any) -> None:
        if given not in (None, "") and str(given) != current.resource_version:
            name = current.meta["name"]
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {_resource(rtype)} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
                details={"name": name, "group": rtype.group, "kind": rtype.plural},
            )

    @staticmethod
    def _with_status_of(current: JsonObject, changed: JsonObject) -> JsonObject:
        obj = dict(current)
        if "status" in changed:
            obj["status"] = changed["status"]
        else:
            obj.pop("status", None)
        return obj

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
        if obj == old:
            return current
        if "deletionTimestamp" in meta and not meta.get("finalizers"):
            return self._remove(rtype, current, obj)
        meta["resourceVersion"] = str(self._next_rv())
        stored = Stored(obj, self._pool, current)
        ns = self._ns_of(current)
        self._objects[rtype.key][ns][meta["name"]] = stored
        self._index(rtype.key, ns, meta["name"], stored, current)
        self._commit(rtype, "MODIFIED", ns, stored, current)
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
        self._index(rtype.key, ns, name, None, current)
        self._commit(rtype, "DELETED", ns, stored, current)
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
        for key, ns, name in self._dependents.pop(owner_uid, set()):
            stored = self._objects[key].get(ns, {}).get(name)
            if stored is None:
                continue
            owners = stored.meta.get("ownerReferences") or []
            if not any(ref.get("uid") in self._uids for ref in owners if isinstance(ref, dict)):
                self.delete_raw(self._types[key], ns or None, name)

    def _index(self, key: Key, ns: str, name: str, new: Stored | None, old: Stored | None) -> None:
        ref = (key, ns, name)
        if old is not None:
            for owner in _owner_uids(old.meta):
                dependents = self._dependents.get(owner)
                if dependents is not None:
                    dependents.discard(ref)
                    if not dependents:
                        del self._dependents[owner]
            if new is None:
                self._uids.pop(str(old.meta.get("uid")), None)
        if new is not None:
            self._uids[str(new.meta["uid"])] = ref
            for owner in _owner_uids(new.meta):
                self._dependents.setdefault(owner, set()).add(ref)

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

    def _history_after(self, since: int) -> builtins.list[Event]:
        events: builtins.list[Event] = []
        for event in reversed(self._history):
            if event.rv <= since:
                break
            events.append(event)
        events.reverse()
        return events

    def _drop_oldest(self) -> None:
        event = self._history.popleft()
        self._history_size -= len(event.data) + len(event.prev_data or b"")
        self._compacted_rv = event.rv

    def _forget_watcher(self, stream: WatchStream) -> None:
        streams = self._watchers.get(stream.rtype.key, [])
        if stream in streams:
            streams.remove(stream)

    def _commit(
        self, rtype: ResourceType, etype: EventType, ns: str, stored: Stored, prev: Stored | None
    ) -> None:
        """Record the change, fan it out to watchers, then tell subscribers in order."""
        modified = etype == "MODIFIED" and prev is not None
        event = Event(
            rv=self._rv,
            key=rtype.key,
            namespace=ns,
            etype=etype,
            data=stored.data,
            obj=stored.obj,
            prev_data=prev.data if modified and prev is not None else None,
            prev_obj=prev.obj if modified and prev is not None else None,
        )
        self._history.append(event)
        self._history_size += len(event.data) + len(event.prev_data or b"")
        while len(self._history) > self._compaction_window or (
            self._history_size > self._history_bytes_limit and len(self._history) > 1
        ):
            self._drop_oldest()
        shared: bytes | None = None
        for stream in self._watchers.get(rtype.key, ()):
            if stream.namespace is not None and stream.namespace != ns:
                continue
            if stream.selective:
                line = stream.select(event)
                if line is not None:
                    stream.push(line)
            else:
                if shared is None:
                    shared = event_line(etype, event.data)
                stream.push(shared)
        event.obj = event.prev_obj = None
        if not self._subscribers:
            return
        self._pending.append((event, rtype))
        if self._dispatching:
            return  # a subscriber wrote: the outer loop delivers this change next, in order
        self._dispatching = True
        try:
            while self._pending:
                pending, pending_type = self._pending.popleft()
                for callback in list(self._subscribers):
                    callback(
                        {"type": pending.type, "object": json.loads(pending.data)},
                        pending_type,
                    )
        finally:
            self._dispatching = False


def _resource(rtype: ResourceType) -> str:
    return f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural


def _owner_uids(meta: JsonObject) -> list[str]:
    refs = meta.get("ownerReferences") or []
    return [str(ref["uid"]) for ref in refs if isinstance(ref, dict) and ref.get("uid")]
