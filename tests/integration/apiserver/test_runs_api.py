"""Auth, errors, the run list with every filter, the summary, the detail, clusters, grants and
the refresh relay, against real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg

from shared.runs import RunPhase, RunSource
from tests.integration.apiserver.conftest import (
    ADMIN,
    API_KEY,
    NOW,
    Api,
    add_cluster,
    headers,
    record,
)

# --- auth and errors ----------------------------------------------------------------------


async def test_every_request_needs_the_key(api: Api) -> None:
    for path in ("/api/v1/workflows", "/api/v1/no-such-route", "/internal/v1/clusters/refresh"):
        for key in (None, "wrong"):
            response = await api.client.get(path, headers=headers(key=key))
            assert response.status == 401, path
            body = await response.json()
            assert body["error"] == "unauthorized"
            assert set(body) == {"error", "message", "details"}


async def test_no_key_configured_refuses_everything(make_api, db) -> None:  # type: ignore[no-untyped-def]
    from apiserver.app import create_app

    api = await make_api()
    app = create_app(api.services, api.hub, api_key=None)
    from aiohttp.test_utils import TestClient, TestServer

    async with TestClient(TestServer(app)) as client:
        response = await client.get("/api/v1/workflows", headers=headers(key=""))
        assert response.status == 401


async def test_identity_rules(api: Api) -> None:
    status, body = await api.get("/api/v1/workflows", as_=headers(None))
    assert status == 403
    assert "without a tenant" in body["message"]
    status, body = await api.get("/api/v1/workflows", as_=headers(permissions="pipelines.read"))
    assert status == 403
    assert body["details"] == {"permission": "workflows.read"}
    status, body = await api.get("/api/v1/workflows", acting_tenant="globex")
    assert status == 403
    assert body["details"]["parameter"] == "acting_tenant"
    status, body = await api.get("/api/v1/workflows", as_=headers("Not A Tenant!"))
    assert status == 400
    status, _ = await api.get("/api/v1/access-grants")
    assert status == 403
    status, body = await api.get("/api/v1/no-such-route")
    assert status == 404
    assert body["error"] == "not_found"
    response = await api.client.delete("/api/v1/workflows", headers=headers())
    assert response.status == 405
    assert (await response.json())["error"] == "method_not_allowed"


async def test_database_down_is_503(make_api) -> None:  # type: ignore[no-untyped-def]
    # A pool on a port where nothing listens: PostgreSQL is "down" for every query.
    down = await asyncpg.create_pool("postgresql://postgres@127.0.0.1:1/x", min_size=0)
    api = await make_api(pool=down)
    status, body = await api.get("/api/v1/workflows")
    assert status == 503
    assert body["error"] == "dependency_unavailable"
    assert "Traceback" not in str(body)


# --- the list -----------------------------------------------------------------------------


async def _fleet(api: Api) -> None:
    await api.write(
        record(
            "etl-1",
            template="etl",
            phase=RunPhase.FAILED,
            started=NOW - timedelta(hours=1),
            finished=NOW - timedelta(minutes=30),
        ),
        record("etl-2", template="etl", phase=RunPhase.RUNNING, started=NOW - timedelta(hours=2)),
        record(
            "train-1",
            template="train",
            pipeline="p-7",
            source=RunSource.ML_PIPELINE,
            phase=RunPhase.SUCCEEDED,
            started=NOW - timedelta(hours=3),
        ),
        record("pending-1", phase=RunPhase.PENDING, started=None),
        record(
            "other-1",
            tenant="globex",
            cluster="c2",
            region="us-east-1",
            provider="gcp",
            phase=RunPhase.ERROR,
            started=NOW - timedelta(hours=4),
            finished=NOW - timedelta(hours=3),
        ),
        record(
            "shared-1",
            tenant=None,
            namespace="argo",
            cluster="c2",
            region="us-east-1",
            provider="gcp",
            source=RunSource.CICD,
            started=NOW - timedelta(days=2),
        ),
        record(
            "old-fail",
            phase=RunPhase.FAILED,
            started=NOW - timedelta(days=3),
            finished=NOW - timedelta(days=2),
        ),
    )


def names(body: dict) -> list[str]:  # type: ignore[type-arg]
    return [item["name"] for item in body["items"]]


async def test_tenant_sees_only_its_runs_newest_first(api: Api) -> None:
    await _fleet(api)
    status, body = await api.get("/api/v1/workflows")
    assert status == 200
    assert names(body) == ["etl-1", "etl-2", "train-1", "old-fail", "pending-1"] or names(body) == [
        "pending-1",
        "etl-1",
        "etl-2",
        "train-1",
        "old-fail",
    ]
    assert body["total"] == 5
    assert body["total_capped"] is False
    assert body["next_cursor"] is None
    item = body["items"][0]
    assert item["cluster"]["id"] == "c1"
    assert item["tenant"] == "acme"


async def test_every_filter(api: Api) -> None:
    await _fleet(api)
    cases = {
        (("phase", "Failed"),): ["etl-1", "old-fail"],
        (("phase", "failed,running"),): ["etl-1", "etl-2", "old-fail"],
        (("template", "etl"),): ["etl-1", "etl-2"],
        (("pipeline", "p-7"),): ["train-1"],
        (("source", "ml_pipeline"),): ["train-1"],
        (("q", "TRAIN"),): ["train-1"],
        (("q", "p-7"),): ["train-1"],
        (("cluster", "c1"), ("phase", "Running")): ["etl-2"],
        (("region", "eu-west-1"), ("template", "train")): ["train-1"],
        (("provider", "aws"), ("phase", "Pending")): ["pending-1"],
        (("namespace", "kubeopera-data-acme"), ("template", "etl")): ["etl-1", "etl-2"],
        (("started_after", "2025-03-14T09:30:00Z"),): ["etl-1", "etl-2", "pending-1"],
        (
            ("started_after", "2025-03-14T09:30:00Z"),
            ("started_before", "2025-03-14T10:30:00+00:00"),
        ): ["etl-2"],
        (("cluster", "c2"),): [],
    }
    for params, expected in cases.items():
        status, body = await api.get("/api/v1/workflows", **dict(params))
        assert status == 200, params
        assert sorted(names(body)) == sorted(expected), params
        assert body["total"] == len(expected), params


async def test_bad_filters_are_400_naming_the_parameter(api: Api) -> None:
    for params, parameter in (
        ({"phase": "Exploded"}, "phase"),
        ({"source": "fax"}, "source"),
        ({"started_after": "yesterday"}, "started_after"),
        ({"started_after": "2025-03-14T10:00:00"}, "started_after"),
        (
            {"started_after": "2025-03-14T10:00:00Z", "started_before": "2025-03-14T09:00:00Z"},
            "started_before",
        ),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"colour": "blue"}, "colour"),
        ({"q": ""}, "q"),
    ):
        status, body = await api.get("/api/v1/workflows", **params)
        assert status == 400, params
        assert body["error"] == "invalid"
        assert body["details"]["parameter"] == parameter, params


async def test_keyset_pagination_walks_every_row_once(api: Api) -> None:
    await api.write(
        *[record(f"run-{i:03d}", started=NOW - timedelta(minutes=i // 3)) for i in range(23)]
    )
    for order in ("desc", "asc"):
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": "5", "order": order}
            if cursor:
                params["cursor"] = cursor
            status, body = await api.get("/api/v1/workflows", **params)
            assert status == 200
            assert body["total"] == 23
            seen += names(body)
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(f"run-{i:03d}" for i in range(23))
        assert len(seen) == 23
    # A cursor belongs to its filters.
    _, body = await api.get("/api/v1/workflows", limit="5")
    status, body = await api.get(
        "/api/v1/workflows", limit="5", phase="Failed", cursor=body["next_cursor"]
    )
    assert status == 400
    assert body["details"]["parameter"] == "cursor"


async def test_total_is_capped_for_huge_lists(make_api) -> None:  # type: ignore[no-untyped-def]
    api = await make_api()
    api.services.runs._cap = 3
    await api.write(*[record(f"r{i}") for i in range(5)])
    _, body = await api.get("/api/v1/workflows", limit="2")
    assert body["total"] == 3
    assert body["total_capped"] is True


async def test_admin_sees_everything_and_acts_for_a_tenant(api: Api) -> None:
    await _fleet(api)
    _, body = await api.get("/api/v1/workflows", as_=ADMIN)
    assert body["total"] == 7
    _, body = await api.get("/api/v1/workflows", as_=ADMIN, acting_tenant="globex")
    assert names(body) == ["other-1"]


async def test_access_grants_widen_the_view(api: Api) -> None:
    await _fleet(api)
    response = await api.client.post(
        "/api/v1/access-grants",
        headers=ADMIN,
        json={"tenant": "acme", "cluster_id": "c2", "namespace": "argo"},
    )
    assert response.status == 201
    grant = await response.json()
    assert grant["granted_by"] == "root"
    _, body = await api.get("/api/v1/workflows", cluster="c2")
    assert names(body) == ["shared-1"]
    status, _ = await api.get("/api/v1/workflows/c2/argo/shared-1")
    assert status == 200
    # Another tenant's namespace on the same cluster stays invisible.
    status, _ = await api.get("/api/v1/workflows/c2/kubeopera-data-globex/other-1")
    assert status == 404
    # Duplicate, unknown cluster, bad body.
    response = await api.client.post(
        "/api/v1/access-grants",
        headers=ADMIN,
        json={"tenant": "acme", "cluster_id": "c2", "namespace": "argo"},
    )
    assert response.status == 409
    response = await api.client.post(
        "/api/v1/access-grants",
        headers=ADMIN,
        json={"tenant": "acme", "cluster_id": "nope", "namespace": "argo"},
    )
    assert response.status == 404
    response = await api.client.post(
        "/api/v1/access-grants", headers=ADMIN, json={"tenant": "acme"}
    )
    assert response.status == 400
    assert (await response.json())["details"]["parameter"] == "cluster_id"
    status, body = await api.get("/api/v1/access-grants", as_=ADMIN, tenant="acme")
    assert status == 200
    assert [g["namespace"] for g in body["items"]] == ["argo"]
    response = await api.client.delete(
        "/api/v1/access-grants", headers=ADMIN, params={"id": str(grant["id"])}
    )
    assert response.status == 200
    _, body = await api.get("/api/v1/workflows", cluster="c2")
    assert names(body) == []
    response = await api.client.delete(
        "/api/v1/access-grants", headers=ADMIN, params={"id": str(grant["id"])}
    )
    assert response.status == 404


async def test_summary(api: Api) -> None:
    await _fleet(api)
    status, body = await api.get("/api/v1/workflows/summary")
    assert status == 200
    assert body["phases"]["Failed"] == 2
    assert body["phases"]["Running"] == 1
    assert body["phases"]["Unknown"] == 0
    assert body["total"] == 5
    assert body["failures_last_24h"] == 1  # etl-1; old-fail finished two days ago
    _, body = await api.get("/api/v1/workflows/summary", as_=ADMIN)
    assert body["failures_last_24h"] == 2
    assert body["total"] == 7
    status, body = await api.get("/api/v1/workflows/summary", phase="nope")
    assert status == 400
    assert body["details"]["parameter"] == "phase"


async def test_detail_with_graph_and_actions(api: Api) -> None:
    graph = {
        "nodes": [{"id": "n1", "name": "etl-1", "type": "DAG", "phase": "Failed"}],
        "node_count": 1,
        "truncated": False,
    }
    await api.write(record("etl-1", graph=graph, parameters={"date": "2025-01-01"}))
    await api.pool.execute(
        "INSERT INTO run_actions (cluster_id, namespace, name, actor, action, outcome) "
        "VALUES ('c1', 'kubeopera-data-acme', 'etl-1', 'bob', 'retry', 'succeeded')"
    )
    status, body = await api.get("/api/v1/workflows/c1/kubeopera-data-acme/etl-1")
    assert status == 200
    assert body["graph"]["nodes"][0]["id"] == "n1"
    assert body["parameters"] == {"date": "2025-01-01"}
    assert [a["action"] for a in body["actions"]] == ["retry"]
    status, body = await api.get("/api/v1/workflows/nope/kubeopera-data-acme/etl-1")
    assert status == 404
    assert body["details"] == {"cluster": "nope"}
    status, _ = await api.get("/api/v1/workflows/c1/kubeopera-data-acme/missing")
    assert status == 404


async def test_clusters_and_refresh(api: Api, database_url: str) -> None:
    await add_cluster(api.pool, "c1")
    await add_cluster(api.pool, "c9", reachable=False)
    status, body = await api.get("/api/v1/workflow-clusters")
    assert status == 200
    by_id = {c["id"]: c for c in body["items"]}
    assert by_id["c1"]["argo"]["reachable"] is True
    assert by_id["c1"]["argo"]["version"] == "v3.6.2"
    assert by_id["c9"]["argo"]["reachable"] is False
    listener = await asyncpg.connect(database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("cluster_refresh", lambda *args: heard.put_nowait(args[2]))
    try:
        response = await api.client.post(
            "/internal/v1/clusters/refresh", headers={"X-API-Key": API_KEY}
        )
        assert response.status == 202
        assert await asyncio.wait_for(heard.get(), 5) == "cluster_refresh"
    finally:
        await listener.close()


async def test_requests_are_counted_by_route_template_and_status(api: Api) -> None:
    from prometheus_client import REGISTRY

    def count(route: str, status: str) -> float:
        labels = {"method": "GET", "route": route, "status": status}
        return REGISTRY.get_sample_value("wm_api_requests_total", labels) or 0.0

    detail = "/api/v1/workflows/{cluster}/{ns}/{name}"
    before = (count("/api/v1/workflows", "200"), count(detail, "404"), count("unmatched", "401"))
    assert (await api.get("/api/v1/workflows"))[0] == 200
    assert (await api.get("/api/v1/workflows/c-x/ns/missing"))[0] == 404
    await api.client.get("/api/v1/no-such-route", headers=headers(key=None))
    after = (count("/api/v1/workflows", "200"), count(detail, "404"), count("unmatched", "401"))
    assert [b - a for a, b in zip(before, after, strict=True)] == [1.0, 1.0, 1.0]
    latency = REGISTRY.get_sample_value(
        "wm_api_request_seconds_count", {"method": "GET", "route": "/api/v1/workflows"}
    )
    assert latency is not None
    assert latency >= 1
