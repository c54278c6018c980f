"""inference_auth at the edge: what a guess costs, how fresh a replica's knowledge is when its
LISTEN connection is down or silently half-open, and that PostgreSQL away does not take it out
of the Service. PostgreSQL and Redis sit behind proxies (tests/integration/faults.py), which
count what reaches them and can silence one connection without closing it."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest

from shared.db.inference_tokens import TokenStore
from shared.inference_tokens import new_token
from sim.ports import free_port
from tests.integration.faults import CuttableProxy
from tests.integration.inference_auth.conftest import Instance
from tests.unit.chart._render import RELEASE, find, rendered

DOMAIN = "models.example.com"
HOST = "churn-production.acme.models.example.com"
OTHER_HOST = "fraud-production.acme.models.example.com"
# What the LISTEN connection's startup message announces (application_name); the pool's differs.
LISTEN_CONNECTION = b"wm-inference-auth-listen\x00"

Start = Callable[..., Awaitable[Instance]]


@asynccontextmanager
async def _proxied(url: str) -> AsyncIterator[tuple[CuttableProxy, str]]:
    """A proxy in front of the service of ``url`` and the URL through it."""
    parts = urlsplit(url)
    proxy = CuttableProxy(target_host="127.0.0.1", target_port=parts.port or 0)
    await proxy.start()
    try:
        yield proxy, url.replace(f":{parts.port}/", f":{proxy.port}/", 1)
    finally:
        await proxy.stop()


async def _store(db: asyncpg.Pool) -> TokenStore:
    store = TokenStore(db)
    await store.register_deployment(
        tenant="acme", model="churn", environment="production", domain=DOMAIN
    )
    return store


async def _until(status: Callable[[], Awaitable[int]], expected: int, *, within: float) -> float:
    """Poll until ``status()`` answers ``expected``; the seconds it took (fails after within)."""
    started = time.monotonic()
    while (answered := await status()) != expected:
        assert time.monotonic() - started < within, f"still {answered} after {within}s"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def _metric(service: Instance, line: str, *, within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if line in await service.metrics():
                return
            await asyncio.sleep(0.02)


@asynccontextmanager
async def _process(database_url: str, redis_url: str) -> AsyncIterator[Instance]:
    """inference_auth in a process of its own (its event loop shared with no test client)."""
    port, health_port = free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "HTTP_PORT": str(port),
        "HEALTH_PORT": str(health_port),
        "LOG_JSON": "true",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "inference_auth",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=250)) as http:
            service = Instance(
                f"{base}/internal/v1/inference-auth", base, f"http://127.0.0.1:{health_port}", http
            )

            async def readiness() -> int:
                try:
                    async with http.get(f"{service.health}/readyz") as response:
                        return response.status
                except aiohttp.ClientError:
                    return 0

            await _until(readiness, 200, within=30.0)
            yield service
    finally:
        process.terminate()
        try:
            async with asyncio.timeout(15):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


async def test_ten_thousand_bogus_tokens_reach_neither_postgresql_nor_redis(
    db: asyncpg.Pool, reader_url: str, redis_url: str
) -> None:
    store = await _store(db)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    async with (
        _proxied(reader_url) as (pg, pg_url),
        _proxied(redis_url) as (rd, rd_url),
        _process(pg_url, rd_url) as service,
    ):
        await _metric(service, "wm_inference_auth_redis_up 1.0")
        assert await service.status(issued.token, HOST) == 200
        queried, asked = pg.sent(excluding=LISTEN_CONNECTION), rd.sent()
        guesses = [new_token()[0] for _ in range(10_000)]
        # Each refusal waits for the listener's next ping (about 0.1 s): many at once.
        for start in range(0, len(guesses), 250):
            batch = guesses[start : start + 250]
            statuses = await asyncio.gather(*(service.status(token, HOST) for token in batch))
            assert set(statuses) == {401}
        assert pg.sent(excluding=LISTEN_CONNECTION) - queried == 0  # no query through the pool
        assert rd.sent() - asked == 0
        assert await service.status(issued.token, HOST) == 200


async def test_while_the_set_cannot_be_trusted_unknown_ids_are_shared_through_redis(
    db: asyncpg.Pool, reader_url: str, redis_url: str, start_instance: Start
) -> None:
    import redis.asyncio as redis

    async with _proxied(reader_url) as (pg, pg_url):
        service = await start_instance(DATABASE_URL=pg_url)
        await _metric(service, "wm_inference_auth_redis_up 1.0")
        trusted_guess, trusted_id, _ = new_token()
        assert await service.status(trusted_guess, HOST) == 401
        pg.freeze(LISTEN_CONNECTION)
        await _metric(service, "wm_inference_auth_listening 0.0")
        guess, lookup_id, _ = new_token()
        assert await service.status(guess, HOST) == 401  # read through the pool: unknown
        client = redis.Redis.from_url(redis_url)
        try:
            async with asyncio.timeout(5):
                while True:
                    if await client.exists(f"wmi:neg:{lookup_id}"):
                        break
                    await asyncio.sleep(0.02)
            assert not await client.exists(f"wmi:neg:{trusted_id}")  # refused from memory
        finally:
            await client.aclose()


@pytest.mark.parametrize("fault", ["half-open", "down"])
async def test_a_token_issued_while_a_replica_cannot_listen_works_there_within_a_second(
    db: asyncpg.Pool, reader_url: str, start_instance: Start, fault: str
) -> None:
    store = await _store(db)
    async with _proxied(reader_url) as (deaf, deaf_url):
        replicas = [await start_instance(DATABASE_URL=deaf_url), await start_instance()]
        for service in replicas:
            assert await service.status(new_token()[0], HOST) == 401
        deaf.freeze(LISTEN_CONNECTION)  # silent from now on, reconnections included
        if fault == "down":
            deaf.reset(LISTEN_CONNECTION)
        issued = await store.issue(
            tenant="acme", model="churn", environment="production", actor="t"
        )
        for service in replicas:
            took = await _until(lambda s=service: s.status(issued.token, HOST), 200, within=1.0)
            print(f"new_token_works_after_seconds[{fault}]: {took:.3f}")


async def test_revocation_within_a_second_over_a_half_open_listen_connection(
    db: asyncpg.Pool, reader_url: str, start_instance: Start
) -> None:
    store = await _store(db)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    kept = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    async with _proxied(reader_url) as (pg, pg_url):
        service = await start_instance(DATABASE_URL=pg_url)
        for _ in range(3):  # cached, then the shortcut of a token seen before
            assert await service.status(issued.token, HOST) == 200
            assert await service.status(kept.token, HOST) == 200
        pg.freeze(LISTEN_CONNECTION)  # the LISTEN socket stays open and hears nothing
        await store.revoke(issued.token_id, actor="t")
        took = await _until(lambda: service.status(issued.token, HOST), 401, within=1.0)
        print(f"revocation_refused_after_seconds[half-open]: {took:.3f}")
        assert await service.status(kept.token, HOST) == 200  # read through the pool


def _probe_paths() -> dict[str, str]:
    """The inference_auth Deployment's probe paths as the chart renders them."""
    deployment = find(rendered(), "Deployment", f"{RELEASE}-inference-auth")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    paths = {}
    for probe in ("readinessProbe", "livenessProbe"):
        action = container[probe]["httpGet"]
        assert ports[action["port"]] == 8121  # HEALTH_PORT's default: the health server
        paths[probe] = action["path"]
    return paths


