"""The compiler holds one PostgreSQL connection per operation: on a pool of a single connection
every save, data-secret write and refusal still completes (it waited forever on a second one
while holding the first: a save read the tenant's provisioning state, a data-secret create
counted the secrets, a refusal wrote its audit row, each on another connection), and as many
concurrent saves as connections never wait on each other. Through the apiserver's routes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import asyncpg
import pytest

from shared.db.pool import create_pool
from tests.integration.compiler.pipeline_stack import Stack, body, headers, make_stack

T = TypeVar("T")
SECRETS = "pipelines.read,pipelines.write,pipelines.run,secrets.write"
WRITER = headers(permissions=SECRETS)
# Not a timing claim: an operation waiting for a connection nobody will give back never
# returns, and this turns that into a failure instead of a stuck suite.
HUNG = 30.0


async def settled(call: Awaitable[T]) -> T:
    return await asyncio.wait_for(call, HUNG)


@pytest.fixture(params=[1, 2], ids=["one-connection", "two-connections"])
async def narrow(
    request: pytest.FixtureRequest, db: asyncpg.Pool, database_url: str, settings_factory: Any
) -> AsyncIterator[Stack]:
    pool = await create_pool(database_url, min_size=1, max_size=request.param)
    try:
        async for value in make_stack(
            db, database_url, settings_factory, compiler_pool=pool, DATA_SECRETS_MAX_PER_TENANT=2
        ):
            yield value
    finally:
        await pool.close()


def uses_secret(name: str) -> dict[str, Any]:
    spec = body(name)
    step = spec["definition"]["spec"]["steps"][1]
    step["env"] = [{"name": "TOKEN", "from_secret": {"name": "creds", "key": "token"}}]
    return spec


async def test_every_write_completes_on_the_pools_connections(narrow: Stack) -> None:
    put = {"data": {"token": "s3cr3t"}}
    created = await settled(narrow.call("PUT", "data-secrets/creds", as_=WRITER, json=put))
    assert created[0] == 201, created
    replaced = await settled(narrow.call("PUT", "data-secrets/creds", as_=WRITER, json=put))
    assert replaced[0] == 200, replaced
    assert (await settled(narrow.call("PUT", "data-secrets/other", as_=WRITER, json=put)))[0] == 201
    # Past the cap: refused and audited.
    capped = await settled(narrow.call("PUT", "data-secrets/third", as_=WRITER, json=put))
    assert capped[0] == 409, capped

    # Saves that read the tenant's data secrets, at once.
    saves = await settled(
        asyncio.gather(
            *(
                narrow.call("POST", "data-pipelines", as_=WRITER, json=uses_secret(f"p{index}"))
                for index in range(4)
            )
        )
    )
    assert [status for status, _ in saves] == [201] * 4, saves
    pipeline = saves[0][1]["id"]
    updated = await settled(
        narrow.call("PUT", f"data-pipelines/{pipeline}", as_=WRITER, json=uses_secret("p0"))
    )
    assert updated[0] == 200, updated

    # A delete refused because a pipeline uses the secret, and one that goes through.
    refused = await settled(narrow.call("DELETE", "data-secrets/creds", as_=WRITER))
    assert refused[0] == 409, refused
    deleted = await settled(narrow.call("DELETE", "data-secrets/other", as_=WRITER))
    assert deleted[0] == 200, deleted

    outcomes = await narrow.pool.fetch(
        "SELECT name, action, outcome FROM run_actions WHERE name LIKE 'secret/%' ORDER BY id"
    )
    assert [(r["name"], r["action"], r["outcome"]) for r in outcomes] == [
        ("secret/creds", "data_secret.create", "succeeded"),
        ("secret/creds", "data_secret.replace", "succeeded"),
        ("secret/other", "data_secret.create", "succeeded"),
        ("secret/third", "data_secret.create", "failed"),
        ("secret/creds", "data_secret.delete", "failed"),
        ("secret/other", "data_secret.delete", "succeeded"),
    ]
