"""What the register stage copies into the registry is what it checked, and only what the run
wrote to its own artifacts: a model written again between the check and the copy is not
registered (a retry of the run registers what that attempt checks, with its digest), and an
artifact the workflow's status places anywhere else is refused before anything is copied.
Real PostgreSQL, moto S3, the sim host's Argo, and the stage controller in process."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import boto3
import pytest

from shared.errors import Conflict
from stagectl.s3_registry import RegistryObjects
from tests.integration.compiler.pipeline_stack import NS, headers
from tests.integration.stagectl.holding import HoldingS3, registry_copy
from tests.integration.stagectl.release_stack import (
    BUCKET,
    REGION,
    WORKFLOWS,
    ReleaseStack,
    eventually,
    running_controller,
)
from tests.integration.stagectl.test_stages import argo, finished, output_key

Obj = dict[str, Any]


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@contextlib.asynccontextmanager
async def s3_proxy(stack: ReleaseStack) -> AsyncIterator[HoldingS3]:
    """moto behind a proxy that answers a copy's If-Match as S3 does."""
    proxy = HoldingS3(stack.moto)
    proxy.copy_preconditions = True
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


async def test_a_model_written_again_after_the_check_is_not_registered_and_a_retry_is(
    release_stack: ReleaseStack,
) -> None:
    stack = release_stack
    rewritten = b"weights written after the register stage checked the model"
    async with s3_proxy(stack) as proxy:
        proxy.hold = lambda request: registry_copy(request) and request.path.endswith("/model.tgz")
        async with running_controller(stack, S3_ENDPOINT_URL=proxy.url):
            name = await stack.run(await stack.save())
            await asyncio.wait_for(proxy.gate.arrived.wait(), 60)
            source = output_key(stack, name, "train")
            checked = stack.object(source)
            stack.s3().put_object(Bucket=BUCKET, Key=source, Body=rewritten)
            proxy.hold = None
            proxy.gate.release(proceed=True)
            assert await finished(stack, name) == "Failed"

            register = stack.node(name, "wm-register")
            assert register is not None
            assert register["message"].startswith(
                "the model (artifact 'model' of step 'train') was written again after it was "
                "checked, while it was being registered; nothing was registered"
            )
            [abandoned] = await stack.versions()
            assert (abandoned["state"], abandoned["digest"]) == ("abandoned", None)
            prefix = abandoned["prefix"]
            assert stack.keys(prefix) == []

            # The retry's register stage checks the model as it is now, and registers that.
            await argo(stack).retry(NS, name)
            assert await finished(stack, name) == "Succeeded"

    [version] = await stack.versions()
    assert (version["number"], version["state"], version["release_outcome"]) == (
        1,
        "passed",
        "completed",
    )
    assert rewritten != checked
    assert stack.object(prefix + "model.tgz") == rewritten
    assert version["digest"] == sha256(rewritten)
    assert json.loads(stack.object(prefix + "lineage.json"))["digest"] == sha256(rewritten)
    assert version["lineage"]["digest"] == sha256(rewritten)
    status, detail = await stack.stack.call(
        "GET", f"models/{version['model_id']}", as_=headers(permissions="models.read")
    )
    assert status == 200, detail
    assert detail["versions"][0]["digest"] == sha256(rewritten)


def tamper_output(stack: ReleaseStack, name: str, step: str, s3: Obj) -> None:
    """Rewrite the location the run's status records for ``step``'s output artifact, as a
    tenant who can update its workflows can."""
    store = stack.stack.world.host.store
    rtype = store.resolve(*WORKFLOWS)
    workflow = store.get(rtype, NS, name)
    for node in workflow["status"]["nodes"].values():
        if node.get("displayName") == step:
            node["outputs"]["artifacts"][0]["s3"] = s3
    store.replace(rtype, NS, name, workflow)


