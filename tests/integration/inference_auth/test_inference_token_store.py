"""The token store (shared/db/inference_tokens.py) and the role inference_auth reads it as."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from shared.db.inference_tokens import CHANNEL, Deployment, TokenStore
from shared.db.pool import create_pool
from shared.errors import Invalid, NotFound
from shared.inference_tokens import hash_matches, parse_token

DOMAIN = "models.example.com"


async def _deployment(
    store: TokenStore, model: str = "churn", environment: str = "production"
) -> Deployment:
    return await store.register_deployment(
        tenant="acme", model=model, environment=environment, domain=DOMAIN
    )


async def test_issue_stores_only_a_hash_and_lookup_finds_it(db: asyncpg.Pool) -> None:
    store = TokenStore(db)
    deployment = await _deployment(store)
    assert deployment.host == "churn-production.acme.models.example.com"
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="u1")
    lookup_id, secret = parse_token(issued.token) or ("", "")
    assert lookup_id == issued.lookup_id
    # The token and its secret appear nowhere in the database.
    dump = await db.fetchval("SELECT string_agg(t::text, ' ') FROM inference_tokens t")
    assert secret not in dump
    assert issued.token not in dump
    record = await store.lookup(lookup_id)
    assert record is not None
    assert record.deployment == deployment
    assert hash_matches(lookup_id, secret, record.secret_hash)
    assert record.valid_at(datetime.now(UTC))
    assert await store.lookup("0" * 16) is None


async def test_issue_by_deployment_id_and_refusals(db: asyncpg.Pool) -> None:
    store = TokenStore(db)
    deployment = await _deployment(store)
    issued = await store.issue(deployment_id=deployment.id, actor="u1")
    assert issued.deployment.id == deployment.id
    with pytest.raises(NotFound):
        await store.issue(tenant="acme", model="other", environment="production", actor="u1")
    with pytest.raises(NotFound):
        await store.issue(deployment_id=deployment.id + 1000, actor="u1")
    with pytest.raises(Invalid):
        await store.issue(tenant="Acme", model="churn", environment="production", actor="u1")
    with pytest.raises(Invalid):
        await store.issue(actor="u1")
    with pytest.raises(Invalid):
        await store.register_deployment(
            tenant="acme", model="churn", environment="prod-eu", domain=DOMAIN
        )
    with pytest.raises(Invalid):
        await store.register_deployment(
            tenant="acme", model="churn", environment="staging", domain=DOMAIN, rate_limit=0
        )


async def test_rotate_without_grace_revokes_the_old_token_at_once(db: asyncpg.Pool) -> None:
    store = TokenStore(db)
    await _deployment(store)
    old = await store.issue(tenant="acme", model="churn", environment="production", actor="u1")
    new = await store.rotate(old.token_id, actor="u2")
    assert new.token != old.token
    assert new.deployment == old.deployment
    now = datetime.now(UTC)
    old_record = await store.lookup(old.lookup_id)
    new_record = await store.lookup(new.lookup_id)
    assert old_record is not None
    assert not old_record.valid_at(now)
    assert new_record is not None
    assert new_record.valid_at(now)
    with pytest.raises(NotFound):  # a revoked token cannot be rotated again
        await store.rotate(old.token_id, actor="u2")


async def test_rotate_with_grace_keeps_the_old_token_for_the_grace(db: asyncpg.Pool) -> None:
    store = TokenStore(db)
    await _deployment(store)
    old = await store.issue(tenant="acme", model="churn", environment="production", actor="u1")
    await store.rotate(old.token_id, actor="u2", grace_seconds=3600)
    record = await store.lookup(old.lookup_id)
    assert record is not None
    assert record.expires_at is not None
    now = datetime.now(UTC)
    assert record.valid_at(now)
    assert not record.valid_at(now + timedelta(seconds=3601))
    with pytest.raises(Invalid):
        await store.rotate(old.token_id, actor="u2", grace_seconds=-1)


async def test_revoke_and_list(db: asyncpg.Pool) -> None:
    store = TokenStore(db)
    await _deployment(store)
    await _deployment(store, model="fraud")
    first = await store.issue(tenant="acme", model="churn", environment="production", actor="u1")
    second = await store.issue(tenant="acme", model="fraud", environment="production", actor="u1")
    await store.revoke(first.token_id, actor="u3")
    await store.revoke(first.token_id, actor="u4")  # idempotent; the first revoker stays
    with pytest.raises(NotFound):
        await store.revoke(first.token_id + 1000, actor="u3")
    listed = await store.list(tenant="acme")
    assert [info.id for info in listed] == [second.token_id, first.token_id]
    assert listed[1].revoked_at is not None
    assert listed[1].revoked_by == "u3"
    assert all(not hasattr(info, "secret_hash") for info in listed)
    assert [info.id for info in await store.list(tenant="acme", model="fraud")] == [second.token_id]
    assert await store.list(tenant="other") == []
    record = await store.lookup(first.lookup_id)
    assert record is not None
    assert not record.valid_at(datetime.now(UTC))


async def test_changes_are_notified_on_the_channel(db: asyncpg.Pool, database_url: str) -> None:
    store = TokenStore(db)
    deployment = await _deployment(store)
    issued = await store.issue(deployment_id=deployment.id, actor="u1")
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
        await store.revoke(issued.token_id, actor="u1")
        assert await asyncio.wait_for(heard.get(), 5) == f"t:{issued.lookup_id}"
        await store.register_deployment(
            tenant="acme", model="churn", environment="production", domain=DOMAIN, rate_limit=5
        )
        assert await asyncio.wait_for(heard.get(), 5) == f"d:{deployment.id}"
    finally:
        await listener.close()


async def test_the_reader_role_reads_tokens_and_nothing_else(
    db: asyncpg.Pool, reader_url: str
) -> None:
    store = TokenStore(db)
    await _deployment(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="u")
    reader = await create_pool(reader_url, min_size=1, max_size=1)
    try:
        record = await TokenStore(reader).lookup(issued.lookup_id)
        assert record is not None
        assert record.token_id == issued.token_id
        for table in ("runs", "pipelines", "tenants", "access_grants", "schema_migrations"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await reader.fetch(f"SELECT 1 FROM {table} LIMIT 1")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await reader.execute("UPDATE inference_tokens SET revoked_at = NULL")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await TokenStore(reader).revoke(issued.token_id, actor="reader")
    finally:
        await reader.close()


async def test_the_role_migration_is_idempotent_across_databases(
    admin_database: tuple[str, str],
) -> None:
    """Applying the migrations to more databases at once (the role exists already, or is being
    created by a concurrent migration) never fails."""
    from shared.db.migrations import apply_migrations

    first, second = admin_database
    await asyncio.gather(apply_migrations(first), apply_migrations(second))
