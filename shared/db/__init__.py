"""PostgreSQL access shared by every deployable: the asyncpg pool, the migration runner, and the
repositories of tables more than one deployable uses (``pipelines``, ``clusters``, ``audit``)."""

from shared.db.migrations import MigrationError, apply_migrations, load_migrations
from shared.db.pool import SCHEMA, create_pool, translate_db_errors

__all__ = [
    "SCHEMA",
    "MigrationError",
    "apply_migrations",
    "create_pool",
    "load_migrations",
    "translate_db_errors",
]
