"""The deploy stage end to end on the sim host: a release with ``serving`` is registered,
gated, deployed to staging through the deployment reconciler (the tenant's serving namespace,
the model reader's key, the InferenceService and its route, the first token), served by the
KServe stand-in's model server, and only then asks for approval."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from shared.db.inference_tokens import TokenStore
from shared.inference_tokens import hash_matches, parse_token
from shared.token_sealing import new_key, parse_key, unseal
from sim.serving.controller import ServingConfig, ServingSimulator
from sim.serving.credentials import S3Config
from sim.serving.model import model_file
from tests.integration.stagectl.release_stack import (
    ReleaseStack,
    eventually,
    running_controller,
)
from tests.integration.stagectl.test_stages import finished, outputs_of, waiting_for_approval

KEY = new_key()
DOMAIN = "models.example.com"
SERVE_NS = "kubeopera-serve-acme"
SERVING = {"model_format": {"name": "sklearn"}, "readiness_deadline_seconds": 30}
MODEL = model_file([1.0, 2.0]).decode()


def serving_settings(moto: str) -> dict[str, Any]:
    return {
        "ML_SERVING_DOMAIN": DOMAIN,
        "DEPLOYMENT_TOKEN_KEY": SecretStr(KEY),
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
