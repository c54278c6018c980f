"""Committed change events and the per-watcher streams the store fans them out to."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from typing import Any

from sim.kube.selectors import FieldSelector, LabelSelector
from sim.kube.types import EventType, JsonObject, ResourceType

_BATCH_BYTES = 1 << 20  # what next_batch hands over at most (one line may exceed it)


def event_line(etype: str, data: bytes) -> bytes:
    """One newline-delimited watch event around an already serialised object."""
    return b'{"type":"' + etype.encode() + b'","object":' + data + b"}\n"


class Event:
    """A committed change. `obj`/`prev_obj` are only set while the change is being fanned out;
    history keeps the serialised forms alone so its memory stays bounded by bytes."""

    __slots__ = ("data", "key", "namespace", "obj", "prev_data", "prev_obj", "rv", "type")

    def __init__(
        self,
        *,
        rv: int,
        key: tuple[str, str, str],
        namespace: str,
        etype: EventType,
        data: bytes,
        obj: JsonObject | None,
        prev_data: bytes | None,
        prev_obj: JsonObject | None,
    ) -> None:
        self.rv = rv
        self.key = key
        self.namespace = namespace
        self.type: EventType = etype
        self.data = data
        self.obj = obj
        self.prev_data = prev_data
        self.prev_obj = prev_obj


class WatchStream:
    """One watcher's queue of serialised events; lines are shared between watchers."""

    def __init__(
        self,
        *,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        timeout: float | None,
        bookmark_interval: float | None,
        current_rv: Callable[[], int],
        on_close: Callable[[WatchStream], None],
        queue_limit: int,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.rtype = rtype
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.selective = labels is not None or fields is not None
        self._deadline = None if timeout is None else loop.time() + timeout
        self._bookmark_interval = bookmark_interval
        self._next_bookmark = None if bookmark_interval is None else loop.time() + bookmark_interval
        self._current_rv = current_rv
        self._on_close = on_close
        self._queue_limit = queue_limit
        self._queue: deque[bytes] = deque()
        self._wakeup = asyncio.Event()
        self._ended = False
        self._closed = False

    def matches(self, obj: JsonObject) -> bool:
        if self.labels is not None and not self.labels.matches(
            obj.get("metadata", {}).get("labels")
        ):
            return False
        return self.fields is None or self.fields.matches(obj)

    def select(self, event: Event) -> bytes | None:
        """The line this watcher sees for `event`: selectors turn a MODIFIED that enters or
        leaves the selection into ADDED or DELETED, as the API server does."""
        obj: Any = event.obj if event.obj is not None else json.loads(event.data)
        new = self.matches(obj)
        etype: str | None = event.type if new else None
        if event.type == "MODIFIED":
            prev: Any = event.prev_obj
            if prev is None and event.prev_data is not None:
                prev = json.loads(event.prev_data)
            old = prev is not None and self.matches(prev)
            if old and not new:
                etype = "DELETED"
            elif new and not old:
                etype = "ADDED"
        return None if etype is None else event_line(etype, event.data)

    def push(self, line: bytes) -> None:
        if self._ended:
            return
        self._queue.append(line)
        if len(self._queue) > self._queue_limit:
            # A watcher this far behind is cut off, as the API server does; the client
            # resumes from the last resourceVersion it saw.
            self._queue.clear()
            self._ended = True
        self._wakeup.set()

    def end(self) -> None:
        """End the stream after what is queued (shutdown)."""
        self._ended = True
        self._wakeup.set()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._ended = True
            self._on_close(self)

    def _bookmark(self) -> bytes:
        obj = {
            "kind": self.rtype.kind,
            "apiVersion": self.rtype.api_version,
            "metadata": {"resourceVersion": str(self._current_rv())},
        }
        return event_line("BOOKMARK", json.dumps(obj, separators=(",", ":")).encode())

    async def next_batch(self, max_wait: float | None = None) -> list[bytes] | None:
        """Lines ready now (waiting for some), `[]` after `max_wait` idle, None at the end."""
        loop = asyncio.get_running_loop()
        give_up = None if max_wait is None else loop.time() + max_wait
        while True:
            if self._queue:
                # At most about a megabyte at a time, as the API server streams a long replay:
                # the client sees the first events at once, not after the whole backlog.
                batch, size = [], 0
                while self._queue and size < _BATCH_BYTES:
                    line = self._queue.popleft()
                    batch.append(line)
                    size += len(line)
                return batch
            if self._ended:
                return None
            now = loop.time()
            if self._deadline is not None and now >= self._deadline:
                return None
            if self._next_bookmark is not None and now >= self._next_bookmark:
                assert self._bookmark_interval is not None
                self._next_bookmark = now + self._bookmark_interval
                return [self._bookmark()]
            if give_up is not None and now >= give_up:
                return []
            wake_at = min(
                (t for t in (self._deadline, self._next_bookmark, give_up) if t is not None),
                default=None,
            )
            self._wakeup.clear()
            try:
                async with asyncio.timeout_at(wake_at):
                    await self._wakeup.wait()
            except TimeoutError:
                pass
