"""Tenant isolation over every route, and the OpenAPI document matching the routes."""

from __future__ import annotations

import asyncio

from apiserver.app import route_specs
from apiserver.routing import API_PREFIX
from tests.integration.apiserver.conftest import ADMIN, API_KEY, Api, headers, record
from tests.integration.apiserver.sse import events

ACME_RUN = "/api/v1/workflows/c1/kubeopera-data-acme/acme-run"
EXPECTED: dict[tuple[str, str], tuple[str, int]] = {
    # (method, route path) -> (the path tenant globex calls, the status it must get)
    ("GET", "/api/v1/workflows"): ("/api/v1/workflows", 200),
    ("GET", "/api/v1/workflows/summary"): ("/api/v1/workflows/summary", 200),
    ("GET", "/api/v1/workflows/stream"): ("/api/v1/workflows/stream", 200),
    ("GET", "/api/v1/workflows/{cluster}/{ns}/{name}"): (ACME_RUN, 404),
    ("GET", "/api/v1/workflows/{cluster}/{ns}/{name}/logs/{node}"): (f"{ACME_RUN}/logs/n1", 404),
    ("GET", "/api/v1/workflows/{cluster}/{ns}/{name}/artifacts/{node}/{artifact}"): (
        f"{ACME_RUN}/artifacts/n1/out",
        404,
    ),
    ("POST", "/api/v1/workflows/{cluster}/{ns}/{name}/stop"): (f"{ACME_RUN}/stop", 404),
    ("POST", "/api/v1/workflows/{cluster}/{ns}/{name}/terminate"): (f"{ACME_RUN}/terminate", 404),
    ("POST", "/api/v1/workflows/{cluster}/{ns}/{name}/retry"): (f"{ACME_RUN}/retry", 404),
    ("POST", "/api/v1/workflow-templates/{cluster}/{ns}/{template}/submit"): (
        "/api/v1/workflow-templates/c1/kubeopera-data-acme/etl/submit",
        404,
    ),
    ("GET", "/api/v1/workflow-clusters"): ("/api/v1/workflow-clusters", 200),
    ("GET", "/api/v1/access-grants"): ("/api/v1/access-grants", 403),
    ("POST", "/api/v1/access-grants"): ("/api/v1/access-grants", 403),
    ("DELETE", "/api/v1/access-grants"): ("/api/v1/access-grants?id=1", 403),
    ("POST", "/internal/v1/clusters/refresh"): ("/internal/v1/clusters/refresh", 202),
    ("GET", "/api/v1/openapi.json"): ("/api/v1/openapi.json", 200),
}
# Pipelines: globex may read pipelines but not write or run them here (the compiler's own
# tenant checks on writes are tested with a real compiler in tests/integration/compiler).
ACME_PIPELINE = "acmerun"
for _kind in ("data-pipelines", "ml-pipelines"):
    _base = f"/api/v1/{_kind}"
    _item = f"{_base}/{ACME_PIPELINE}"
    EXPECTED |= {
        ("GET", _base): (_base, 200),
        ("POST", _base): (_base, 403),
        ("POST", f"{_base}/validate"): (f"{_base}/validate", 403),
        ("GET", f"{_base}/{{id}}"): (_item, 404),
        ("PUT", f"{_base}/{{id}}"): (_item, 403),
        ("DELETE", f"{_base}/{{id}}"): (_item, 403),
        ("GET", f"{_base}/{{id}}/versions"): (f"{_item}/versions", 404),
        ("POST", f"{_base}/{{id}}/rollback"): (f"{_item}/rollback", 403),
        ("POST", f"{_base}/{{id}}/run"): (f"{_item}/run", 403),
        ("POST", f"{_base}/{{id}}/schedule/pause"): (f"{_item}/schedule/pause", 403),
        ("POST", f"{_base}/{{id}}/schedule/resume"): (f"{_item}/schedule/resume", 403),
        # A webhook's token is a credential: pipelines.write, which globex lacks here.
        ("GET", f"{_base}/{{id}}/triggers/{{trigger}}/webhook"): (
            f"{_item}/triggers/on-upload/webhook",
            403,
        ),
        ("POST", f"{_base}/{{id}}/triggers/{{trigger}}/webhook/rotate"): (
            f"{_item}/triggers/on-upload/webhook/rotate",
            403,
        ),
        ("POST", f"{_base}/{{id}}/sync"): (f"{_item}/sync", 403),
    }
