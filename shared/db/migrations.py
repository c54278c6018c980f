"""Append-only SQL migrations, applied in order under a PostgreSQL advisory lock.

The list is the files ``shared/db/migrations/NNNN_<name>.sql`` (versions 1..N, no gaps). Every
process may call ``apply_migrations`` at start: the first to take the advisory lock applies what
is missing, the others wait for it and then find nothing to do. Each migration runs in its own
transaction together with its row in ``workflow_manager.schema_migrations``, so a crash leaves
either the whole migration recorded or none of it. Because of that transaction, a migration
cannot use statements that refuse to run in one (``CREATE INDEX CONCURRENTLY``).

A migration is never edited once applied: the runner refuses to start when the checksum or
name of an applied migration differs from the file, or when a new migration is numbered below
one already applied (two branches merged with the same number: renumber the newer one).
A database ahead of the code (a newer replica migrated during a rolling update) is accepted.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import asyncpg
import structlog

from shared.config import Settings
from shared.db.pool import SCHEMA, connect, is_unavailable, translate_db_errors
from shared.errors import ConfigError

log = structlog.get_logger(__name__)

# Fixed key of the session advisory lock serialising migration runs ("wm-migr" as an int64).
MIGRATION_LOCK_KEY = int.from_bytes(b"wm-migr", "big")
MIGRATIONS_PACKAGE = "shared.db"
MIGRATIONS_DIRECTORY = "migrations"

_FILENAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9][a-z0-9_]*)\.sql$")

_BOOTSTRAP = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


class MigrationError(ConfigError):
    """The migration list or the database's migration history is inconsistent: do not start."""

    code = "migration"


def checksum(sql: str) -> str:
    """sha256 of the SQL text with line endings normalised (a checkout's CRLF is no edit)."""
    return hashlib.sha256(sql.replace("\r\n", "\n").encode()).hexdigest()


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return checksum(self.sql)

    @property
    def filename(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"


@dataclass(frozen=True)
class AppliedMigration:
    version: int
    name: str
    checksum: str


@dataclass(frozen=True)
class MigrationPlan:
    pending: tuple[Migration, ...]
    ahead: tuple[int, ...]  # applied versions this code does not know (a newer release's)


def parse_migrations(files: Mapping[str, str]) -> list[Migration]:
    """Ordered migrations from {filename: sql}. Purely computational.

    Files not ending in ``.sql`` are ignored; a ``.sql`` file with a malformed name, a duplicate
    version or a gap in 1..N raises MigrationError.
    """
    by_version: dict[int, Migration] = {}
    for filename, sql in files.items():
        if not filename.endswith(".sql"):
            continue
        match = _FILENAME.match(filename)
        if match is None:
            raise MigrationError(
                f"migration file {filename!r} is not named NNNN_<lowercase_name>.sql"
            )
        version = int(match["version"])
        if version in by_version:
            raise MigrationError(
                f"migrations {by_version[version].filename!r} and {filename!r} "
                f"share version {version}"
            )
        by_version[version] = Migration(version=version, name=match["name"], sql=sql)
    ordered = [by_version[v] for v in sorted(by_version)]
    for expected, migration in enumerate(ordered, start=1):
        if migration.version != expected:
            raise MigrationError(
                f"migration versions must run 1..N without gaps: expected {expected:04d}, "
                f"found {migration.filename!r}"
            )
    return ordered


def plan_migrations(
    available: Sequence[Migration], applied: Iterable[AppliedMigration]
) -> MigrationPlan:
    """What to apply, in order, given what the database records. Purely computational.

    Raises MigrationError when history was edited (checksum or name of an applied migration
    changed) or when a pending migration is numbered below an applied one.
    """
    known = {m.version: m for m in available}
    applied_by_version = {a.version: a for a in applied}
    ahead: list[int] = []
    for version, record in sorted(applied_by_version.items()):
        migration = known.get(version)
        if migration is None:
            ahead.append(version)
            continue
        if record.checksum != migration.checksum:
            raise MigrationError(
                f"migration {migration.filename!r} was changed after it was applied "
                f"(checksum {record.checksum[:12]} recorded, {migration.checksum[:12]} now): "
                "migrations are append-only, add a new one instead"
            )
        if record.name != migration.name:
            raise MigrationError(
                f"migration {version:04d} was applied as {record.name!r} but is now named "
                f"{migration.name!r}: migrations are append-only"
            )
    pending = tuple(m for m in available if m.version not in applied_by_version)
    highest_applied = max(applied_by_version, default=0)
    for migration in pending:
        if migration.version < highest_applied:
            raise MigrationError(
                f"migration {migration.filename!r} is new but {highest_applied:04d} is already "
                "applied: renumber it after the last applied migration"
            )
    return MigrationPlan(pending=pending, ahead=tuple(ahead))


def load_migrations(
    package: str = MIGRATIONS_PACKAGE, directory: str = MIGRATIONS_DIRECTORY
) -> list[Migration]:
    """The migrations shipped in ``package``/``directory`` (works from a wheel too)."""
    folder = resources.files(package).joinpath(directory)
    files = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.is_file()
    }
    return parse_migrations(files)


