"""A tenant's model reader against moto with authentication on: its key reads the tenant's
registered models and nothing else, workflow-manager's own (constrained) key creates it, and a
new key retires the old one. moto_iam.py says what moto enforces (not ``s3:prefix``
conditions nor boundaries: those are unit-tested on the documents)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shared import storage
from stagectl.serving.readers import ModelReaders
from tests.integration.compiler.moto_iam import (
    BUCKET,
    DENIED,
    USER_PATH,
    USER_PREFIX,
    Moto,
    client,
    code_of,
    seed,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def created() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def readers(moto: Moto, created: list[dict[str, Any]]) -> ModelReaders:
    iam = client(moto, "iam", moto.manager)  # workflow-manager's own key and policy

    def record(params: dict[str, Any], **_: Any) -> None:
        created.append(dict(params))

    iam.meta.events.register("provide-client-params.iam.CreateUser", record)
    return ModelReaders(
        iam=iam,
        bucket=BUCKET,
        user_path=USER_PATH,
        user_prefix=USER_PREFIX,
        boundary_arn=moto.boundary_arn,
    )


async def test_the_reader_reads_its_tenants_models_and_nothing_else(
    moto: Moto, readers: ModelReaders, tenant: str, created: list[dict[str, Any]]
) -> None:
    other = f"o{uuid.uuid4().hex[:10]}"
    mine = f"{storage.tenant_models(tenant)}churn/1/model.joblib"
    theirs = f"{storage.tenant_models(other)}churn/1/model.joblib"
    artifact = f"{storage.tenant_artifacts(tenant)}run-1/model.joblib"
    training = f"{storage.tenant_training(tenant)}data.csv"
    for key in (mine, theirs, artifact, training):
        seed(moto, key, b"weights")

    name = await readers.ensure_user(tenant)
    keys = await readers.issue_key(tenant)
    assert keys.user_name == name == f"{USER_PREFIX}.{tenant}"
    (request,) = created
    assert request["Path"] == USER_PATH
    assert request["PermissionsBoundary"] == moto.boundary_arn

    s3 = client(moto, "s3", keys)
    assert s3.get_object(Bucket=BUCKET, Key=mine)["Body"].read() == b"weights"
    for refused in (theirs, artifact, training):
        assert code_of(lambda key=refused: s3.get_object(Bucket=BUCKET, Key=key)) in DENIED
    assert code_of(lambda: s3.put_object(Bucket=BUCKET, Key=mine, Body=b"x")) in DENIED
    assert code_of(lambda: s3.delete_object(Bucket=BUCKET, Key=mine)) in DENIED
    assert s3.get_object(Bucket=BUCKET, Key=mine)["Body"].read() == b"weights"


async def test_the_reader_is_not_the_tenants_storage_user(
    moto: Moto, readers: ModelReaders, tenant: str
) -> None:
    await readers.ensure_user(tenant)
    root = client(moto, "iam", moto.root)
    users = {u["UserName"] for u in root.list_users(PathPrefix=USER_PATH)["Users"]}
    assert readers.user_name(tenant) in users
    assert f"{USER_PREFIX}{tenant}" not in users  # no storage user was created for it
    policies = root.list_user_policies(UserName=readers.user_name(tenant))["PolicyNames"]
    assert policies == ["workflow-manager-model-reader"]


async def test_ensuring_again_changes_nothing_and_a_new_key_retires_the_old(
    moto: Moto, readers: ModelReaders, tenant: str
) -> None:
    key = f"{storage.tenant_models(tenant)}m/1/model.bin"
    seed(moto, key)
    await readers.ensure_user(tenant)
    first = await readers.issue_key(tenant)
    assert await readers.ensure_user(tenant) == readers.user_name(tenant)
    second = await readers.issue_key(tenant)
    assert await readers.current_key_ids(tenant) == [second.access_key_id]
    assert client(moto, "s3", second).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    old = client(moto, "s3", first)
    assert code_of(lambda: old.get_object(Bucket=BUCKET, Key=key)) == "InvalidAccessKeyId"
    assert second.secret_access_key not in repr(second)


async def test_deleting_the_reader_revokes_its_key(
    moto: Moto, readers: ModelReaders, tenant: str
) -> None:
    key = f"{storage.tenant_models(tenant)}m/1/model.bin"
    seed(moto, key)
    await readers.ensure_user(tenant)
    keys = await readers.issue_key(tenant)
    await readers.delete_user(tenant)
    await readers.delete_user(tenant)  # already gone: fine
    assert await readers.current_key_ids(tenant) == []
    s3 = client(moto, "s3", keys)
    assert code_of(lambda: s3.get_object(Bucket=BUCKET, Key=key)) == "InvalidAccessKeyId"