# Data secrets: globex (pipelines.read) may not write them; reads go to the compiler, absent
# here (503); the compiler only ever looks in the caller's own namespace, which
# tests/integration/compiler/test_data_secrets.py shows with a real compiler.
EXPECTED |= {
    ("GET", "/api/v1/data-secrets"): ("/api/v1/data-secrets", 503),
    ("GET", "/api/v1/data-secrets/{secret}"): ("/api/v1/data-secrets/warehouse", 503),
    ("PUT", "/api/v1/data-secrets/{secret}"): ("/api/v1/data-secrets/warehouse", 403),
    ("DELETE", "/api/v1/data-secrets/{secret}"): ("/api/v1/data-secrets/warehouse", 403),
}
# Models and tracking: globex holds every models and tracking permission, and reaches nothing
# of acme's (the tracking routes would answer 503 if they asked MLflow, which is not wired in).
ACME_MODEL = "/api/v1/models/acmemodel"
ACME_TRACKING = f"/api/v1/ml-tracking/{ACME_PIPELINE}ml/runs"
EXPECTED |= {
    ("GET", "/api/v1/models"): ("/api/v1/models", 200),
    ("GET", "/api/v1/models/{model}"): (ACME_MODEL, 404),
    ("GET", "/api/v1/models/{model}/versions/{v}/files/{file}"): (
        f"{ACME_MODEL}/versions/1/files/lineage.json",
        404,
    ),
    ("POST", "/api/v1/models/{model}/versions/{v}/archive"): (
        f"{ACME_MODEL}/versions/1/archive",
        404,
    ),
    ("POST", "/api/v1/models/{model}/versions/{v}/promote"): (
        f"{ACME_MODEL}/versions/1/promote",
        404,
    ),
    ("POST", "/api/v1/models/{model}/rollback"): (f"{ACME_MODEL}/rollback", 404),
    ("GET", "/api/v1/models/{model}/deployments/{env}/endpoint"): (
        f"{ACME_MODEL}/deployments/production/endpoint",
        404,
    ),
    ("POST", "/api/v1/models/{model}/approvals/{run}/approve"): (
        f"{ACME_MODEL}/approvals/acme-run/approve",
        404,
    ),
    ("POST", "/api/v1/models/{model}/approvals/{run}/reject"): (
        f"{ACME_MODEL}/approvals/acme-run/reject",
        404,
    ),
    ("GET", "/api/v1/ml-tracking/{pipeline}/runs"): (ACME_TRACKING, 404),
    ("GET", "/api/v1/ml-tracking/{pipeline}/runs/{run}/metrics/{key}"): (
        f"{ACME_TRACKING}/acme-run/metrics/loss",
        404,
    ),
}


async def _acme_models(api: Api) -> None:
    """A model of acme's named like its run, a version, a pending approval, an experiment."""
    await api.pool.execute(
        "INSERT INTO models (id, tenant, name) VALUES ('acmemodel', 'acme', 'acme-run')"
    )
    await api.pool.execute(
        "INSERT INTO model_versions (model_id, number, cluster_id, run_namespace, run_name, "
        "run_uid, pipeline_id, pipeline_version, prefix, model_file, scorecard, lineage, state) "
        "VALUES ('acmemodel', 1, 'c1', 'kubeopera-data-acme', 'acme-run', 'uid-acme-run', $1, "
        "1, 'tenants/acme/models/acme-run/1/', 'model.tgz', '{}', '{}', 'passed')",
        f"{ACME_PIPELINE}ml",
    )
    await api.pool.execute(
        "INSERT INTO approvals (run_uid, model_id, version, cluster_id, run_namespace, run_name, "
        "expires_at) VALUES ('uid-acme-run', 'acmemodel', 1, 'c1', 'kubeopera-data-acme', "
        "'acme-run', now() + interval '1 day')"
    )
    await api.pool.execute(
        "INSERT INTO ml_experiments (pipeline_id, tenant, experiment_id, name) "
        "VALUES ($1, 'acme', '1', 'acme/' || $1)",
        f"{ACME_PIPELINE}ml",
    )


