"""Local stand-ins for Slack incoming webhooks and PagerDuty's Events API v2 (tests and the
demo; never shipped). One aiohttp server records every request that arrives, in order.

- ``POST /slack/<hook path>``: Slack's incoming webhook. A JSON body with ``text`` or
  ``blocks`` is posted (kept in ``messages``) and answered 200 ``ok``; otherwise 400
  ``invalid_payload`` / ``no_text``, as Slack answers (plain text).
- ``POST /v2/enqueue``: PagerDuty's events endpoint. A valid event (``routing_key``,
  ``event_action``; for a trigger ``payload.summary``, ``source`` and ``severity``) answers 202
  ``{status, message, dedup_key}``; a trigger opens an incident keyed by its ``dedup_key``
  (generated when missing) or is appended to the open one, a resolve closes it. An invalid event
  answers 400 ``{status: "invalid event", message, errors}``.

Tests steer it: ``script(kind, Answer(...), ...)`` answers the next requests of a kind as
given (a 429 with ``Retry-After``, a 500) instead of taking them, or takes one and cuts its
connection before answering (``Cut()``); ``hold(kind, ...)`` holds
requests, either as still on their way (``taken=False``: nothing is posted unless released)
or taken and unanswered (``taken=True``: posted, the answer waits); ``wait_for`` waits on a
condition over what arrived, never on time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

Kind = Literal["slack", "pagerduty"]
_SEVERITIES = ("critical", "error", "warning", "info")
_ACTIONS = ("trigger", "acknowledge", "resolve")


@dataclass(frozen=True)
class Answer:
    """A scripted answer: the request is not taken (nothing posted, no incident)."""

    status: int
    body: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Cut:
    """A scripted end: the request is taken (posted, processed), then the connection is cut
    before any answer, as when an answer is lost on its way back."""


@dataclass
class Request:
    """One request as it arrived. ``taken``: posted (Slack) or processed (PagerDuty)."""

    seq: int
    kind: Kind
    path: str
    body: Any  # the JSON body, or the raw text when it is not JSON
    headers: dict[str, str]
    status: int | None = None  # what it was answered (None while held or dropped)
    taken: bool = False
    held: bool = False
    dropped: bool = False  # held on its way and then lost (its sender went away)


@dataclass
class Incident:
    dedup_key: str
    routing_key: str
    summary: str
    status: Literal["triggered", "resolved"] = "triggered"
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Hold:
    kind: Kind
    taken: bool
    release: asyncio.Event = field(default_factory=asyncio.Event)
    drop: bool = False


class Receivers:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.incidents: dict[str, Incident] = {}
        self.listeners: list[Callable[[Request], None]] = []
        self._scripts: dict[Kind, list[Answer | Cut]] = {"slack": [], "pagerduty": []}
        self._holds: dict[Kind, _Hold] = {}
        self._changed = asyncio.Condition()
        self._seq = itertools.count(1)
        self._keys = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/slack/{hook:.+}", self._slack)
        app.router.add_post("/v2/enqueue", self._pagerduty)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}"

    async def stop(self) -> None:
        for hold in list(self._holds.values()):
            hold.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Receivers:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def slack_url(self, hook: str = "T000/B000/demo") -> str:
        return f"{self.url}/slack/{hook}"

    @property
    def pagerduty_url(self) -> str:
        return f"{self.url}/v2/enqueue"

    # --- what arrived -------------------------------------------------------------------

    def of(self, kind: Kind) -> list[Request]:
        return [request for request in self.requests if request.kind == kind]

    def messages(self, hook: str | None = None) -> list[dict[str, Any]]:
        """Slack messages posted (to one hook, or any), in order."""
        return [
            r.body
            for r in self.of("slack")
            if r.taken and (hook is None or r.path == f"/slack/{hook}")
        ]

    async def wait_for(self, predicate: Callable[[], bool], *, within: float = 30.0) -> None:
        """Return once ``predicate()`` holds over what arrived (checked on every change)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), within)

    # --- steering -----------------------------------------------------------------------

    def script(self, kind: Kind, *answers: Answer | Cut) -> None:
        """Answer the next requests of ``kind`` with ``answers``, in order: an ``Answer``
        without taking the request, a ``Cut`` by taking it and cutting the connection."""
        self._scripts[kind].extend(answers)

    def hold(self, kind: Kind, *, taken: bool) -> None:
        """Hold every request of ``kind`` from now on until ``release``/``drop``: taken first
        (posted, answer held) or not (still on its way)."""
        self._holds[kind] = _Hold(kind, taken)

    def held(self, kind: Kind | None = None) -> list[Request]:
        return [r for r in self.requests if r.held and (kind is None or r.kind == kind)]

    def release(self, kind: Kind) -> None:
        """Let the held requests of ``kind`` go on (taken, if they were not yet, and answered);
        later ones are no longer held."""
        hold = self._holds.pop(kind, None)
        if hold is not None:
            hold.release.set()

    def drop(self, kind: Kind) -> None:
        """The held requests of ``kind`` never arrive (their sender went away): not taken,
        not answered; later ones are no longer held."""
        hold = self._holds.pop(kind, None)
        if hold is not None:
            hold.drop = True
            hold.release.set()

    # --- the endpoints ------------------------------------------------------------------

    async def _arrived(self, kind: Kind, request: web.Request) -> Request:
        text = await request.text()
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        arrived = Request(next(self._seq), kind, request.path, body, dict(request.headers))
        self.requests.append(arrived)
        for listener in self.listeners:
            listener(arrived)
        await self._notify()
        return arrived

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _handle(
        self, kind: Kind, request: web.Request, take: Callable[[Request], web.Response]
    ) -> web.Response:
        arrived = await self._arrived(kind, request)
        if self._scripts[kind]:
            answer = self._scripts[kind].pop(0)
            if isinstance(answer, Cut):
                take(arrived)
                await self._notify()
                if request.transport is not None:
                    request.transport.abort()
                raise web.HTTPServiceUnavailable()  # never written: the connection is gone
            arrived.status = answer.status
            await self._notify()
            return web.Response(status=answer.status, text=answer.body, headers=answer.headers)
        hold = self._holds.get(kind)
        response: web.Response | None = None
        if hold is not None and hold.taken:
            response = take(arrived)
        if hold is not None:
            arrived.held = True
            await self._notify()
            await hold.release.wait()
            arrived.held = False
            if hold.drop and response is None:
                arrived.dropped = True
                await self._notify()
                return web.Response(status=503, text="dropped")
        if response is None:
            response = take(arrived)
        arrived.status = response.status
        await self._notify()
        return response

    async def _slack(self, request: web.Request) -> web.Response:
        return await self._handle("slack", request, self._take_slack)

    def _take_slack(self, arrived: Request) -> web.Response:
        body = arrived.body
        if not isinstance(body, dict):
            return web.Response(status=400, text="invalid_payload")
        if not body.get("text") and not body.get("blocks"):
            return web.Response(status=400, text="no_text")
        arrived.taken = True
        return web.Response(status=200, text="ok")

    async def _pagerduty(self, request: web.Request) -> web.Response:
        return await self._handle("pagerduty", request, self._take_event)

    def _take_event(self, arrived: Request) -> web.Response:
        event = arrived.body
        errors = _event_errors(event)
        if errors:
            return web.json_response(
                {"status": "invalid event", "message": "Event object is invalid", "errors": errors},
                status=400,
            )
        key = str(event.get("dedup_key") or f"generated-{next(self._keys)}")
        incident = self.incidents.get(key)
        action = event["event_action"]
        if action == "trigger" and (incident is None or incident.status == "resolved"):
            incident = Incident(key, event["routing_key"], str(event["payload"]["summary"]))
            self.incidents[key] = incident
        if incident is not None:
            incident.events.append(event)
            if action == "resolve":
                incident.status = "resolved"
        arrived.taken = True
        return web.json_response(
            {"status": "success", "message": "Event processed", "dedup_key": key}, status=202
        )


def _event_errors(event: Any) -> list[str]:
    if not isinstance(event, dict):
        return ["the body is not a JSON object"]
    errors = []
    if not isinstance(event.get("routing_key"), str) or not event["routing_key"]:
        errors.append("'routing_key' is missing or blank")
    if event.get("event_action") not in _ACTIONS:
        errors.append("'event_action' must be trigger, acknowledge or resolve")
    key = event.get("dedup_key")
    if key is not None and (not isinstance(key, str) or len(key) > 255):
        errors.append("'dedup_key' must be a string of at most 255 characters")
    if event.get("event_action") == "trigger":
        payload = event.get("payload")
        if not isinstance(payload, dict):
            errors.append("'payload' is missing")
        else:
            for name in ("summary", "source"):
                if not isinstance(payload.get(name), str) or not payload[name]:
                    errors.append(f"'payload.{name}' is missing or blank")
            if payload.get("severity") not in _SEVERITIES:
                errors.append("'payload.severity' must be critical, error, warning or info")
            if isinstance(payload.get("summary"), str) and len(payload["summary"]) > 1024:
                errors.append("'payload.summary' is longer than 1024 characters")
    return errors
