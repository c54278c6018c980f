"""Redis, shared by every replica: rate limits and the negative cache against token guessing.

Rate limits are fixed one-second windows counted by one Lua script (one round trip for the
token's and the deployment's counter together); only an allowed request is counted, so a
request refused by one limit spends nothing of the other. Redis is optional for the check:
when a call fails or times out the guard marks Redis down (``wm_inference_auth_redis_up 0``),
every request then skips it (no limits, no shared negative cache, no added latency), and a
probe loop pings it once a second until it answers again.
"""

from __future__ import annotations

import asyncio
from typing import Final

import redis.asyncio as redis
from redis.exceptions import RedisError

from inference_auth.metrics import REDIS_UP
from shared.logging import get_logger

log = get_logger(__name__)

# Check every counter first, then count: a request refused by any limit (the token's own, or
# the deployment's) spends no budget at all, so a noisy token over its own limit cannot use
# up its deployment's and starve the other tokens of it. Atomic: a script runs alone.
_LIMIT_SCRIPT: Final = """
for i, key in ipairs(KEYS) do
    local count = tonumber(redis.call('GET', key) or '0')
    if count >= tonumber(ARGV[i]) then return i end
end
for i, key in ipairs(KEYS) do
    if redis.call('INCR', key) == 1 then redis.call('EXPIRE', key, 2) end
end
return 0
"""
_PROBE_PERIOD: Final = 1.0


class RedisGuard:
    def __init__(self, url: str, *, timeout: float, negative_ttl: float) -> None:
        self._client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=None
        )
        self._limit = self._client.register_script(_LIMIT_SCRIPT)
        self._negative_ttl = max(1, round(negative_ttl))
        self._timeout = timeout
        self.up = False
        self._recovered = asyncio.Event()
        REDIS_UP.set(0)

    async def close(self) -> None:
        await self._client.aclose()

    def _down(self, exc: BaseException) -> None:
        if self.up:
            log.warning("redis_down", error=type(exc).__name__, consequence="no rate limits")
        self.up = False
        REDIS_UP.set(0)

    async def probe_loop(self) -> None:
        """While Redis is down, ping it once a second; mark it up when it answers."""
        while True:
            if not self.up:
                try:
                    async with asyncio.timeout(max(self._timeout, 0.5)):
                        await self._client.ping()
                except (RedisError, OSError, TimeoutError):
                    pass
                else:
                    self.up = True
                    REDIS_UP.set(1)
                    log.info("redis_up")
            await asyncio.sleep(_PROBE_PERIOD)

    async def limited(
        self,
        *,
        lookup_id: str,
        token_limit: int | None,
        deployment_id: int,
        deployment_limit: int | None,
        window: int,
    ) -> bool:
        """True when a limit is already reached in this one-second ``window``; else count
        this request against every limit and False. False (unlimited) while Redis is down."""
        if not self.up:
            return False
        keys: list[str] = []
        limits: list[int] = []
        if token_limit is not None:
            keys.append(f"wmi:rl:t:{lookup_id}:{window}")
            limits.append(token_limit)
        if deployment_limit is not None:
            keys.append(f"wmi:rl:d:{deployment_id}:{window}")
            limits.append(deployment_limit)
        try:
            return bool(await self._limit(keys=keys, args=limits))
        except (RedisError, OSError, TimeoutError) as exc:
            self._down(exc)
            return False

    async def known_unknown(self, lookup_id: str) -> bool:
        """Whether any replica found this lookup id unknown within the negative TTL."""
        if not self.up:
            return False
        try:
            return bool(await self._client.exists(f"wmi:neg:{lookup_id}"))
        except (RedisError, OSError, TimeoutError) as exc:
            self._down(exc)
            return False

    async def remember_unknown(self, lookup_id: str) -> None:
        if not self.up:
            return
        try:
            await self._client.set(f"wmi:neg:{lookup_id}", b"1", ex=self._negative_ttl)
        except (RedisError, OSError, TimeoutError) as exc:
            self._down(exc)
