"""compiler.secrets.values: a data secret's values are read only from a labelled Secret in the
tenant's own namespace, through the real client against the emulator."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient

from compiler.secrets.values import read_data_secret
from shared import labels as L
from shared.errors import NotFound
from shared.k8s import client_from_kubeconfig
from shared.k8s_objects import KubeObjects
from sim.kube.server import RunningCluster, start_cluster


@pytest.fixture
async def objects() -> AsyncIterator[KubeObjects]:
    cluster: RunningCluster = await start_cluster("host")
    api: ApiClient = await client_from_kubeconfig(cluster.kubeconfig)
    try:
        objects = KubeObjects(api)
        for tenant in ("acme", "other"):
            namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
            await objects.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
        yield objects
    finally:
        await api.close()
        await cluster.stop()


def secret(name: str, namespace: str, *, labelled: bool = True) -> dict[str, object]:
    labels = {L.DATA_SECRET: L.DATA_SECRET_VALUE} if labelled else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {
            "url": base64.b64encode(b"https://hooks.example/T0/B0/x").decode(),
            "binary": base64.b64encode(b"\xff\xfe").decode(),
        },
    }


async def test_a_labelled_secret_is_read_decoded_and_binary_keys_are_left_out(
    objects: KubeObjects,
) -> None:
    await objects.create(secret("slack", "kubeopera-data-acme"))
    assert await read_data_secret(objects, "acme", "slack") == {
        "url": "https://hooks.example/T0/B0/x"
    }


async def test_an_unlabelled_secret_or_another_tenants_is_not_found_without_values(
    objects: KubeObjects,
) -> None:
    await objects.create(
        secret("kubeopera-artifact-credentials", "kubeopera-data-acme", labelled=False)
    )
    await objects.create(secret("theirs", "kubeopera-data-other"))
    for name in ("kubeopera-artifact-credentials", "theirs", "missing"):
        with pytest.raises(NotFound) as refused:
            await read_data_secret(objects, "acme", name)
        assert "hooks.example" not in str(refused.value.message)
        assert name in refused.value.message
