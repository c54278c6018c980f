"""A tenant's number of data secrets is capped (DATA_SECRETS_MAX_PER_TENANT: every save reads
them all): through the apiserver's routes onto the sim host, with real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.integration.compiler.pipeline_stack import Stack, headers, make_stack

SECRETS = "pipelines.read,pipelines.write,pipelines.run,secrets.write"


def writer(tenant: str = "acme") -> dict[str, str]:
    return headers(tenant, permissions=SECRETS, actor=f"alice@{tenant}")


@pytest.fixture
async def capped(
    db: asyncpg.Pool, database_url: str, settings_factory: Any
) -> AsyncIterator[Stack]:
    async for value in make_stack(
        db, database_url, settings_factory, DATA_SECRETS_MAX_PER_TENANT=2
    ):
        yield value


async def put(stack: Stack, name: str, tenant: str = "acme") -> tuple[int, dict[str, Any]]:
    status, answer = await stack.call(
        "PUT", f"data-secrets/{name}", as_=writer(tenant), json={"data": {"k": name}}
    )
    return status, answer


async def test_a_create_past_the_cap_is_a_409_naming_it_and_a_replace_or_a_delete_is_not(
    capped: Stack,
) -> None:
    assert [(await put(capped, name))[0] for name in ("one", "two")] == [201, 201]
    status, refused = await put(capped, "three")
    assert status == 409, refused
    assert refused["error"] == "conflict"
    assert "at most 2 data secrets" in refused["message"]
    assert "DATA_SECRETS_MAX_PER_TENANT" in refused["message"]
    assert refused["details"] == {"reason": "limit", "secret": "three", "max_per_tenant": 2}
    status, listed = await capped.call("GET", "data-secrets", as_=headers())
    assert [item["name"] for item in listed["items"]] == ["one", "two"]
    row = await capped.pool.fetchrow(
        "SELECT outcome, detail FROM run_actions WHERE name = 'secret/three'"
    )
    assert row is not None
    assert row["outcome"] == "failed"

    # Replacing one at the cap is no new secret; another tenant has its own count.
    assert (await put(capped, "two"))[0] == 200
    assert (await put(capped, "three", tenant="globex"))[0] == 201
    # A delete makes room again.
    status, _ = await capped.call("DELETE", "data-secrets/one", as_=writer())
    assert status == 200
    assert (await put(capped, "three"))[0] == 201


async def test_creates_at_once_never_pass_the_cap_together(capped: Stack) -> None:
    answers = await asyncio.gather(*(put(capped, f"s{index}") for index in range(5)))
    assert sorted(status for status, _ in answers) == [201, 201, 409, 409, 409]
    status, listed = await capped.call("GET", "data-secrets", as_=headers())
    assert (status, listed["total"]) == (200, 2)
