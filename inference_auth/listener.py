"""The LISTEN connection that keeps every replica's token cache current.

One dedicated connection per replica LISTENs on ``inference_tokens`` (migration 0007 NOTIFYs
it on commit of every change to a token or a deployment), so a revocation or rotation reaches
every replica's cache within the notification's delivery time. When the connection drops, the
cache is told (entries stay usable for INFERENCE_AUTH_STALE_FOR) and the loop reconnects with a
growing delay; once back it flushes the cache, since notifications sent meanwhile are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Final

from inference_auth.cache import TokenCache
from inference_auth.metrics import CACHE_FLUSHES, LISTENING
from shared.config import Settings
from shared.db.inference_tokens import CHANNEL
from shared.db.listening import Listening, listen_forever
from shared.errors import DependencyDown
from shared.logging import get_logger

log = get_logger(__name__)

_FIRST_DELAY: Final = 0.25
_MAX_DELAY: Final = 5.0
_PING_PERIOD: Final = 5.0


class TokenListener:
    def __init__(self, source: Settings | str, cache: TokenCache) -> None:
        self._source = source
        self._cache = cache
        LISTENING.set(0)

    def on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        kind, _, value = payload.partition(":")
        if kind == "t":
            self._cache.drop_token(value)
        elif kind == "d" and value.isdigit():
            self._cache.drop_deployment(int(value))
        else:  # a payload of a newer release: be safe
            self._cache.connected()

    async def ready(self) -> None:
        """The readiness check: fails while the cache cannot hear changes."""
        if not self._cache.listening:
            since = self._cache.stale_since()
            detail = (
                f"for {time.monotonic() - since:.1f}s; cached tokens are served until "
                "INFERENCE_AUTH_STALE_FOR runs out"
                if since is not None
                else "not connected yet"
            )
            raise DependencyDown(f"the LISTEN connection for token changes is down {detail}")

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

    def _listening(self) -> None:
        self._cache.connected()  # flushes: what changed while nobody listened is unknown
        CACHE_FLUSHES.inc()
        LISTENING.set(1)

    def _lost(self) -> None:
        self._cache.disconnected(time.monotonic())
        LISTENING.set(0)

    async def _hold(self, listened: Listening) -> None:
        """Until the connection is lost, or stops answering (a silently dead peer would
        otherwise keep the cache trusted without hearing anything)."""
        while not listened.lost.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(listened.lost.wait(), timeout=_PING_PERIOD)
                return
            try:
                async with asyncio.timeout(_PING_PERIOD):
                    await listened.connection.fetchval("SELECT 1")
            except Exception:
                return
