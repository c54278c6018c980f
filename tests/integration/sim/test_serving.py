"""The serving stand-in end to end: an InferenceService created through the real
kubernetes-asyncio client on the emulator becomes Ready with a URL, answers through the
gateway by Host, canaries, promotes, rolls back, and fails with KServe's message."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import boto3
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, Configuration

from sim.kube.server import RunningCluster, start_cluster
from sim.serving.controller import ServingConfig, ServingSimulator
from sim.serving.credentials import S3Config
from sim.serving.model import model_file

pytestmark = pytest.mark.integration
NS, NAME, BUCKET = "serve", "churn", "models"
HOST = f"{NAME}-predictor.{NS}.svc.cluster.local"
MERGE = "application/merge-patch+json"
ISVC = ("serving.kserve.io", "v1beta1", NS, "inferenceservices")


@pytest.fixture
async def world(moto_endpoint: str) -> AsyncIterator[tuple[RunningCluster, ServingSimulator]]:
    s3 = boto3.client(
        "s3", endpoint_url=moto_endpoint, region_name="us-east-1",
        aws_access_key_id="k", aws_secret_access_key="s",
    )  # fmt: skip
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="churn/v1/model.json", Body=model_file([1.0, 2.0]))
    s3.put_object(Bucket=BUCKET, Key="churn/v2/model.json", Body=model_file([10.0, 0.0], 1))
    s3.put_object(Bucket=BUCKET, Key="churn/broken/model.json", Body=b"not json")
    running = await start_cluster("serving")
    serving = ServingSimulator(
        running.store,
        config=ServingConfig(s3=S3Config(endpoint=moto_endpoint)),
        tick=0.02,
        seed=7,
    )
    await serving.start()
    try:
        yield running, serving
    finally:
        await serving.stop()
        await running.stop()


@pytest.fixture
async def api(world: tuple[RunningCluster, ServingSimulator]) -> AsyncIterator[ApiClient]:
    configuration = Configuration()
    await config.load_kube_config_from_dict(
        world[0].kubeconfig_dict, client_configuration=configuration
    )
    async with ApiClient(configuration) as api_client:
        core = client.CoreV1Api(api_client)
        await core.create_namespace({"metadata": {"name": NS}})
        keys = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
        data = {k: base64.b64encode(v.encode()).decode() for k, v in keys.items()}
        await core.create_namespaced_secret(NS, {"metadata": {"name": "s3"}, "data": data})
        await core.create_namespaced_service_account(
            NS, {"metadata": {"name": "reader"}, "secrets": [{"name": "s3"}]}
        )
        yield api_client


def _isvc(uri: str) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": NAME,
            "labels": {"networking.knative.dev/visibility": "cluster-local"},
        },
        "spec": {
            "predictor": {
                "serviceAccountName": "reader",
                "model": {"modelFormat": {"name": "sklearn"}, "storageUri": uri},
            }
        },
    }


async def _until(api: ApiClient, check: Any) -> dict[str, Any]:
    """The ISVC once `check(isvc)` holds (polled through the real client; the test's timeout
    is the only deadline)."""
    custom = client.CustomObjectsApi(api)
    while True:
        isvc: dict[str, Any] = await custom.get_namespaced_custom_object(*ISVC, NAME)
        if check(isvc):
            return isvc
        await asyncio.sleep(0.02)


def _condition(isvc: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in (isvc.get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return dict(item)
    return {}


def _predictor(isvc: dict[str, Any]) -> dict[str, Any]:
    return dict(((isvc.get("status") or {}).get("components") or {}).get("predictor") or {})


async def _predict(gateway_url: str, n: int) -> list[float]:
    answers = []
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            async with session.post(
                f"{gateway_url}/v1/models/{NAME}:predict",
                json={"instances": [[1, 1]]},
                headers={"Host": HOST},
            ) as response:
                assert response.status == 200
                answers.append((await response.json())["predictions"][0])
    return answers


async def _patch(api: ApiClient, body: dict[str, Any]) -> None:
    await client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *ISVC, NAME, body, _content_type=MERGE
    )


async def test_ready_canary_promote_and_roll_back(
    world: tuple[RunningCluster, ServingSimulator], api: ApiClient
) -> None:
    _, serving = world
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(*ISVC[:3], ISVC[3], _isvc("s3://models/churn/v1"))
    isvc = await _until(api, lambda i: _condition(i, "Ready").get("status") == "True")
    assert isvc["status"]["url"] == f"http://{HOST}"
    assert _predictor(isvc)["latestRolledoutRevision"] == "churn-predictor-00001"
    assert await _predict(serving.gateway.url, 3) == [3.0, 3.0, 3.0]

    await _patch(
        api,
        {
            "spec": {
                "predictor": {
                    "canaryTrafficPercent": 20,
                    "model": {"storageUri": "s3://models/churn/v2"},
                }
            }
        },
    )
    isvc = await _until(
        api, lambda i: _predictor(i).get("latestReadyRevision") == "churn-predictor-00002"
    )
    traffic = {t["revisionName"]: (t["percent"], t.get("tag")) for t in _predictor(isvc)["traffic"]}
    assert traffic == {"churn-predictor-00002": (20, None), "churn-predictor-00001": (80, "prev")}
    answers = await _predict(serving.gateway.url, 200)
    canary = answers.count(11.0)
    assert canary + answers.count(3.0) == 200
    assert 25 <= canary <= 55  # 20 % of 200 (seeded draws)
    metrics = serving.gateway.metrics
    assert metrics.requests(NS, "churn-predictor-00002") == canary
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{serving.gateway.url}/metrics") as response,
    ):
        text = await response.text()
    assert (
        f'envoy_cluster_upstream_rq{{envoy_response_code="200",'
        f'envoy_cluster_name="{NS}/churn-predictor-00002"}} {canary}'
    ) in text

    await _patch(api, {"spec": {"predictor": {"canaryTrafficPercent": None}}})
    isvc = await _until(
        api, lambda i: _predictor(i).get("latestRolledoutRevision") == "churn-predictor-00002"
    )
    assert _predictor(isvc)["previousRolledoutRevision"] == "churn-predictor-00001"
    assert set(await _predict(serving.gateway.url, 20)) == {11.0}

    await _patch(api, {"spec": {"predictor": {"canaryTrafficPercent": 0}}})
    isvc = await _until(
        api, lambda i: _predictor(i).get("latestRolledoutRevision") == "churn-predictor-00001"
    )
    assert set(await _predict(serving.gateway.url, 20)) == {3.0}


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://models/churn/missing", "Failed to fetch model. No model found in churn/missing."),
        ("s3://models/churn/broken", "Container failed with: Failed to load model"),
        ("s3://nobucket/x", "S3"),
    ],
)
async def test_a_model_that_cannot_load_fails_with_kserves_message(
    world: tuple[RunningCluster, ServingSimulator], api: ApiClient, uri: str, message: str
) -> None:
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(*ISVC[:3], ISVC[3], _isvc(uri))
    isvc = await _until(api, lambda i: _condition(i, "Ready").get("status") == "False")
    ready = _condition(isvc, "PredictorReady")
    assert ready["reason"] == "RevisionFailed"
    assert ready["message"].startswith('Revision "churn-predictor-00001" failed with message: ')
    assert message in ready["message"]
    assert isvc["status"]["modelStatus"]["lastFailureInfo"]["reason"] == "ModelLoadFailed"
    assert "url" not in isvc["status"]
