"""Migrations and the pool against a real PostgreSQL (one throwaway database per test)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from shared.config import Settings, load_settings
from shared.db import MigrationError, apply_migrations, create_pool, load_migrations
from shared.db.migrations import Migration
from shared.db.pool import connect, translate_db_errors
from shared.errors import DependencyDown

SCHEMA_SQL = "CREATE SCHEMA IF NOT EXISTS workflow_manager;"


def synthetic(*sql: str) -> list[Migration]:
    return [Migration(version=i, name=f"m{i}", sql=text) for i, text in enumerate(sql, start=1)]


def noticed_loss(conn: asyncpg.Connection) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # the pool has already detached its proxy
        return True


async def ledger(dsn: str) -> list[tuple[int, str, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT version, name, checksum FROM workflow_manager.schema_migrations ORDER BY 1"
        )
    finally:
        await conn.close()
    return [(r["version"], r["name"], r["checksum"]) for r in rows]


async def test_shipped_migrations_apply_once(fresh_database: str) -> None:
    shipped = load_migrations()
    assert await apply_migrations(fresh_database) == [m.version for m in shipped]
    assert await apply_migrations(fresh_database) == []
    assert await ledger(fresh_database) == [(m.version, m.name, m.checksum) for m in shipped]


async def test_concurrent_appliers_apply_each_migration_exactly_once(fresh_database: str) -> None:
    migrations = synthetic(
        SCHEMA_SQL,
        # Not idempotent, and slow enough that the other appliers are surely waiting on the lock.
        "CREATE TABLE applied_log (version int); SELECT pg_sleep(0.2);",
        "INSERT INTO applied_log VALUES (3);",
    )
    results = await asyncio.gather(
        *(apply_migrations(fresh_database, migrations) for _ in range(4))
    )
    assert sorted(v for result in results for v in result) == [1, 2, 3]
    assert sorted(results, key=len) == [[], [], [], [1, 2, 3]]
    conn = await asyncpg.connect(fresh_database)
    try:
        assert await conn.fetchval("SELECT count(*) FROM workflow_manager.applied_log") == 1
        # Every applier released the lock.
        # pg_locks is the whole server's: count this database's only (another test run may
        # hold its own migration lock meanwhile).
        assert not await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    finally:
        await conn.close()
    assert [row[0] for row in await ledger(fresh_database)] == [1, 2, 3]


async def test_changed_migration_is_refused_and_nothing_runs(fresh_database: str) -> None:
    await apply_migrations(fresh_database, synthetic(SCHEMA_SQL, "CREATE TABLE a (id int);"))
    before = await ledger(fresh_database)
    edited = synthetic(SCHEMA_SQL, "CREATE TABLE a (id bigint);", "CREATE TABLE b (id int);")
    with pytest.raises(MigrationError, match=r"0002_m2\.sql.*changed after it was applied"):
        await apply_migrations(fresh_database, edited)
    assert await ledger(fresh_database) == before
    conn = await asyncpg.connect(fresh_database)
    try:
        assert await conn.fetchval("SELECT to_regclass('workflow_manager.b')") is None
    finally:
        await conn.close()


async def test_failed_migration_rolls_back_whole_and_releases_the_lock(
    fresh_database: str,
) -> None:
    broken = synthetic(SCHEMA_SQL, "CREATE TABLE half (id int); SELECT 1/0;")
    with pytest.raises(MigrationError, match=r"0002_m2\.sql.*rolled back"):
        await apply_migrations(fresh_database, broken)
    assert [row[0] for row in await ledger(fresh_database)] == [1]
    fixed = synthetic(SCHEMA_SQL, "CREATE TABLE half (id int);")
    assert await apply_migrations(fresh_database, fixed) == [2]


async def test_pool_connections_use_the_schema_and_decode_json(fresh_database: str) -> None:
    await apply_migrations(fresh_database, synthetic(SCHEMA_SQL))
    settings = load_settings(Settings, DATABASE_URL=fresh_database, DB_POOL_MIN=1, DB_POOL_MAX=2)
    pool = await create_pool(settings)
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW search_path") == "workflow_manager"
            await conn.execute("CREATE TABLE docs (id int, body jsonb, raw json)")
            document = {"nodes": [{"id": "n1", "phase": "Running"}], "empty": None, "n": 1.5}
            await conn.execute("INSERT INTO docs VALUES (1, $1, $2)", document, ["a", 1])
            row = await conn.fetchrow("SELECT body, raw FROM docs WHERE id = 1")
            assert row["body"] == document
            assert row["raw"] == ["a", 1]
            assert await conn.fetchval("SELECT body->'nodes'->0->>'phase' FROM docs") == "Running"
            assert await conn.fetchval("SELECT to_regclass('workflow_manager.docs')") is not None
        assert pool.get_max_size() == 2
    finally:
        await pool.close()
    single = await connect(fresh_database)
    try:
        assert await single.fetchval("SELECT '{\"a\": 1}'::jsonb") == {"a": 1}
        assert await single.fetchval("SHOW search_path") == "workflow_manager"
    finally:
        await single.close()


@pytest.mark.parametrize("where", ["closed port", "missing database"])
async def test_unreachable_database_is_dependency_down(where: str, admin_dsn: str) -> None:
    if where == "closed port":
        dsn = "postgresql://postgres@127.0.0.1:1/postgres"
    else:
        dsn = admin_dsn.rpartition("/")[0] + "/wm_no_such_database"
    with pytest.raises(DependencyDown) as caught:
        await create_pool(dsn, connect_timeout=2)
    assert "postgres@" not in caught.value.message
    assert caught.value.details["dependency"] == "postgresql"


async def test_a_connection_killed_by_the_server_is_dependency_down(
    fresh_database: str, admin_dsn: str
) -> None:
    pool = await create_pool(fresh_database, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            admin = await asyncpg.connect(admin_dsn)
            try:
                await admin.execute("SELECT pg_terminate_backend($1)", pid)
            finally:
                await admin.close()
            # Let the client read the server's goodbye; querying while it arrives races
            # inside asyncpg (InternalClientError), which is not what this test is about.
            for _ in range(100):
                if noticed_loss(conn):
                    break
                await asyncio.sleep(0.01)
            with pytest.raises(DependencyDown), translate_db_errors():
                await conn.fetchval("SELECT 1")
    finally:
        pool.terminate()
