"""What stagectl's provisioner writes is served by the sim world's KServe stand-in
(``start_world(serving=True)``): the tenant's namespace and model reader, then one deployment's
InferenceService, written through the real kubernetes-asyncio client, become Ready with the
predictor's cluster-local URL; the model, downloaded with the reader's key from moto with IAM
authentication on, answers through the gateway by ``Host``; a model that cannot be fetched is
reported with KServe's message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest

from shared.k8s import client_from_kubeconfig
from shared.k8s_objects import KubeObjects
from sim.ingress import AUTH_PATH, AUTH_SERVICE_HOST
from sim.serving.model import model_file
from sim.world import KNATIVE_GATEWAY, World, start_world
from stagectl.serving.params import Deployment, ModelServing, ServingPlatform, predictor_host
from stagectl.serving.provision import Provisioner
from stagectl.serving.readers import ModelReaders
from stagectl.serving.status import ServingStatus
from tests.integration.compiler.moto_iam import (
    BUCKET,
    REGION,
    USER_PATH,
    USER_PREFIX,
    Moto,
    client,
    seed,
)
from tests.integration.stagectl.release_stack import eventually

pytestmark = pytest.mark.integration
DOMAIN = "models.example.com"


@dataclass
class Served:
    world: World
    provisioner: Provisioner

    @property
    def gateway(self) -> str:
        assert self.world.host.serving is not None
        return self.world.host.serving.gateway.url


@pytest.fixture
async def served(moto: Moto) -> AsyncIterator[Served]:
    world = await start_world(1, tick=0.01, autostart=False, serving=True, s3_endpoint=moto.url)
    try:
        platform = ServingPlatform(
            bucket=BUCKET,
            domain=DOMAIN,
            auth_url=f"http://{AUTH_SERVICE_HOST}:8080{AUTH_PATH}",
            knative_gateway=KNATIVE_GATEWAY,
            s3_endpoint=moto.url.removeprefix("http://"),
            s3_use_https=False,
            s3_verify_ssl=False,
            s3_region=REGION,
        )
        readers = ModelReaders(
            iam=client(moto, "iam", moto.manager),
            bucket=BUCKET,
            user_path=USER_PATH,
            user_prefix=USER_PREFIX,
            boundary_arn=moto.boundary_arn,
        )
        api = await client_from_kubeconfig(world.host.kubeconfig)
        async with api:
            yield Served(world, Provisioner(KubeObjects(api), platform, readers))
    finally:
        await world.stop()


def deployment(tenant: str, model_file_name: str = "model.json") -> Deployment:
    return Deployment(
        tenant=tenant,
        model="churn",
        environment="staging",
        storage_prefix=f"tenants/{tenant}/models/churn/1/",
        serving=ModelServing(model_format="sklearn"),
        model_file=model_file_name,
    )


async def settled(served: Served, wanted: Deployment) -> ServingStatus:
    """The InferenceService's status once KServe has decided (the test's timeout bounds it)."""

    async def decided() -> ServingStatus | None:
        status = await served.provisioner.status(wanted)
        return status if status.ready or status.failed else None

    return await eventually(decided, what="the InferenceService never became ready or failed")


async def predict(gateway: str, host: str) -> tuple[int, object]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway}/v1/models/churn-staging:predict",
            json={"instances": [[1, 1], [2, 0]]},
            headers={"Host": host},
        ) as response,
    ):
        body = await response.json() if response.status == 200 else await response.text()
        return response.status, body


async def test_a_provisioned_deployment_is_served_through_the_gateway(
    moto: Moto, served: Served, tenant: str
) -> None:
    wanted = deployment(tenant)
    seed(moto, f"{wanted.storage_prefix}model.json", model_file([1.0, 2.0], 0.5))
    host = predictor_host(wanted)
    assert await predict(served.gateway, host) == (404, "")  # no such virtual host yet

    assert await served.provisioner.tenant(tenant) > 0
    assert await served.provisioner.deployment(wanted) > 0
    status = await settled(served, wanted)

    assert (status.ready, status.failed, status.message) == (True, False, None)
    assert status.url == f"http://{host}"
    assert status.latest_ready_revision == "churn-staging-predictor-00001"
    # The model stagectl registered, loaded with the tenant's reader key, really answers.
    assert await predict(served.gateway, host) == (200, {"predictions": [3.5, 2.5]})
    assert await predict(served.gateway, f"{host.upper()}:80") == (
        200,
        {"predictions": [3.5, 2.5]},
    )
    other = predictor_host(deployment(f"x{tenant[1:]}"))
    assert await predict(served.gateway, other) == (404, "")


async def test_a_model_that_cannot_be_fetched_fails_with_kserves_message(
    moto: Moto, served: Served, tenant: str
) -> None:
    wanted = deployment(tenant, "missing.json")
    seed(moto, f"{wanted.storage_prefix}model.json", model_file([1.0, 2.0]))

    await served.provisioner.tenant(tenant)
    await served.provisioner.deployment(wanted)
    status = await settled(served, wanted)

    assert (status.ready, status.failed) == (False, True)
    assert status.message is not None
    assert "Failed to fetch model. No model found in" in status.message
    assert f"{wanted.storage_prefix}missing.json" in status.message
    assert await predict(served.gateway, predictor_host(wanted)) == (503, "no healthy upstream")