async def test_postgresql_away_leaves_the_replica_in_the_service(
    db: asyncpg.Pool, reader_url: str, start_instance: Start
) -> None:
    store = await _store(db)
    known = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    unseen = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    paths = _probe_paths()
    async with _proxied(reader_url) as (pg, pg_url):
        service = await start_instance(DATABASE_URL=pg_url)
        assert await service.status(known.token, HOST) == 200
        pg.cut()
        await _metric(service, "wm_inference_auth_listening 0.0")
        assert await service.status(known.token, HOST) == 200  # the stale cache answers
        assert await service.status(unseen.token, HOST) == 401  # never seen: fail closed
        assert await service.status(known.token, OTHER_HOST) == 403
        for probe, path in paths.items():
            async with service.http.get(f"{service.health}{path}") as response:
                assert response.status == 200, (probe, path, await response.text())
        await _metric(service, "wm_inference_auth_postgresql_up 0.0")  # said, not hidden
        pg.restore()
        await _until(lambda: service.status(unseen.token, HOST), 200, within=10.0)
        await _metric(service, "wm_inference_auth_postgresql_up 1.0")


async def test_a_replica_that_never_reached_postgresql_is_not_ready(
    settings_factory: Callable[..., object], reader_url: str, redis_url: str
) -> None:
    """Readiness means "can answer checks": a replica that has never loaded the live tokens
    would refuse every one, so it stays out of the Service until it has."""
    from inference_auth.runner import run
    from shared.tasks import Supervisor

    path = _probe_paths()["readinessProbe"]
    async with _proxied(reader_url) as (pg, pg_url):
        pg.cut()
        health_port = free_port()
        settings = settings_factory(  # type: ignore[operator]
            DATABASE_URL=pg_url, REDIS_URL=redis_url, HTTP_PORT=free_port(), HEALTH_PORT=health_port
        )
        supervisor = Supervisor(name="inference-auth-test")
        supervisor.spawn("main", lambda: run(settings, supervisor))
        try:
            async with aiohttp.ClientSession() as http:
                url = f"http://127.0.0.1:{health_port}{path}"

                async def readiness() -> int:
                    try:
                        async with http.get(url) as response:
                            return response.status
                    except aiohttp.ClientError:
                        return 0

                await _until(readiness, 503, within=10.0)
                pg.restore()
                await _until(readiness, 200, within=10.0)
        finally:
            await supervisor.shutdown(2.0)


