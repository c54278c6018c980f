"""LISTEN connections: the one way a deployable hears PostgreSQL notifications.

``listening`` opens one dedicated connection (configured like the pool's), LISTENs on the given
channels and yields it with an event set when the connection is lost; the connection is closed
on the way out. ``listen_forever`` holds one such connection for the life of a task: it
reconnects with a growing delay whenever the connection cannot be opened or is lost, and calls
``on_listening`` each time the LISTEN is in place again, because notifications sent while no
connection listened are gone (callers catch up there: a refresh, a sweep, a cache flush).

Used by the watcher (cluster refreshes), the apiserver's stream (run changes, grants), the
compiler's notification sender (run changes), stagectl (approval decisions) and inference_auth
(token changes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from shared.config import Settings
from shared.db.pool import connect, translate_db_errors
from shared.errors import WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)

# asyncpg's listener: (connection, backend pid, channel, payload).
Listener = Callable[[Any, int, str, str], None]

FIRST_DELAY: Final = 0.25
MAX_DELAY: Final = 5.0
CLOSE_TIMEOUT: Final = 2.0


@dataclass(frozen=True, slots=True)
class Listening:
    """An open LISTEN connection and the event set when it is lost."""

    connection: asyncpg.Connection
    lost: asyncio.Event


@contextlib.asynccontextmanager
async def listening(
    source: Settings | str,
    *,
    application_name: str,
    channels: Mapping[str, Listener],
    connect_timeout: float = 5.0,
) -> AsyncIterator[Listening]:
    """One connection LISTENing on ``channels`` (each with its listener); ``DependencyDown``
    when PostgreSQL cannot be reached."""
    conn = await connect(source, application_name=application_name, connect_timeout=connect_timeout)
    lost = asyncio.Event()
    try:
        conn.add_termination_listener(lambda _conn: lost.set())
        with translate_db_errors():
            for channel, listener in channels.items():
                await conn.add_listener(channel, listener)
        yield Listening(conn, lost)
    finally:
        if not lost.is_set():  # a lost connection has nothing to close politely
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT)
        if not conn.is_closed():
            conn.terminate()


async def _until_lost(listened: Listening) -> None:
    await listened.lost.wait()


async def listen_forever(
    source: Settings | str,
    *,
    name: str,
    application_name: str,
    channels: Mapping[str, Listener],
    on_listening: Callable[[], None] | None = None,
    on_lost: Callable[[], None] | None = None,
    hold: Callable[[Listening], Awaitable[None]] = _until_lost,
    first_delay: float = FIRST_DELAY,
    max_delay: float = MAX_DELAY,
) -> None:
    """Keep a LISTEN connection on ``channels`` until cancelled.

    Each time the LISTEN is in place, ``on_listening`` runs (catch up on what was missed);
    ``hold`` then keeps the connection (by default until it is lost; a caller may also end it
    early, say when the connection stops answering), and ``on_lost`` runs when it ends. A
    connection that cannot be opened, or fails before it listens, is tried again after a delay
    doubling from ``first_delay`` to ``max_delay``; a connection lost after it listened is
    reopened at once. Logged as ``<name>_listen_started``, ``_lost`` and ``_failed``.
    """
    delay = first_delay
    while True:
        try:
            async with listening(
                source, application_name=application_name, channels=channels
            ) as listened:
                delay = first_delay
                if on_listening is not None:
                    on_listening()
                log.info(f"{name}_listen_started")
                try:
                    await hold(listened)
                finally:
                    if on_lost is not None:
                        on_lost()
            log.warning(f"{name}_listen_lost")
        except (WorkflowManagerError, asyncpg.PostgresError, OSError) as exc:
            log.warning(f"{name}_listen_failed", error=getattr(exc, "code", type(exc).__name__))
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
