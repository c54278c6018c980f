"""Wires the inference_auth deployable: the pool (as role ``wm_inference_auth``, which reads the
token tables and nothing else), the token cache and its LISTEN connection, Redis, the check on
HTTP_PORT, and health and metrics on HEALTH_PORT.

It applies no migrations: its role may not (the other deployables do, at their start); until the
tables exist it cannot load the live tokens and ``/readyz`` says why. Once it has, ``/readyz``
stays 200 whatever PostgreSQL does (docs/inference-auth.md, "Speed, freshness and failures").
Replicas are stateless: each keeps its own cache, current through PostgreSQL notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from inference_auth.cache import TokenCache
from inference_auth.check import Checker
from inference_auth.http_server import CheckServer
from inference_auth.metrics import KNOWN_TOKENS
from inference_auth.redis_guard import RedisGuard
from inference_auth.token_listener import TokenListener
from shared.config import Settings
from shared.db.inference_tokens import TokenStore
from shared.db.pool import create_pool
from shared.health import HealthServer
from shared.logging import get_logger
from shared.tasks import Supervisor

log = get_logger(__name__)


@dataclass
class Parts:
    pool: asyncpg.Pool
    cache: TokenCache
    guard: RedisGuard
    listener: TokenListener
    checker: Checker


@contextlib.asynccontextmanager
async def inference_auth_parts(settings: Settings) -> AsyncIterator[Parts]:
    # min_size 0: a replica starts (and serves cached tokens) while PostgreSQL is away.
    pool = await create_pool(
        settings, min_size=0, application_name="wm-inference-auth", connect_timeout=2.0
    )
    guard = RedisGuard(
        settings.REDIS_URL,
        timeout=settings.INFERENCE_AUTH_REDIS_TIMEOUT,
        negative_ttl=settings.INFERENCE_AUTH_NEGATIVE_TTL,
    )
    try:
        cache = TokenCache(
            stale_for=settings.INFERENCE_AUTH_STALE_FOR,
            negative_ttl=settings.INFERENCE_AUTH_NEGATIVE_TTL,
        )
        listener = TokenListener(settings, cache)
        checker = Checker(store=TokenStore(pool), cache=cache, guard=guard, heard=listener.heard)
        KNOWN_TOKENS.set_function(lambda: cache.known_count)
        yield Parts(pool, cache, guard, listener, checker)
    finally:
        await guard.close()
        await pool.close()


async def run(settings: Settings, workers: Supervisor) -> None:
    """Serve the check on HTTP_PORT until cancelled."""
    async with (
        HealthServer.from_settings(settings) as health,
        inference_auth_parts(settings) as parts,
    ):
        # Ready means "can answer checks": once the live tokens are loaded, PostgreSQL away
        # does not take a replica out of the Service (cached tokens answer, stale); the
        # metrics and logs say it is away.
        health.add_check("tokens_loaded", parts.listener.ready)
        workers.spawn("token_listener", parts.listener.run)
        workers.spawn("redis_probe", parts.guard.probe_loop)
        server = CheckServer(parts.checker, asyncio.get_running_loop())
        try:
            await server.start("0.0.0.0", settings.HTTP_PORT)
            gc.collect()
            gc.freeze()
            log.info("inference_auth_started", port=settings.HTTP_PORT, health_port=health.port)
            await asyncio.Event().wait()
        finally:
            # Pending answers get what is left of the grace once the workers are cancelled.
            await server.stop(max(1.0, settings.SHUTDOWN_GRACE - 5.0))
