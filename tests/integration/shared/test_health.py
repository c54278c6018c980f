"""The health side server over real HTTP."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter

from shared.config import Settings, load_settings
from shared.errors import DependencyDown
from shared.health import HealthServer, Readiness


async def test_healthz_readyz_and_metrics() -> None:
    registry = CollectorRegistry()
    Counter("wm_test_events", "events seen", registry=registry).inc(3)
    database_up = True

    async def database() -> None:
        if not database_up:
            raise DependencyDown("the database is unavailable")

    async def informers() -> None:
        return None

    server = HealthServer(port=0, host="127.0.0.1", registry=registry)
    server.add_check("database", database)
    server.add_check("informers", informers)
    async with server, aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as http:
        assert server.port > 0
        async with http.get("/healthz") as response:
            assert response.status == 200
            assert (await response.json())["alive"] is True

        async with http.get("/readyz") as response:
            assert response.status == 200
            assert await response.json() == {"ready": True, "checks": ["database", "informers"]}

        database_up = False
        async with http.get("/readyz") as response:
            assert response.status == 503
            assert await response.json() == {
                "ready": False,
                "failures": {"database": "the database is unavailable"},
            }

        async with http.get("/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            assert "wm_test_events_total 3.0" in await response.text()

        async with http.get(
            "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        ) as response:
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            assert (await response.text()).endswith("# EOF\n")


async def test_a_hanging_or_broken_check_fails_readiness_with_its_name() -> None:
    async def hangs() -> None:
        await asyncio.Event().wait()

    async def breaks() -> None:
        raise KeyError("bug")

    readiness = Readiness(timeout=0.05)
    readiness.add("hangs", hangs)
    readiness.add("breaks", breaks)
    async with (
        HealthServer(port=0, host="127.0.0.1", readiness=readiness) as server,
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{server.port}/readyz") as response,
    ):
        assert response.status == 503
        failures = (await response.json())["failures"]
    assert failures == {"hangs": "timed out after 0.05s", "breaks": "KeyError: 'bug'"}


async def test_server_from_settings_stops_listening_on_exit() -> None:
    settings = load_settings(Settings, DATABASE_URL="postgresql://x/y", HEALTH_PORT=0)
    server = HealthServer.from_settings(settings, host="127.0.0.1")
    async with server:
        port = server.port
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as response,
        ):
            assert response.status == 200
    assert server.readiness.draining
    with pytest.raises(aiohttp.ClientConnectionError):
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz"),
        ):
            pass
    with pytest.raises(RuntimeError):
        _ = HealthServer(port=0).port


def test_readiness_names_are_unique() -> None:
    readiness = Readiness()
    readiness.add("db", _ok)
    with pytest.raises(ValueError, match="already registered"):
        readiness.add("db", _ok)


async def _ok() -> None:
    return None


async def test_the_database_check_fails_with_a_reason_not_a_traceback(database_url: str) -> None:
    """Every deployable's ``postgresql`` check: while PostgreSQL is away a probe answers 503
    with the reason, and nothing is logged with a traceback for it."""
    from urllib.parse import urlsplit

    from structlog.testing import capture_logs

    from shared.db.pool import create_pool, database_ready
    from tests.integration.faults import CuttableProxy

    target = urlsplit(database_url)
    proxy = CuttableProxy(
        target_host=target.hostname or "127.0.0.1", target_port=target.port or 5432
    )
    await proxy.start()
    proxied = database_url.replace(target.netloc, f"{target.username}@127.0.0.1:{proxy.port}")
    pool = await create_pool(proxied, min_size=1, max_size=2)
    server = HealthServer(port=0, host="127.0.0.1")
    server.add_check("postgresql", database_ready(pool))
    try:
        async with server, aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as http:
            async with http.get("/readyz") as response:
                assert response.status == 200
            proxy.cut()
            with capture_logs() as captured:
                async with http.get("/readyz") as response:
                    assert response.status == 503
                    failures = (await response.json())["failures"]
            assert failures == {"postgresql": "the database is unavailable"}
            assert [e for e in captured if "exc_info" in e or e["log_level"] == "error"] == []
            proxy.restore()
            async with http.get("/readyz") as response:
                assert response.status == 200
    finally:
        await pool.close()
        await proxy.stop()