async def test_a_half_open_listen_connection_is_given_up_and_replaced(
    db: asyncpg.Pool, reader_url: str, start_instance: Start
) -> None:
    store = await _store(db)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    async with _proxied(reader_url) as (pg, pg_url):
        service = await start_instance(DATABASE_URL=pg_url)
        assert await service.status(issued.token, HOST) == 200
        pg.freeze(LISTEN_CONNECTION)
        await _metric(service, "wm_inference_auth_listening 0.0")
        pg.restore()  # the frozen socket stays silent; a new connection would pass
        # Given up after 2 s without an answer; the new connection loads the set again.
        await _metric(service, "wm_inference_auth_listening 1.0", within=10.0)
        assert await service.status(issued.token, HOST) == 200  # read again: the cache was reset
        queried = pg.sent(excluding=LISTEN_CONNECTION)
        guesses = [new_token()[0] for _ in range(50)]
        statuses = await asyncio.gather(*(service.status(token, HOST) for token in guesses))
        assert set(statuses) == {401}
        assert pg.sent(excluding=LISTEN_CONNECTION) == queried  # trusted again: from memory
        await store.revoke(issued.token_id, actor="t")
        await _until(lambda: service.status(issued.token, HOST), 401, within=1.0)  # heard


async def test_a_token_used_the_moment_it_is_issued_is_accepted(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    """No false 401 for a new token, even racing its own notification: a lookup id outside
    the set is refused only once a ping sent after the request arrived has been answered."""
    store = await _store(db)
    services = [await start_instance(), await start_instance()]
    for _ in range(30):
        issued = await store.issue(
            tenant="acme", model="churn", environment="production", actor="t"
        )
        statuses = await asyncio.gather(*(s.status(issued.token, HOST) for s in services))
        assert statuses == [200, 200]
