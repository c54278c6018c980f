"""Keyset cursors over HTTP: each is good only for the list, tenant and filters that issued it;
anything else, or an altered one, is a 400 naming ``cursor``."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any

from tests.integration.apiserver.conftest import ADMIN, NOW, Api, headers, record

ACME = headers("acme", permissions="workflows.read,pipelines.read")
GLOBEX = headers("globex", permissions="workflows.read,pipelines.read")


async def add_pipelines(api: Api, tenant: str, *names: str, kind: str = "data") -> list[str]:
    """Pipelines with two versions each, straight into the tables the compiler writes."""
    await api.pool.execute("INSERT INTO tenants (id) VALUES ($1) ON CONFLICT DO NOTHING", tenant)
    ids = []
    for name in names:
        pipeline_id = f"{tenant}{kind}{name}".replace("-", "")
        await api.pool.execute(
            "INSERT INTO pipelines (id, tenant, kind, name, definition_type, current_version, "
            "latest_version, created_by) VALUES ($1, $2, $3, $4, 'yaml', 2, 2, 'a')",
            pipeline_id,
            tenant,
            kind,
            name,
        )
        for version in (1, 2):
            await api.pool.execute(
                "INSERT INTO pipeline_versions (pipeline_id, version, definition, template_name, "
                "template, created_by) VALUES ($1, $2, '{}', $3, '{}', 'a')",
                pipeline_id,
                version,
                f"p-{pipeline_id}-v{version}",
            )
        ids.append(pipeline_id)
    return ids


async def first_cursor(api: Api, path: str, as_: dict[str, str], **params: Any) -> str:
    status, body = await api.get(path, as_=as_, limit="1", **params)
    assert status == 200, body
    assert body["next_cursor"], body
    return str(body["next_cursor"])


async def refused(api: Api, path: str, cursor: str, as_: dict[str, str], **params: Any) -> str:
    status, body = await api.get(path, as_=as_, cursor=cursor, **params)
    assert status == 400, (path, body)
    assert body["error"] == "invalid"
    assert body["details"]["parameter"] == "cursor"
    return str(body["message"])


async def test_a_cursor_continues_only_its_own_list(api: Api) -> None:
    await api.write(*[record(f"run-{i}", started=NOW - timedelta(minutes=i)) for i in range(3)])
    await add_pipelines(api, "acme", "alpha", "beta", "gamma")
    await add_pipelines(api, "acme", "delta", "epsilon", kind="ml")
    runs = await first_cursor(api, "/api/v1/workflows", ACME)
    data = await first_cursor(api, "/api/v1/data-pipelines", ACME)
    ml = await first_cursor(api, "/api/v1/ml-pipelines", ACME)

    message = await refused(api, "/api/v1/data-pipelines", runs, ACME)
    assert "another list" in message
    await refused(api, "/api/v1/workflows", data, ACME)
    await refused(api, "/api/v1/ml-pipelines", data, ACME)
    await refused(api, "/api/v1/data-pipelines", ml, ACME)
    await refused(api, "/api/v1/data-pipelines", data, ACME, q="a")  # other filters

    status, body = await api.get("/api/v1/data-pipelines", as_=ACME, cursor=data, limit="1")
    assert status == 200
    assert [item["name"] for item in body["items"]] == ["beta"]


async def test_a_cursor_of_one_pipelines_versions_does_not_continue_anothers(api: Api) -> None:
    first, second = await add_pipelines(api, "acme", "alpha", "beta")
    cursor = await first_cursor(api, f"/api/v1/data-pipelines/{first}/versions", ACME)
    await refused(api, f"/api/v1/data-pipelines/{second}/versions", cursor, ACME)
    status, body = await api.get(
        f"/api/v1/data-pipelines/{first}/versions", as_=ACME, cursor=cursor, limit="1"
    )
    assert status == 200
    assert [item["version"] for item in body["items"]] == [1]


async def test_a_cursor_of_tenant_a_is_refused_for_tenant_b(api: Api) -> None:
    await api.write(
        *[record(f"acme-{i}", started=NOW - timedelta(minutes=i)) for i in range(3)],
        *[record(f"globex-{i}", tenant="globex") for i in range(3)],
    )
    await add_pipelines(api, "acme", "alpha", "beta")
    await add_pipelines(api, "globex", "alpha", "beta")
    acting = {"acting_tenant": "globex"}
    for path in ("/api/v1/workflows", "/api/v1/data-pipelines"):
        cursor = await first_cursor(api, path, ACME)
        message = await refused(api, path, cursor, GLOBEX)
        assert "tenant" in message
        await refused(api, path, cursor, ADMIN)  # every tenant's list is another list
        await refused(api, path, cursor, ADMIN, **acting)
        admin_cursor = await first_cursor(api, path, ADMIN)
        await refused(api, path, admin_cursor, ACME)


async def test_an_altered_cursor_is_refused(api: Api) -> None:
    await api.write(*[record(f"run-{i}", started=NOW - timedelta(minutes=i)) for i in range(3)])
    await add_pipelines(api, "acme", "alpha", "beta")
    for path in ("/api/v1/workflows", "/api/v1/data-pipelines"):
        cursor = await first_cursor(api, path, ACME)
        payload, mac = cursor.split(".")
        position = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        position[-1] = position[-1] + 1 if isinstance(position[-1], int) else "a" + position[-1]
        forged = base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")
        assert "altered" in await refused(api, path, f"{forged}.{mac}", ACME)
        for tampered in (payload, f"{payload}.", "x" + cursor, cursor + "x"):
            await refused(api, path, tampered, ACME)


async def test_every_list_refuses_a_limit_that_is_not_an_ascii_integer(api: Api) -> None:
    """One page rule for every list: "²" passes str.isdigit but not int() (a 500 before)."""
    first, _ = await add_pipelines(api, "acme", "a", "b")
    for path in (
        "/api/v1/workflows",
        "/api/v1/data-pipelines",
        f"/api/v1/data-pipelines/{first}/versions",
    ):
        for limit in ("²", "0", "501"):
            status, body = await api.get(path, as_=ACME, limit=limit)
            assert (status, body["details"]["parameter"]) == (400, "limit"), (path, limit)
