"""The asyncpg pool every deployable uses, and the translation of connection failures.

Every connection has ``search_path=workflow_manager`` (so SQL names tables unqualified) and
decodes ``json``/``jsonb`` to Python values and back with the standard ``json`` module.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg

from shared.config import Settings
from shared.errors import DependencyDown

SCHEMA = "workflow_manager"

# What says "the database is not there for us right now" rather than "this query is wrong":
# network failures, the 08 (connection) class, server shutdown/restart, connection limits,
# refused credentials or a missing database (an operator problem), and a standby that became
# read-only under us during a failover.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidCatalogNameError,
    asyncpg.ReadOnlySQLTransactionError,
)


# asyncpg reports a connection the server dropped under us (failover, restart) as an
# InterfaceError once it noticed: "connection is closed", or, for a pool's connection it has
# detached, "released back to the pool".
_LOST_CONNECTION = ("connection is closed", "connection was closed", "released back to the pool")


def is_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` means PostgreSQL cannot be reached or used. Purely computational."""
    if isinstance(exc, asyncpg.InterfaceError):
        return any(phrase in str(exc) for phrase in _LOST_CONNECTION)
    return isinstance(exc, _UNAVAILABLE)


def unavailable_error(exc: BaseException) -> DependencyDown:
    """The DependencyDown to raise ``from exc``; never carries the DSN (it holds a password)."""
    return DependencyDown(
        "the database is unavailable",
        details={"dependency": "postgresql", "error": type(exc).__name__},
    )


@contextmanager
def translate_db_errors() -> Iterator[None]:
    """Re-raise connection-level asyncpg/OS errors inside the block as DependencyDown."""
    try:
        yield
    except (*_UNAVAILABLE, asyncpg.InterfaceError) as exc:
        if not is_unavailable(exc):
            raise
        raise unavailable_error(exc) from exc


def database_ready(pool: asyncpg.Pool) -> Callable[[], Awaitable[None]]:
    """The ``postgresql`` readiness check every deployable registers: while PostgreSQL is away
    it fails with a reason (DependencyDown), not an exception logged with a traceback for
    every probe."""

    async def check() -> None:
        with translate_db_errors():
            await pool.fetchval("SELECT 1")

    return check


async def init_connection(conn: asyncpg.Connection) -> None:
    """Install the JSON codecs on a new connection (the pool calls it for each one)."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name,
            schema="pg_catalog",
            encoder=json.dumps,
            decoder=json.loads,
            format="text",
        )


def _connect_args(
    source: Settings | str, application_name: str | None
) -> tuple[str, dict[str, str]]:
    dsn = source.DATABASE_URL if isinstance(source, Settings) else source
    server_settings = {"search_path": SCHEMA}
    if application_name:
        server_settings["application_name"] = application_name
    return dsn, server_settings


async def create_pool(
    source: Settings | str,
    *,
    min_size: int | None = None,
    max_size: int | None = None,
    application_name: str | None = None,
    connect_timeout: float = 10.0,
) -> asyncpg.Pool:
    """Open a pool on ``source`` (Settings: DATABASE_URL, DB_POOL_MIN/MAX; or a DSN).

    Raises DependencyDown when PostgreSQL cannot be reached. The caller closes the pool.
    """
    dsn, server_settings = _connect_args(source, application_name)
    if isinstance(source, Settings):
        min_size = source.DB_POOL_MIN if min_size is None else min_size
        max_size = source.DB_POOL_MAX if max_size is None else max_size
    max_size = 10 if max_size is None else max_size
    min_size = min(1 if min_size is None else min_size, max_size)
    with translate_db_errors():
        pool: Any = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            server_settings=server_settings,
            init=init_connection,
            timeout=connect_timeout,
        )
    return pool


async def connect(
    source: Settings | str,
    *,
    application_name: str | None = None,
    connect_timeout: float = 10.0,
) -> asyncpg.Connection:
    """One dedicated connection configured like the pool's (for LISTEN, advisory locks)."""
    dsn, server_settings = _connect_args(source, application_name)
    with translate_db_errors():
        conn: Any = await asyncpg.connect(
            dsn, server_settings=server_settings, timeout=connect_timeout
        )
        try:
            await init_connection(conn)
        except BaseException:
            conn.terminate()
            raise
    return conn