@pytest.mark.parametrize(
    ("s3", "message"),
    [
        (
            {"key": "tenants/globex/artifacts/p-1/model.tgz"},
            "is stored at 'tenants/globex/artifacts/p-1/model.tgz', outside the tenant's "
            "artifacts (tenants/acme/artifacts/)",
        ),
        (
            {"key": "tenants/acme/models/churn/7/model.tgz"},
            "is stored at 'tenants/acme/models/churn/7/model.tgz', in the model registry",
        ),
        (
            {"key": "tenants/acme/artifacts/../models/churn/7/model.tgz"},
            "with an empty, '.' or '..' segment",
        ),
        (
            {"key": "tenants/acme/artifacts//p-1/model.tgz"},
            "with an empty, '.' or '..' segment",
        ),
        (
            {"bucket": "someone-elses", "key": "tenants/acme/artifacts/p-1/model.tgz"},
            "is stored in bucket 'someone-elses', not in the platform's artifact bucket",
        ),
    ],
)
async def test_an_artifact_the_status_places_outside_the_tenants_artifacts_is_refused(
    release_stack: ReleaseStack, s3: Obj, message: str
) -> None:
    """The run's status says the model is elsewhere (an object really is there): the stage
    fails with what to fix, takes no number and copies nothing."""
    stack = release_stack
    stack.s3().put_object(Bucket=BUCKET, Key=s3["key"], Body=b"not this run's model")
    data = stack.stack.world.host.data_argo
    assert data is not None
    data.start()  # the run reaches its register stage with no stage controller yet
    name = await stack.run(await stack.save())

    async def waiting() -> bool:
        node = stack.node(name, "wm-register")
        return node is not None and node.get("phase") == "Running"

    await eventually(waiting, what="the register stage never waited")
    tamper_output(stack, name, "train", s3)
    async with running_controller(stack):
        assert await finished(stack, name) == "Failed"
    register = stack.node(name, "wm-register")
    assert register is not None
    assert register["message"].startswith("artifact 'model' of step 'train' ")
    assert message in register["message"]
    assert await stack.versions() == []
    assert stack.keys("tenants/acme/models/") == (
        [s3["key"]] if s3["key"].startswith("tenants/acme/models/") else []
    )


# --- the adapter's copies, against moto directly ------------------------------------------
OWN_BUCKET = "wm-registry-objects"


@pytest.fixture
def bucket(moto_endpoint: str, aws_credentials: None) -> Any:
    s3 = boto3.resource("s3", endpoint_url=moto_endpoint, region_name=REGION)
    found = s3.Bucket(OWN_BUCKET)
    if found.creation_date is None:
        found.create()
    found.objects.all().delete()
    return found.meta.client


@contextlib.contextmanager
def registry(endpoint: str, **options: Any) -> Iterator[RegistryObjects]:
    objects = RegistryObjects(bucket=OWN_BUCKET, region=REGION, endpoint_url=endpoint, **options)
    try:
        yield objects
    finally:
        objects.close()


@pytest.mark.parametrize("single_copy_limit", [1024**3, 1024], ids=["one-copy", "in-parts"])
async def test_a_copy_answers_the_digest_of_the_bytes_it_wrote(
    bucket: Any, moto_endpoint: str, single_copy_limit: int
) -> None:
    """One CopyObject: storage's checksum; above the single-copy limit: read through."""
    data = bytes(range(256)) * 64  # 16 KiB
    bucket.put_object(Bucket=OWN_BUCKET, Key="tenants/acme/artifacts/m.bin", Body=data)
    with registry(moto_endpoint, single_copy_limit=single_copy_limit) as objects:
        checked = await objects.head("tenants/acme/artifacts/m.bin")
        copied = await objects.copy(
            "tenants/acme/artifacts/m.bin", "tenants/acme/models/m/1/m.bin", checked=checked
        )
        digest = copied.sha256 or await objects.sha256("tenants/acme/models/m/1/m.bin")
    assert (copied.sha256 is None) == (single_copy_limit < len(data))
    assert digest == hashlib.sha256(data).hexdigest()
    body = bucket.get_object(Bucket=OWN_BUCKET, Key="tenants/acme/models/m/1/m.bin")["Body"]
    assert body.read() == data


@pytest.mark.parametrize("single_copy_limit", [1024**3, 1024], ids=["one-copy", "in-parts"])
async def test_a_copy_of_an_object_written_again_since_it_was_checked_is_refused(
    bucket: Any, moto_endpoint: str, single_copy_limit: int
) -> None:
    source, destination = "tenants/acme/artifacts/m.bin", "tenants/acme/models/m/1/m.bin"
    bucket.put_object(Bucket=OWN_BUCKET, Key=source, Body=b"checked" * 1000)
    proxy = HoldingS3(moto_endpoint)
    proxy.copy_preconditions = True
    await proxy.start()
    try:
        with registry(proxy.url, single_copy_limit=single_copy_limit) as objects:
            checked = await objects.head(source)
            bucket.put_object(Bucket=OWN_BUCKET, Key=source, Body=b"rewritten" * 1000)
            with pytest.raises(Conflict):
                await objects.copy(source, destination, checked=checked)
    finally:
        await proxy.stop()
    assert "Contents" not in bucket.list_objects_v2(Bucket=OWN_BUCKET, Prefix=destination)
