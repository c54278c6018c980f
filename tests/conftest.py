"""Fixtures shared by every test.

Integration tests use the real services: a fresh PostgreSQL database per test run (migrated
once), the machine's Redis (a database number of its own, flushed), and the Kubernetes API
emulator through the real kubernetes-asyncio client. ``make test`` starts PostgreSQL and Redis
when they are not running.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

ADMIN_DSN = os.environ.get("WM_TEST_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("WM_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")

# Tables emptied between integration tests (every table but the migration ledger).
# Every table of the schema is emptied before each test except the migrations' own record.
_KEPT_TABLES = ("schema_migrations",)


def dsn_for(database: str) -> str:
    base, _, _ = ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def database_url() -> AsyncIterator[str]:
    """A database created for this test run, migrated once, dropped at the end."""
    from shared.db.migrations import apply_migrations

    name = f"wm_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = dsn_for(name)
    await apply_migrations(url)
    try:
        yield url
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the test run's database, emptied before the test."""
    from shared.db.pool import create_pool

    pool = await create_pool(database_url, min_size=1, max_size=4)
    try:
        tables = await pool.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'workflow_manager' "
            "AND tablename <> ALL($1::text[])",
            list(_KEPT_TABLES),
        )
        names = ", ".join(f'"{row["tablename"]}"' for row in tables)
        await pool.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    """The machine's Redis, on a database of the tests' own, flushed before each test."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        await client.flushdb()
        yield REDIS_URL
    finally:
        await client.aclose()


@pytest.fixture
def settings_factory(database_url: str) -> Callable[..., Any]:
    """Build ``Settings`` for a deployable under test (free ports, short leases)."""
    from shared.config import Settings

    def build(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "DATABASE_URL": database_url,
            "HEALTH_PORT": 0,
            "HTTP_PORT": 8120,
            "LOG_JSON": True,
            "LEASE_DURATION": 2.0,
            "LEASE_RENEW_PERIOD": 0.5,
            "POD_NAMESPACE": "workflow-manager",
            "SHUTDOWN_GRACE": 5.0,
        }
        values.update(overrides)
        return Settings(**values)

    return build


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """A moto server (S3, IAM, ...) on a free port for the tests of one module, with no
    authentication (tests/integration/compiler/test_storage_users.py runs its own with it)."""
    from moto.server import ThreadedMotoServer

    from sim.ports import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The real MLflow tracking server (the pinned version, basic-auth app, NO_PERMISSIONS by
    default), started once for the whole run (about ten seconds): ``url``,
    ``admin_username``, ``admin_password``. Its accounts and experiments outlive each test:
    tests use tenant ids of their own."""
    from sim.mlflow import MlflowServer

    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
