"""Holding calls in flight, so a test can kill the stage controller at an exact step:

- ``StageHolds``: the sim Argo server's interceptor; holds every ``set`` or ``resume`` of one
  stage, before Argo applies it or after (applied, not answered yet);
- ``HoldingS3``: an HTTP proxy in front of moto that holds every request a predicate picks
  (the register stage's copies into the registry) before forwarding it, and can answer a
  copy's ``x-amz-copy-source-if-match`` as S3 does (``copy_preconditions``: moto 5.2.5 ignores
  it on CopyObject, honouring it only on HEAD and UploadPartCopy);
- ``TableHold``: a lock that holds every write to one PostgreSQL table (reads go on), so a
  test sees the stage controller's statement waiting on it.

A test arms one, waits until a call is held (an observable fact, never a sleep), kills the
process, then releases what is held: a call held before it was applied is refused (its caller
is gone, as if it had never been sent); one held after is answered to nobody. A statement
held by ``TableHold`` ends with its connection: never written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import quote, unquote

import aiohttp
import asyncpg
from aiohttp import web

from sim.argo.actions import INTERNAL, ActionError
from sim.ports import free_port


class _Gate:
    def __init__(self) -> None:
        self.held: list[asyncio.Future[bool]] = []
        self.arrived = asyncio.Event()

    async def hold(self) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.held.append(future)
        self.arrived.set()
        return await future

    def release(self, *, proceed: bool) -> None:
        for future in self.held:
            if not future.done():
                future.set_result(proceed)
        self.held.clear()
        self.arrived.clear()


class StageHolds:
    """Install as ``sim ArgoServer.interceptor``; ``arm(moment, action, stage)``."""

    def __init__(self) -> None:
        self.armed: tuple[str, str, str] | None = None
        self.gate = _Gate()
        self.held_runs: list[str] = []

    def arm(self, moment: str, action: str, stage: str) -> None:
        self.armed = (moment, action, f"templateName=wm-{stage}")

    def disarm(self) -> None:
        self.armed = None

    async def __call__(
        self, moment: str, action: str, namespace: str, name: str, selector: str
    ) -> None:
        if self.armed != (moment, action, selector):
            return
        self.held_runs.append(name)
        if not await self.gate.hold() and moment == "before":
            raise ActionError(INTERNAL, "the caller went away before this was applied")

    async def wait_held(self) -> str:
        await self.gate.arrived.wait()
        return self.held_runs[-1]

    def release(self) -> None:
        moment = self.armed[0] if self.armed else "before"
        self.gate.release(proceed=moment == "after")


class HoldingS3:
    """A reverse proxy to ``target`` (moto) that holds the requests ``hold`` picks."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.hold: Callable[[web.Request], bool] | None = None
        self.copy_preconditions = False
        self.gate = _Gate()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def start(self) -> str:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self._session = aiohttp.ClientSession(auto_decompress=False)
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.gate.release(proceed=False)
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.hold is not None and self.hold(request) and not await self.gate.hold():
            raise web.HTTPServiceUnavailable(text="the caller went away")
        assert self._session is not None
        if self.copy_preconditions and not await self._source_matches(request):
            return web.Response(status=412, body=_PRECONDITION_FAILED, content_type="text/xml")
        skipped = {"host", "content-length", "transfer-encoding", "expect", "connection"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skipped}
        async with self._session.request(
            request.method, self.target + request.path_qs, headers=headers, data=body
        ) as upstream:
            payload = await upstream.read()
            dropped = {"transfer-encoding", "connection", "content-encoding"}
            if request.method != "HEAD":  # aiohttp counts the body it sends; HEAD has none
                dropped.add("content-length")
            answer = {k: v for k, v in upstream.headers.items() if k.lower() not in dropped}
            if request.method == "HEAD":
                return web.Response(status=upstream.status, headers=answer)
            return web.Response(status=upstream.status, headers=answer, body=payload)

    async def _source_matches(self, request: web.Request) -> bool:
        """False for a copy whose If-Match is not its source's ETag now (a missing source is
        left to moto, which answers NoSuchKey)."""
        wanted = request.headers.get("x-amz-copy-source-if-match")
        source = request.headers.get("x-amz-copy-source")
        if request.method != "PUT" or not wanted or not source:
            return True
        assert self._session is not None
        path = quote(unquote(source).partition("?")[0].lstrip("/"))
        # moto wants to know whose request it is (it checks no signature): the copy's own.
        who = {"Authorization": request.headers.get("Authorization", "")}
        async with self._session.head(f"{self.target}/{path}", headers=who) as found:
            etag = found.headers.get("ETag", "")
            return found.status == 404 or (found.status == 200 and etag == wanted)


_PRECONDITION_FAILED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PreconditionFailed</Code>'
    b"<Message>At least one of the pre-conditions you specified did not hold</Message>"
    b"<Condition>x-amz-copy-source-If-Match</Condition></Error>"
)


def registry_copy(request: web.Request) -> bool:
    """The register stage's copy of a run's file into the registry."""
    return (
        request.method == "PUT"
        and "x-amz-copy-source" in request.headers
        and "/models/" in request.path
    )


class TableHold:
    """``LOCK TABLE <table> IN EXCLUSIVE MODE`` in a transaction of its own, until released:
    every write to the table waits, reads do not. ``wait_held`` answers once a statement
    starting with ``statement`` waits on the lock: one only the stage controller sends (its
    connections cannot be told by name: asyncpg's pool resets ``application_name``)."""

    def __init__(self, database_url: str, table: str, statement: str) -> None:
        self.database_url = database_url
        self.table = table
        self.statement = statement
        self._conn: asyncpg.Connection | None = None
        self._transaction: asyncpg.transaction.Transaction | None = None

    async def start(self) -> TableHold:
        self._conn = await asyncpg.connect(self.database_url)
        self._transaction = self._conn.transaction()
        await self._transaction.start()
        await self._conn.execute(f"LOCK TABLE workflow_manager.{self.table} IN EXCLUSIVE MODE")
        return self

    async def _waiting(self) -> list[asyncpg.Record]:
        assert self._conn is not None
        # Inside a transaction pg_stat_activity is read once and kept; read it anew.
        await self._conn.execute("SELECT pg_stat_clear_snapshot()")
        return await self._conn.fetch(
            "SELECT pid, query FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
            self._conn.get_server_pid(),
        )

    async def wait_held(self, within: float = 60.0) -> str:
        """The held statement (the first one that began with ``statement``)."""
        try:
            async with asyncio.timeout(within):
                while True:
                    for row in await self._waiting():
                        if str(row["query"]).startswith(self.statement):
                            return str(row["query"])
                    await asyncio.sleep(0.02)
        except TimeoutError:
            assert self._conn is not None
            seen = await self._conn.fetch(
                "SELECT state, wait_event_type, pg_blocking_pids(pid) AS by, "
                "left(query, 60) AS query FROM pg_stat_activity "
                "WHERE datname = current_database()"
            )
            raise AssertionError(
                f"nothing held on {self.table}: {[tuple(row) for row in seen]}"
            ) from None

    async def release(self) -> None:
        """Unlock, after ending the held statements' connections: a statement sent by a
        process since killed never commits (PostgreSQL drops it with the connection once the
        lock is granted, as tried here with asyncpg's statements), and ending it first makes
        that certain before the process starts again."""
        assert self._conn is not None
        assert self._transaction is not None
        for row in await self._waiting():  # each waits until its backend has gone
            await self._conn.execute("SELECT pg_terminate_backend($1, 10000)", row["pid"])
        await self._transaction.rollback()
        await self._conn.close()
        self._conn = None
