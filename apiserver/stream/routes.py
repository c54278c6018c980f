"""``GET /workflows/stream``: the live run changes a caller may see, as Server-Sent Events.

Every event carries ``id: <seq>`` (the change log's sequence). A fresh stream starts with a
``ready`` event (the hub's position). A client reconnecting with ``Last-Event-ID`` gets no
``ready``: first the matching changes it missed, read from ``run_changes``, then live ones,
with nothing skipped or repeated: the subscription is registered (once the hub knows its
position) before the missed changes are read (from the hub's memory when it still holds them
all, else from the log), and live events at or below what was already sent are dropped; when
this replica's hub has not read past the resume point yet, everything after it comes live. A
resume point older than the change log's retention gets a ``reset`` event (reload the list).

Whatever is queued for a stream goes out in one write. A stream silent for
``heartbeat_seconds`` gets a heartbeat. Its grants change when the tenant's do: the hub applies
them to every open stream of the tenant (``hub.StreamHub.apply_grants``); nothing is re-read
per stream or per event.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from apiserver.auth import Permission, identity_of
from apiserver.params import query_params
from apiserver.routing import API_PREFIX, Param, RouteSpec
from apiserver.runs.query import FILTER_PARAMS, parse_filters
from apiserver.runs.routes import FILTER_DOCS
from apiserver.services import SERVICES
from apiserver.stream.hub import Encoded, StreamHub, Subscriber
from apiserver.stream.sse import HEARTBEAT, MAX_EVENT_ID, frame, parse_last_event_id
from shared.errors import DependencyDown, WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)
HUB = web.AppKey("stream_hub", StreamHub)
LAST_EVENT_ID_PARAM = "last_event_id"
LAST_EVENT_ID_HEADER = "Last-Event-ID"
BACKFILL_BATCH = 500
START_WAIT_SECONDS = 10.0


async def _resume(
    response: web.StreamResponse, hub: StreamHub, subscriber: Subscriber, after: int
) -> int:
    """Answer a client resuming after seq ``after``; return the last seq covered.

    A resume point older than the change log gets a ``reset`` (checked whatever the hub has
    read: a hub behind the log would only offer what is left of it). Otherwise the matching
    changes in (after, subscriber.start] are sent, from the hub's memory when it held them all
    at subscription, else from the change log. When the hub has not read past ``after`` yet
    nothing is sent now: what follows ``after`` comes live."""
    oldest = await hub.source.oldest()
    if oldest is not None and after + 1 < oldest:
        await response.write(
            frame(
                event="reset",
                event_id=subscriber.start,
                data={"reason": "the resume point is older than the change log; reload"},
            )
        )
        return subscriber.start
    if after >= subscriber.start:
        return after  # live events at or below it were sent by whoever answered before
    if subscriber.missed is not None:
        await response.write(b"".join(item.frame for item in subscriber.missed))
        subscriber.missed = None
        return subscriber.start
    cursor = after
    while cursor < subscriber.start:
        changes = await hub.source.changes_after(cursor, limit=BACKFILL_BATCH)
        for change in changes:
            if change.seq > subscriber.start:
                return subscriber.start
            if subscriber.wants(change):
                await response.write(change.encode())
            cursor = change.seq
        if len(changes) < BACKFILL_BATCH:
            break
    return subscriber.start


async def _started(hub: StreamHub) -> None:
    """Wait for the hub to know its position (just after the replica starts): a subscription
    made before would take position 0 and miss what lies between a resume point and the
    position the hub then jumps to."""
    if hub.started.is_set():
        return
    try:
        await asyncio.wait_for(hub.started.wait(), START_WAIT_SECONDS)
    except TimeoutError:
        raise DependencyDown(
            "the live stream is not following the change log yet; retry", delay=1.0
        ) from None


def _drain(subscriber: Subscriber, item: Encoded | None, sent: int) -> tuple[bytes, int, bool]:
    """``item`` and whatever else is queued, as one write: (frames, last seq sent, ended)."""
    frames: list[bytes] = []
    while item is not None:
        if item.seq > sent:
            frames.append(item.frame)
            sent = item.seq
        if subscriber.queue.empty():
            return b"".join(frames), sent, False
        item = subscriber.queue.get_nowait()
    return b"".join(frames), sent, True


async def stream(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    hub = request.app[HUB]
    identity = identity_of(request)
    params = query_params(request, FILTER_PARAMS | {LAST_EVENT_ID_PARAM})
    filters = parse_filters(params)
    header = request.headers.get(LAST_EVENT_ID_HEADER)
    if header:
        last_id = parse_last_event_id(header)
    else:
        given = next(iter(params.get(LAST_EVENT_ID_PARAM, [])), None)
        last_id = parse_last_event_id(given, parameter=LAST_EVENT_ID_PARAM)
    scope = await hub.scope_of(identity.tenant)
    if not hub.started.is_set():
        await _started(hub)
        # Read again: grants changed before the hub listened were announced to nobody.
        scope = await hub.scope_of(identity.tenant)
    # No await between the look-up and the subscription: a grants change the hub applies
    # from here on finds this stream among the tenant's.
    subscriber = hub.subscribe(filters, scope, resume_after=last_id)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    loop = asyncio.get_running_loop()
    try:
        await response.prepare(request)
        if last_id is None:
            sent = subscriber.start
            await response.write(frame(event="ready", event_id=sent, data={"position": sent}))
        else:  # no ready event: the first one a resumed stream sends is what it missed
            sent = await _resume(response, hub, subscriber, last_id)
        every = services.heartbeat_seconds
        written_at = loop.time()
        while not (subscriber.closed or subscriber.overflowed):
            wake = written_at + every
            try:
                item = await asyncio.wait_for(subscriber.queue.get(), max(0.0, wake - loop.time()))
            except TimeoutError:  # proxies close streams that stay silent
                await response.write(HEARTBEAT)
                written_at = loop.time()
                continue
            frames, sent, ended = _drain(subscriber, item, sent)
            if frames:
                await response.write(frames)
                written_at = loop.time()
            if ended:
                break
        if subscriber.overflowed:
            log.info("stream_subscriber_too_slow", sent=sent, position=hub.position)
    except ConnectionResetError:
        pass  # the client went away (it may be reconnecting): nothing left to answer
    except WorkflowManagerError as exc:
        if not response.prepared:
            raise
        log.info("stream_ended_on_error", error=exc.code)
    finally:
        hub.unsubscribe(subscriber)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


ROUTES = (
    RouteSpec(
        "GET",
        f"{API_PREFIX}/workflows/stream",
        stream,
        Permission.WORKFLOWS_READ,
        "Live run changes (Server-Sent Events; resume with Last-Event-ID).",
        "workflows",
        query=(
            *FILTER_DOCS,
            Param(
                LAST_EVENT_ID_PARAM,
                "Resume after this event id (as the Last-Event-ID header).",
                type="integer",
                minimum=0,
                maximum=MAX_EVENT_ID,
            ),
        ),
        headers=(
            Param(
                LAST_EVENT_ID_HEADER,
                "Resume after this event id (what EventSource sends when it reconnects).",
                type="integer",
                minimum=0,
                maximum=MAX_EVENT_ID,
            ),
        ),
        responses={200: "EventStream", 400: "Error"},
        content_type="text/event-stream",
    ),
)
