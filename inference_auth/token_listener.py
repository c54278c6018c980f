"""The LISTEN connection that keeps every replica's token cache current, and proves it is.

One dedicated connection per replica LISTENs on ``inference_tokens`` (migrations 0007 and 0013
NOTIFY it on commit of every token issued, changed or deleted and every deployment changed).
Once the LISTEN is in place the replica loads the set of live lookup ids on it, then pings it
every ``PING_PERIOD``: PostgreSQL delivers the notifications of changes committed before a
query started ahead of that query's answer, so each answered ping proves the cache heard every
change committed before the ping was sent (``TokenCache.alive``). A ping unanswered for
``TokenCache``'s trust window makes the cache untrusted (tokens are then read through the pool)
and is logged; one unanswered for ``PING_TIMEOUT`` gives the connection up (a half-open socket
never reports its loss) and the loop reconnects, growing its delay while it cannot.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from inference_auth.cache import TRUST_FOR, TokenCache
from inference_auth.metrics import CACHE_FLUSHES, LISTENING, POSTGRESQL_UP
from shared.config import Settings
from shared.db.inference_tokens import CHANNEL
from shared.db.listening import Listening, listen_forever
from shared.errors import DependencyDown
from shared.logging import get_logger

log = get_logger(__name__)

_FIRST_DELAY: Final = 0.25
_MAX_DELAY: Final = 5.0
PING_PERIOD: Final = 0.1
PING_TIMEOUT: Final = 2.0
_LOAD_TIMEOUT: Final = 30.0
# Every lookup id that may be presented: expired and revoked tokens are refused anyway.
_LIVE_LOOKUP_IDS: Final = (
    "SELECT lookup_id FROM inference_tokens "
    "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())"
)


class TokenListener:
    def __init__(self, source: Settings | str, cache: TokenCache) -> None:
        self._source = source
        self._cache = cache
        self._ping_answered = asyncio.Event()  # set, then replaced, at each answered ping
        LISTENING.set(0)
        POSTGRESQL_UP.set(0)

    def on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        kind, _, value = payload.partition(":")
        if kind == "t":
            self._cache.token_changed(value)
        elif kind == "d" and value.isdigit():
            self._cache.deployment_changed(int(value))
        else:  # a payload of a newer release: be safe, and load everything again
            self._cache.reset()

    async def ready(self) -> None:
        """The readiness check: the replica can answer checks once it has loaded the live
        tokens once. Losing PostgreSQL afterwards does not make it unready (the stale cache
        answers; ``wm_inference_auth_postgresql_up`` and the logs say so)."""
        if not self._cache.ever_loaded:
            raise DependencyDown(
                "the live tokens have not been loaded yet: PostgreSQL not reached since the start"
            )

    async def run(self) -> None:
        await listen_forever(
            self._source,
            name="token",
            application_name="wm-inference-auth-listen",
            channels={CHANNEL: self.on_notify},
            on_listening=self._listening,
            on_lost=self._lost,
            hold=self._hold,
            first_delay=_FIRST_DELAY,
            max_delay=_MAX_DELAY,
        )

    async def heard(self, since: float) -> bool:
        """Wait until every change committed before ``since`` (monotonic) has been heard: the
        next answered ping sent after it, at most a ping period and a round trip away, with
        no query of its own. False when the cache stops being trusted first."""
        cache = self._cache
        while not cache.heard_since(since):
            left = cache.trust_left(time.monotonic())
            if left <= 0:
                return False
            answered = self._ping_answered
            try:
                async with asyncio.timeout(left):
                    await answered.wait()
            except TimeoutError:
                return False
        return True

    def _listening(self) -> None:
        self._cache.connected()  # nothing trusted until the set is loaded

    def _lost(self) -> None:
        self._cache.disconnected()
        LISTENING.set(0)

    async def _load(self, listened: Listening) -> None:
        sent = time.monotonic()
        async with asyncio.timeout(_LOAD_TIMEOUT):
            rows = await listened.connection.fetch(_LIVE_LOOKUP_IDS)
        self._cache.load((row[0] for row in rows), sent_at=sent)
        CACHE_FLUSHES.inc()
        LISTENING.set(1)
        POSTGRESQL_UP.set(1)
        log.info("token_set_loaded", tokens=self._cache.known_count)

    async def _hold(self, listened: Listening) -> None:
        """Load the live tokens, then ping until the connection is lost or stops answering
        (a silently dead peer would otherwise keep the cache trusted without hearing)."""
        connection = listened.connection
        while not listened.lost.is_set():
            if not self._cache.loaded:  # first, or after a notification we cannot read
                try:
                    await self._load(listened)
                except Exception as exc:  # reconnect after the listener's delay
                    raise DependencyDown(f"loading the live tokens: {type(exc).__name__}") from exc
            sent = time.monotonic()
            ping = asyncio.ensure_future(connection.fetchval("SELECT 1"))
            try:
                if not await self._answered(ping, sent):
                    # A silent socket has nothing to close politely: drop it and reconnect.
                    connection.terminate()
                    return
            finally:
                if not ping.done():
                    ping.cancel()
            if ping.exception() is not None:
                return
            self._cache.alive(sent)
            self._ping_answered.set()
            self._ping_answered = asyncio.Event()
            LISTENING.set(1)
            POSTGRESQL_UP.set(1)
            try:
                async with asyncio.timeout(PING_PERIOD):
                    await listened.lost.wait()
            except TimeoutError:
                continue

    async def _answered(self, ping: asyncio.Future[Any], sent: float) -> bool:
        """Wait for the ping; False when it is given up (unanswered for ``PING_TIMEOUT``)."""
        done, _ = await asyncio.wait({ping}, timeout=TRUST_FOR)
        if done:
            return True
        LISTENING.set(0)
        log.warning("token_listen_unanswered", seconds=TRUST_FOR, consequence="read_through")
        done, _ = await asyncio.wait({ping}, timeout=PING_TIMEOUT - TRUST_FOR)
        if done:
            log.info("token_listen_answered", seconds=round(time.monotonic() - sent, 3))
            return True
        log.warning("token_listen_given_up", seconds=PING_TIMEOUT)
        POSTGRESQL_UP.set(0)
        return False
