"""One emulated cluster's committed changes: history, watch streams and subscribers.

``ChangeLog`` keeps the recent change events (bounded by count and by bytes; older
resourceVersions answer 410 Expired), opens watch streams that replay from that history and then
follow live changes, fans every new change out to the open streams, and tells synchronous
subscribers (the Argo simulator) about each change in order. The store decides what changed and
counts resourceVersions; this module only records and delivers.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable

from sim.kube.objects import Stored
from sim.kube.selectors import FieldSelector, LabelSelector
from sim.kube.types import ApiError, EventType, ResourceType, WatchEvent
from sim.kube.watching import Event, WatchStream, event_line

Subscriber = Callable[[WatchEvent, ResourceType], None]


class ChangeLog:
    """History of committed changes and everyone who hears of them. Synchronous."""

    def __init__(
        self,
        *,
        current_rv: Callable[[], int],
        compaction_window: int,
        history_bytes: int,
        watch_queue_limit: int,
    ) -> None:
        self._current_rv = current_rv
        self._compaction_window = compaction_window
        self._history_bytes_limit = history_bytes
        self._watch_queue_limit = watch_queue_limit
        self._history: deque[Event] = deque()
        self._history_size = 0
        self._compacted_rv = 0
        self._watchers: dict[tuple[str, str, str], list[WatchStream]] = {}
        self._subscribers: list[Subscriber] = []
        self._pending: deque[tuple[Event, ResourceType]] = deque()
        self._dispatching = False

    def open_watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        resource_version: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        timeout: float | None,
        bookmark_interval: float | None,
        snapshot: Callable[[], Iterable[Stored]],
    ) -> WatchStream:
        """A registered stream: ADDED for each of `snapshot()` without a resourceVersion, else
        the history after it (400 if unparseable, 410 if compacted); then live events."""
        stream = WatchStream(
            rtype=rtype,
            namespace=namespace,
            labels=labels,
            fields=fields,
            timeout=timeout,
            bookmark_interval=bookmark_interval,
            current_rv=self._current_rv,
            on_close=self._forget_watcher,
            queue_limit=self._watch_queue_limit,
        )
        if resource_version in (None, "", "0"):
            for item in snapshot():
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

    def record(
        self, rtype: ResourceType, etype: EventType, ns: str, stored: Stored, prev: Stored | None
    ) -> None:
        """Record the change, fan it out to watchers, then tell subscribers in order."""
        modified = etype == "MODIFIED" and prev is not None
        event = Event(
            rv=self._current_rv(),
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

    def compact(self, keep: int = 0) -> None:
        """Drop all but the last `keep` history events: older resourceVersions answer 410."""
        while len(self._history) > keep:
            self._drop_oldest()
        if not self._history:
            self._compacted_rv = self._current_rv()

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback` synchronously on every change, in order; returns unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def end_streams(self) -> None:
        """End every watch after what it has queued (server shutdown)."""
        for streams in self._watchers.values():
            for stream in list(streams):
                stream.end()

    def _history_after(self, since: int) -> list[Event]:
        events: list[Event] = []
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
