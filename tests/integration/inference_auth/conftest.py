"""Fixtures for inference_auth and its token store: a LOGIN role with only the rights of
``wm_inference_auth`` (what production gives the deployable), and its DSN."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.conftest import ADMIN_DSN


@pytest.fixture
async def reader_url(database_url: str) -> AsyncIterator[str]:
    """A DSN on the test database as a LOGIN member of ``wm_inference_auth``."""
    role = f"wm_ia_test_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE wm_inference_auth")
    finally:
        await admin.close()
    scheme, _, rest = database_url.partition("://")
    _, _, host_and_db = rest.partition("@")
    try:
        yield f"{scheme}://{role}@{host_and_db}"
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
            )
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await admin.close()


@pytest.fixture
async def admin_database() -> AsyncIterator[tuple[str, str]]:
    """DSNs of two empty databases created for one test and dropped after it."""
    names = [f"wm_ia_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base, _, _ = ADMIN_DSN.rpartition("/")
    try:
        yield f"{base}/{names[0]}", f"{base}/{names[1]}"
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        try:
            for name in names:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