async def _acme_pipelines(api: Api) -> None:
    await api.pool.execute("INSERT INTO tenants (id) VALUES ('acme')")
    for kind in ("data", "ml"):
        pipeline_id = ACME_PIPELINE if kind == "data" else f"{ACME_PIPELINE}ml"
        await api.pool.execute(
            "INSERT INTO pipelines (id, tenant, kind, name, definition_type, current_version, "
            "latest_version, created_by) VALUES ($1, 'acme', $2, 'acme-run', 'yaml', 1, 1, 'a')",
            pipeline_id,
            kind,
        )
        await api.pool.execute(
            "INSERT INTO pipeline_versions (pipeline_id, version, definition, template_name, "
            "template, created_by) VALUES ($1, 1, '{}', 'p-acme-run-v1', '{}', 'a')",
            pipeline_id,
        )


async def test_tenant_a_never_reaches_tenant_b(api: Api) -> None:
    graph = {
        "nodes": [
            {
                "id": "n1",
                "name": "acme-run.step",
                "type": "Pod",
                "phase": "Succeeded",
                "podName": "acme-run-step-1",
                "outputs": {
                    "artifacts": [
                        {
                            "name": "out",
                            "location": {
                                "kind": "s3",
                                "bucket": "b",
                                "key": "tenants/acme/artifacts/acme-run/out.tgz",
                            },
                        }
                    ]
                },
            }
        ]
    }
    await api.write(record("acme-run", graph=graph, template="etl"))
    await _acme_pipelines(api)
    await _acme_models(api)
    routes = {(spec.method, spec.path) for spec in route_specs()}
    assert routes == set(EXPECTED), "a route without an isolation expectation"
    globex = headers(
        "globex",
        permissions="workflows.read,workflows.act,pipelines.read,"
        "models.read,models.approve,models.deploy,tracking.read",
    )
    for (method, _), (path, status) in EXPECTED.items():
        if path.endswith("/stream"):
            async with api.client.get(path, headers=globex) as response:
                assert response.status == 200
                stream = events(response)
                await anext(stream)  # ready
                await api.write(record("acme-run-2"))
                # The next event globex could see would be its own; acme's never arrives.
                await api.write(record("globex-run", tenant="globex"))
                event = await asyncio.wait_for(anext(stream), 5)
                assert event.data["name"] == "globex-run"
            continue
        response = await api.client.request(method, path, headers=globex, json={})
        assert response.status == status, (method, path, await response.text())
        body = await response.text()
        if status == 200 and not path.endswith("openapi.json"):
            assert "acme-run" not in body, (method, path)
        if status == 404:
            # Indistinguishable from a run that does not exist at all (the answer only echoes
            # the name asked for).
            missing = path.replace("acme-run", "no-such-run")
            other = await api.client.request(method, missing, headers=globex, json={})
            assert other.status == 404
            assert (await other.text()).replace("no-such-run", "acme-run") == body
    # And nothing of acme's was decided or archived on the way.
    assert await api.pool.fetchval("SELECT state FROM approvals") == "pending"
    assert await api.pool.fetchval("SELECT state FROM model_versions") == "passed"
    assert await api.pool.fetchval("SELECT count(*) FROM model_deployments") == 0


async def test_openapi_matches_the_routes(api: Api) -> None:
    status, doc = await api.get("/api/v1/openapi.json", as_={"X-API-Key": API_KEY})
    assert status == 200
    assert doc["openapi"].startswith("3.")
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    served = {
        (route.method, route.resource.canonical)
        for route in api.client.server.app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    assert documented == served
    for path, ops in doc["paths"].items():
        for op in ops.values():
            placeholders = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert placeholders == set(__import__("re").findall(r"{([^}]+)}", path))
            for response in op["responses"].values():
                for media in response.get("content", {}).values():
                    ref = media["schema"]["$ref"].rsplit("/", 1)[-1]
                    assert ref in doc["components"]["schemas"]
    assert any(p.startswith(API_PREFIX) for p in doc["paths"])
    status, _ = await api.get("/api/v1/openapi.json", as_=ADMIN)
    assert status == 200
