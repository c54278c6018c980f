"""Fixtures for the shared package's integration tests: a throwaway PostgreSQL database."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

ADMIN_DSN = os.environ.get("WM_TEST_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def _dsn_for(database: str) -> str:
    base, _, _ = ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture
def admin_dsn() -> str:
    """A DSN with the right to create and drop databases."""
    return ADMIN_DSN


@pytest.fixture
async def fresh_database() -> AsyncIterator[str]:
    """The DSN of an empty database created for one test and dropped after it."""
    name = f"wm_shared_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield _dsn_for(name)
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
