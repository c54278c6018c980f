"""The storage initializer reads with the ServiceAccount's Secret: against moto with IAM
authentication on, a key allowed the prefix loads the model and one that is not fails the
revision with KServe's download message."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import boto3
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, Configuration

from sim.kube.server import start_cluster
from sim.serving.controller import ServingConfig, ServingSimulator
from sim.serving.credentials import S3Config
from sim.serving.model import model_file
from tests.integration.compiler.moto_iam import authentication_on, moto_process
from tests.integration.sim.test_serving import ISVC, NAME, NS, _condition, _isvc, _until

pytestmark = pytest.mark.integration
BUCKET = "models"
LIST = "s3:ListBucket"


def _policy(prefix: str) -> str:
    # Listing and reading, as the model reader's policy grants: the storage initializer needs
    # no HeadBucket (which moto would authorize as `s3:HeadBucket`, AWS as s3:ListBucket).
    bucket = f"arn:aws:s3:::{BUCKET}"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": [LIST], "Resource": bucket},
                {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": f"{bucket}/{prefix}*"},
            ],
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def moto_auth() -> Iterator[tuple[str, dict[str, tuple[str, str]]]]:
    """moto in a child process (its auth switch is process-global), two readers, then
    authentication on."""
    with moto_process() as url:
        kw: dict[str, Any] = {"endpoint_url": url, "region_name": "us-east-1"}
        boot = {"aws_access_key_id": "AKIABOOT000000000000", "aws_secret_access_key": "x"}
        s3, iam = boto3.client("s3", **kw, **boot), boto3.client("iam", **kw, **boot)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="churn/v1/model.json", Body=model_file([1.0, 2.0]))
        keys = {}
        for user, prefix in (("reader", "churn/"), ("outsider", "other/")):
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName="read", PolicyDocument=_policy(prefix))
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        authentication_on(url)
        yield url, keys


@pytest.fixture
async def api_for(
    moto_auth: tuple[str, dict[str, tuple[str, str]]],
) -> AsyncIterator[Any]:
    url, keys = moto_auth
    running = await start_cluster("serving-auth")
    serving = ServingSimulator(running.store, config=ServingConfig(s3=S3Config(endpoint=url)))
    await serving.start()
    configuration = Configuration()
    await config.load_kube_config_from_dict(
        running.kubeconfig_dict, client_configuration=configuration
    )
    try:
        async with ApiClient(configuration) as api:

            async def with_user(user: str) -> ApiClient:
                core = client.CoreV1Api(api)
                await core.create_namespace({"metadata": {"name": NS}})
                key_id, secret = keys[user]
                data = {
                    "AWS_ACCESS_KEY_ID": base64.b64encode(key_id.encode()).decode(),
                    "AWS_SECRET_ACCESS_KEY": base64.b64encode(secret.encode()).decode(),
                }
                await core.create_namespaced_secret(NS, {"metadata": {"name": "s3"}, "data": data})
                await core.create_namespaced_service_account(
                    NS, {"metadata": {"name": "reader"}, "secrets": [{"name": "s3"}]}
                )
                custom = client.CustomObjectsApi(api)
                await custom.create_namespaced_custom_object(
                    *ISVC[:3], ISVC[3], _isvc("s3://models/churn/v1")
                )
                return api

            yield with_user
    finally:
        await serving.stop()
        await running.stop()


async def test_a_key_allowed_the_prefix_loads_the_model(api_for: Any) -> None:
    api = await api_for("reader")
    isvc = await _until(api, lambda i: _condition(i, "Ready").get("status") in ("True", "False"))
    assert _condition(isvc, "Ready")["status"] == "True", isvc["status"]


async def test_a_key_that_cannot_read_the_prefix_fails_the_load(api_for: Any) -> None:
    api = await api_for("outsider")
    isvc = await _until(api, lambda i: _condition(i, "Ready").get("status") in ("True", "False"))
    message = _condition(isvc, "PredictorReady")["message"]
    assert "Failed to download 1 files: churn/v1/model.json" in message, message
    assert NAME in message