async def _take_lock(conn: asyncpg.Connection) -> None:
    if await conn.fetchval("SELECT pg_try_advisory_lock($1)", MIGRATION_LOCK_KEY):
        return
    log.info("migration_lock_waiting", lock_key=MIGRATION_LOCK_KEY)
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)


async def _applied(conn: asyncpg.Connection) -> list[AppliedMigration]:
    rows: Any = await conn.fetch(
        f"SELECT version, name, checksum FROM {SCHEMA}.schema_migrations ORDER BY version"
    )
    return [
        AppliedMigration(version=row["version"], name=row["name"], checksum=row["checksum"])
        for row in rows
    ]


async def _apply_one(conn: asyncpg.Connection, migration: Migration) -> None:
    started = time.monotonic()
    try:
        async with conn.transaction():
            # The file may name tables unqualified whatever connection it was handed.
            await conn.execute(f"SET LOCAL search_path TO {SCHEMA}")
            await conn.execute(migration.sql)
            await conn.execute(
                f"INSERT INTO {SCHEMA}.schema_migrations (version, name, checksum) "
                "VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
    except asyncpg.PostgresError as exc:
        if is_unavailable(exc):
            raise
        raise MigrationError(
            f"migration {migration.filename!r} failed and was rolled back: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    log.info(
        "migration_applied",
        version=migration.version,
        migration=migration.name,
        seconds=round(time.monotonic() - started, 3),
    )


async def apply_migrations_on(
    conn: asyncpg.Connection, migrations: Sequence[Migration] | None = None
) -> list[int]:
    """Apply what is missing using ``conn`` (held for the whole run); return versions applied."""
    available = load_migrations() if migrations is None else list(migrations)
    await _take_lock(conn)
    try:
        await conn.execute(_BOOTSTRAP)
        plan = plan_migrations(available, await _applied(conn))
        if plan.ahead:
            log.warning("migrations_ahead_of_code", versions=list(plan.ahead))
        for migration in plan.pending:
            await _apply_one(conn, migration)
        return [m.version for m in plan.pending]
    finally:
        if not conn.is_closed():
            # A session lock also ends with its connection: failing to unlock loses nothing.
            with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)


async def apply_migrations(
    source: Settings | str, migrations: Sequence[Migration] | None = None
) -> list[int]:
    """Connect to ``source``, apply the missing migrations, disconnect.

    Returns the versions this call applied (empty when another process got there first).
    Raises MigrationError on inconsistent history, DependencyDown when PostgreSQL is away.
    """
    conn = await connect(source, application_name="workflow-manager-migrate")
    try:
        with translate_db_errors():
            applied = await apply_migrations_on(conn, migrations)
    finally:
        await conn.close()
    log.info("migrations_done", applied=applied)
    return applied
