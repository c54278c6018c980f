"""The deploy stage end to end on the sim host: a release with ``serving`` is registered,
gated, deployed to staging through the deployment reconciler (the tenant's serving namespace,
the model reader's key, the InferenceService and its route, the first token), served by the
KServe stand-in's model server, and only then asks for approval."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from shared.db.inference_tokens import TokenStore
from shared.inference_tokens import hash_matches, parse_token
from shared.token_sealing import parse_key, unseal
from sim.serving.controller import ServingConfig, ServingSimulator
from sim.serving.credentials import S3Config
from sim.serving.model import model_file
from tests.integration.compiler.pipeline_stack import headers
from tests.integration.stagectl.release_stack import (
    DEPLOYMENT_TOKEN_KEY,
    ReleaseStack,
    eventually,
    running_controller,
)
from tests.integration.stagectl.test_stages import finished, outputs_of, waiting_for_approval

KEY = DEPLOYMENT_TOKEN_KEY
DOMAIN = "models.example.com"
SERVE_NS = "kubeopera-serve-acme"
SERVING = {"model_format": {"name": "sklearn"}, "readiness_deadline_seconds": 30}
MODEL = model_file([1.0, 2.0]).decode()


def serving_settings(moto: str) -> dict[str, Any]:
    return {
        "ML_SERVING_DOMAIN": DOMAIN,
        "ARTIFACT_IAM_USER_PATH": "/kubeopera/tenants/",
        "ARTIFACT_IAM_USER_PREFIX": "wm-",
        "ARTIFACT_IAM_BOUNDARY_ARN": "arn:aws:iam::123456789012:policy/kubeopera-tenants",
        "IAM_ENDPOINT_URL": moto,
        "STAGE_DEPLOY_POLL": 0.1,
    }


@pytest.fixture
async def serving(release_stack: ReleaseStack) -> AsyncIterator[ServingSimulator]:
    simulator = ServingSimulator(
        release_stack.stack.world.host.store,
        config=ServingConfig(s3=S3Config(endpoint=release_stack.moto)),
        tick=0.02,
        seed=3,
    )
    await simulator.start()
    try:
        yield simulator
    finally:
        await simulator.stop()


@pytest.fixture
async def deploying(
    release_stack: ReleaseStack, serving: ServingSimulator
) -> AsyncIterator[ReleaseStack]:
    async with running_controller(release_stack, **serving_settings(release_stack.moto)):
        yield release_stack


def isvc(stack: ReleaseStack, name: str) -> dict[str, Any] | None:
    store = stack.stack.world.host.store
    rtype = store.resolve("serving.kserve.io", "v1beta1", "inferenceservices")
    items, _ = store.list(rtype, SERVE_NS)
    return next((i for i in items if i["metadata"]["name"] == name), None)


async def predict(gateway: str, host: str) -> float:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway}/v1/models/churn-staging:predict",
            json={"instances": [[1, 1]]},
            headers={"Host": host},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        body = await response.json()
    return float(body["predictions"][0])


async def test_a_release_deploys_to_staging_before_it_asks_for_approval(
    deploying: ReleaseStack, serving: ServingSimulator
) -> None:
    pipeline = await deploying.save(approval=True, serving=SERVING, model=MODEL)
    name = await deploying.run(pipeline)
    uid = await waiting_for_approval(deploying, name)
    deploy = deploying.node(name, "wm-deploy")
    url = f"https://churn-staging.acme.{DOMAIN}"
    assert outputs_of(deploy) == {"url": url}
    assert deploy is not None
    assert deploy["phase"] == "Succeeded"

    row = await deploying.pool.fetchrow("SELECT * FROM model_deployments")
    assert (row["environment"], row["version"], row["state"], row["url"]) == (
        "staging",
        1,
        "ready",
        url,
    )
    history = await deploying.pool.fetch("SELECT * FROM model_deployment_history")
    assert [(h["action"], h["version"], h["run_uid"]) for h in history] == [("deploy", 1, uid)]

    # The InferenceService serves the registered model file, cluster-local, as the reader.
    served = isvc(deploying, "churn-staging")
    assert served is not None
    predictor = served["spec"]["predictor"]
    assert predictor["model"]["storageUri"].endswith("/tenants/acme/models/churn/1/model.tgz")
    assert predictor["serviceAccountName"] == "kubeopera-model-reader"
    assert served["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    host = "churn-staging-predictor.kubeopera-serve-acme.svc.cluster.local"
    assert await predict(serving.gateway.url, host) == 3.0

    # The first token: its hash in the token store, the token itself sealed, and it checks.
    sealed = bytes(row["token_sealed"])
    token = unseal(sealed, key=parse_key(KEY), model_id=row["model_id"], environment="staging")
    assert token.encode() not in sealed
    parsed = parse_token(token)
    assert parsed is not None
    record = await TokenStore(deploying.pool).lookup(parsed[0])
    assert record is not None
    assert hash_matches(parsed[0], parsed[1], record.secret_hash)
    assert (record.deployment.model, record.deployment.environment) == ("churn", "staging")

    # Approval comes after deploy, and the release goes on as before.
    actions = await deploying.pool.fetch(
        "SELECT action FROM run_actions WHERE run_uid = $1 ORDER BY id", uid
    )
    assert [a["action"] for a in actions][:3] == ["stage_register", "stage_gate", "stage_deploy"]


async def test_a_model_that_cannot_load_fails_the_deploy_stage_with_kserves_message(
    deploying: ReleaseStack,
) -> None:
    pipeline = await deploying.save(approval=True, serving=SERVING, model="not a model")
    name = await deploying.run(pipeline)
    assert await finished(deploying, name) == "Failed"
    deploy = deploying.node(name, "wm-deploy")
    assert deploy is not None
    assert deploy["phase"] == "Failed"
    assert "Failed to load model" in deploy["message"]
    row = await deploying.pool.fetchrow("SELECT state, message FROM model_deployments")
    assert row["state"] == "failed"
    assert "Failed to load model" in row["message"]
    assert await deploying.pool.fetchval("SELECT count(*) FROM approvals") == 0
    [version] = await deploying.versions()
    assert version["release_outcome"] == "failed"


async def test_a_failed_gate_deploys_nothing(deploying: ReleaseStack) -> None:
    pipeline = await deploying.save(serving=SERVING, model=MODEL, threshold=0.99)
    name = await deploying.run(pipeline)
    assert await finished(deploying, name) in ("Succeeded", "Failed")
    await eventually(
        lambda: deploying.pool.fetchval(
            "SELECT release_outcome FROM model_versions WHERE release_outcome IS NOT NULL"
        )
    )
    assert await deploying.pool.fetchval("SELECT count(*) FROM model_deployments") == 0
    assert isvc(deploying, "churn-staging") is None
    deploy = deploying.node(name, "wm-deploy")
    assert deploy is None or deploy["phase"] in ("Skipped", "Omitted")


MODELS = "models.read,models.deploy,models.approve"


async def released(stack: ReleaseStack, pipeline: str) -> tuple[str, int]:
    """Run the pipeline to its approval, approve it through the API; (model id, version)."""
    name = await stack.run(pipeline)
    await waiting_for_approval(stack, name)
    row = await stack.pool.fetchrow(
        "SELECT model_id, version FROM approvals WHERE run_name = $1", name
    )
    status, body = await stack.stack.call(
        "POST",
        f"models/{row['model_id']}/approvals/{name}/approve",
        as_=headers(permissions=MODELS),
        json={"reason": "ok"},
    )
    assert status == 200, body
    assert await finished(stack, name) == "Succeeded"
    return str(row["model_id"]), int(row["version"])


async def production(stack: ReleaseStack, model_id: str, version: int) -> dict[str, Any]:
    async def ready() -> dict[str, Any] | None:
        status, body = await stack.stack.call(
            "GET", f"models/{model_id}", as_=headers(permissions=MODELS)
        )
        assert status == 200, body
        found = {d["environment"]: d for d in body["deployments"]}.get("production")
        if found and found["version"] == version and found["state"] == "ready":
            return body
        return None

    return await eventually(ready, within=30, what=f"production never served {version}")


async def test_promote_serves_production_and_rollback_returns_the_previous_version(
    deploying: ReleaseStack, serving: ServingSimulator
) -> None:
    first = await deploying.save("churn", approval=True, serving=SERVING, model=MODEL)
    model_id, v1 = await released(deploying, first)
    status, body = await deploying.stack.call(
        "POST", f"models/{model_id}/versions/{v1}/promote", as_=headers(permissions=MODELS)
    )
    assert status == 202, body
    assert body["deployment"]["environment"] == "production"
    await production(deploying, model_id, v1)
    host = "churn-production-predictor.kubeopera-serve-acme.svc.cluster.local"
    assert await predict_at(serving.gateway.url, "churn-production", host) == 3.0
    assert (
        await deploying.pool.fetchval(
            "SELECT production_version FROM models WHERE id = $1", model_id
        )
        == v1
    )

    status, shown = await deploying.stack.call(
        "GET",
        f"models/{model_id}/deployments/production/endpoint",
        as_=headers(permissions=MODELS),
    )
    assert status == 200, shown
    assert shown["url"] == f"https://churn-production.acme.{DOMAIN}"
    assert shown["token"].startswith("wmi_")
    assert shown["example"]["headers"]["Authorization"] == f"Bearer {shown['token']}"
    audit = await deploying.pool.fetchval(
        "SELECT detail::text FROM run_actions WHERE action = 'model_endpoint'"
    )
    assert shown["token"] not in audit

    # A second version, released and promoted; then production rolls back to the first.
    second = await deploying.save(
        "churn-2", approval=True, serving=SERVING, model=model_file([10.0, 0.0], 1).decode()
    )
    model_id_2, v2 = await released(deploying, second)
    assert (model_id_2, v2) == (model_id, 2)
    status, body = await deploying.stack.call(
        "POST", f"models/{model_id}/versions/{v2}/promote", as_=headers(permissions=MODELS)
    )
    assert status == 202, body
    await production(deploying, model_id, v2)
    assert await predict_at(serving.gateway.url, "churn-production", host) == 11.0

    status, body = await deploying.stack.call(
        "POST", f"models/{model_id}/rollback", as_=headers(permissions=MODELS), json={}
    )
    assert status == 202, body
    detail = await production(deploying, model_id, v1)
    assert await predict_at(serving.gateway.url, "churn-production", host) == 3.0
    # The gate's baseline follows (written with the observation; the GET above read the model
    # row before its deployments, so it may have read it a moment earlier).
    assert (
        await deploying.pool.fetchval(
            "SELECT production_version FROM models WHERE id = $1", model_id
        )
        == v1
    )
    history = {d["environment"]: d for d in detail["deployments"]}["production"]["history"]
    assert [(h["action"], h["version"]) for h in history] == [
        ("promote", 1),
        ("promote", 2),
        ("rollback", 1),
    ]


async def test_what_may_not_serve_production_is_refused(deploying: ReleaseStack) -> None:
    pipeline = await deploying.save(approval=True, serving=SERVING, model=MODEL)
    name = await deploying.run(pipeline)
    await waiting_for_approval(deploying, name)
    model_id = await deploying.pool.fetchval("SELECT model_id FROM approvals")
    read_only = headers(permissions="models.read")
    status, _ = await deploying.stack.call(
        "POST", f"models/{model_id}/versions/1/promote", as_=read_only
    )
    assert status == 403
    status, body = await deploying.stack.call(
        "POST", f"models/{model_id}/versions/1/promote", as_=headers(permissions=MODELS)
    )
    assert status == 409
    assert "waits for approval" in body["message"]
    status, body = await deploying.stack.call(
        "POST", f"models/{model_id}/rollback", as_=headers(permissions=MODELS), json={}
    )
    assert status == 409
    status, body = await deploying.stack.call(
        "POST",
        f"models/{model_id}/versions/1/promote",
        as_=headers("other", permissions=MODELS),
    )
    assert status == 404
    status, body = await deploying.stack.call(
        "GET",
        f"models/{model_id}/deployments/staging/endpoint",
        as_=headers(permissions="models.read"),
    )
    assert status == 403
    assert (
        await deploying.pool.fetchval(
            "SELECT count(*) FROM model_deployments WHERE environment = 'production'"
        )
        == 0
    )


async def predict_at(gateway: str, name: str, host: str) -> float:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway}/v1/models/{name}:predict",
            json={"instances": [[1, 1]]},
            headers={"Host": host},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        body = await response.json()
    return float(body["predictions"][0])
