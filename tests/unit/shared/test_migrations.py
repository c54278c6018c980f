"""The migration list and plan: pure logic, no database."""

from __future__ import annotations

import pytest

from shared.db.migrations import (
    MIGRATION_LOCK_KEY,
    AppliedMigration,
    Migration,
    MigrationError,
    checksum,
    load_migrations,
    parse_migrations,
    plan_migrations,
)
from shared.errors import ConfigError

FILES = {
    "0002_runs.sql": "CREATE TABLE runs (id int);",
    "0001_schema.sql": "CREATE SCHEMA IF NOT EXISTS workflow_manager;",
    "0003_run_changes.sql": "CREATE TABLE run_changes (seq bigserial);",
    "README.md": "not a migration",
}


def applied(migration: Migration) -> AppliedMigration:
    return AppliedMigration(migration.version, migration.name, migration.checksum)


def test_parse_orders_by_version_and_ignores_other_files() -> None:
    migrations = parse_migrations(FILES)
    assert [(m.version, m.name) for m in migrations] == [
        (1, "schema"),
        (2, "runs"),
        (3, "run_changes"),
    ]
    assert migrations[1].filename == "0002_runs.sql"


@pytest.mark.parametrize(
    ("files", "complaint"),
    [
        ({"0001_a.sql": "", "0001_b.sql": ""}, "share version 1"),
        ({"0001_a.sql": "", "0003_c.sql": ""}, "expected 0002"),
        ({"0002_b.sql": ""}, "expected 0001"),
        ({"1_a.sql": ""}, "is not named"),
        ({"0001_Add-Table.sql": ""}, "is not named"),
        ({"0001_.sql": ""}, "is not named"),
    ],
)
def test_parse_refuses_malformed_lists(files: dict[str, str], complaint: str) -> None:
    with pytest.raises(MigrationError, match=complaint):
        parse_migrations(files)


def test_migration_error_stops_start_up_like_a_config_error() -> None:
    assert issubclass(MigrationError, ConfigError)


def test_checksum_ignores_line_ending_style_but_not_content() -> None:
    assert checksum("SELECT 1;\r\nSELECT 2;\r\n") == checksum("SELECT 1;\nSELECT 2;\n")
    assert checksum("SELECT 1;") != checksum("SELECT 2;")


def test_plan_on_empty_database_is_everything_in_order() -> None:
    migrations = parse_migrations(FILES)
    plan = plan_migrations(migrations, [])
    assert [m.version for m in plan.pending] == [1, 2, 3]
    assert plan.ahead == ()


def test_plan_skips_applied_migrations() -> None:
    migrations = parse_migrations(FILES)
    plan = plan_migrations(migrations, [applied(migrations[0]), applied(migrations[1])])
    assert [m.version for m in plan.pending] == [3]


def test_plan_refuses_an_edited_migration() -> None:
    migrations = parse_migrations(FILES)
    record = AppliedMigration(2, "runs", checksum("CREATE TABLE runs (id bigint);"))
    with pytest.raises(MigrationError, match=r"0002_runs\.sql.*changed after it was applied"):
        plan_migrations(migrations, [applied(migrations[0]), record])


def test_plan_refuses_a_renamed_migration() -> None:
    migrations = parse_migrations(FILES)
    record = AppliedMigration(2, "workflow_runs", migrations[1].checksum)
    with pytest.raises(MigrationError, match="applied as 'workflow_runs'"):
        plan_migrations(migrations, [applied(migrations[0]), record])


def test_plan_refuses_a_new_migration_numbered_below_an_applied_one() -> None:
    migrations = parse_migrations(FILES)
    with pytest.raises(MigrationError, match=r"0002_runs\.sql.*renumber"):
        plan_migrations(migrations, [applied(migrations[0]), applied(migrations[2])])


def test_plan_accepts_a_database_ahead_of_the_code() -> None:
    migrations = parse_migrations(FILES)
    newer = AppliedMigration(4, "from_a_newer_release", checksum("..."))
    plan = plan_migrations(migrations, [*map(applied, migrations), newer])
    assert plan.pending == ()
    assert plan.ahead == (4,)


def test_shipped_migrations_start_with_the_schema() -> None:
    shipped = load_migrations()
    assert shipped[0].filename == "0001_schema.sql"
    assert "CREATE SCHEMA IF NOT EXISTS workflow_manager" in shipped[0].sql
    assert [m.version for m in shipped] == list(range(1, len(shipped) + 1))


def test_lock_key_fits_a_postgres_bigint() -> None:
    assert 0 < MIGRATION_LOCK_KEY < 2**63
