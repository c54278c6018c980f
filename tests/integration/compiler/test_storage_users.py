"""Tenants' IAM storage users: created on the path with the boundary, keys rotated, deleted, and
configuration and outages reported; against moto with authentication on (moto_iam.py says what
moto enforces and what it does not)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config

from compiler.tenants import storage_policy
from compiler.tenants.storage_users import StorageCredentials, StorageUsers
from shared.config import Settings
from shared.errors import ConfigError, Conflict, DependencyDown
from tests.integration.compiler.moto_iam import (
    ACCOUNT,
    BUCKET,
    REGION,
    USER_PATH,
    USER_PREFIX,
    Moto,
    Observed,
    client,
    code_of,
    free_port,
)

pytestmark = pytest.mark.integration


# --- creation --------------------------------------------------------------------------------


async def test_users_are_created_on_the_path_with_the_boundary(
    moto: Moto, users: StorageUsers, observed: Observed, tenant: str
) -> None:
    other = f"{tenant}-b"
    names = [await users.ensure_user(tenant), await users.ensure_user(other)]

    assert names == [f"wm-{tenant}", f"wm-{other}"]
    iam = client(moto, "iam", moto.root)
    for name, owner in zip(names, (tenant, other), strict=True):
        user = iam.get_user(UserName=name)["User"]
        assert user["Path"] == USER_PATH
        assert user["Arn"] == f"arn:aws:iam::{ACCOUNT}:user{USER_PATH}{name}"
        tags = {t["Key"]: t["Value"] for t in iam.list_user_tags(UserName=name)["Tags"]}
        assert tags["workflow-manager/tenant"] == owner
        assert iam.list_user_policies(UserName=name)["PolicyNames"] == ["workflow-manager-storage"]
        stored = iam.get_user_policy(UserName=name, PolicyName="workflow-manager-storage")
        assert stored["PolicyDocument"] == storage_policy.tenant_user_policy(BUCKET, owner)
    assert [(c["UserName"], c["Path"], c["PermissionsBoundary"]) for c in observed.create_user] == [
        (name, USER_PATH, moto.boundary_arn) for name in names
    ]


async def test_ensure_user_converges_a_changed_policy_without_recreating(
    moto: Moto, users: StorageUsers, observed: Observed, tenant: str
) -> None:
    name = await users.ensure_user(tenant)
    iam = client(moto, "iam", moto.root)
    widened = storage_policy.tenant_user_policy(BUCKET, tenant)
    widened["Statement"][2]["Action"] = ["s3:GetObject", "s3:PutObject"]  # write its models
    iam.put_user_policy(
        UserName=name, PolicyName="workflow-manager-storage", PolicyDocument=json.dumps(widened)
    )

    assert await users.ensure_user(tenant) == name

    stored = iam.get_user_policy(UserName=name, PolicyName="workflow-manager-storage")
    assert stored["PolicyDocument"] == storage_policy.tenant_user_policy(BUCKET, tenant)
    assert len(observed.create_user) == 1


async def test_a_user_of_that_name_outside_the_path_is_a_conflict(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    client(moto, "iam", moto.root).create_user(UserName=f"wm-{tenant}", Path="/humans/")

    with pytest.raises(Conflict) as conflict:
        await users.ensure_user(tenant)

    assert conflict.value.details["path"] == "/humans/"
    assert (
        client(moto, "iam", moto.root).list_user_policies(UserName=f"wm-{tenant}")["PolicyNames"]
        == []
    )


# --- keys ------------------------------------------------------------------------------------


async def test_issue_key_rotates_to_exactly_one_working_key(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    await users.ensure_user(tenant)
    key = f"{storage_policy.tenant_prefixes(tenant).artifacts}a.txt"
    first = await users.issue_key(tenant)
    client(moto, "s3", first).put_object(Bucket=BUCKET, Key=key, Body=b"1")

    second = await users.issue_key(tenant)

    assert second.user_name == first.user_name == f"wm-{tenant}"
    assert second.access_key_id != first.access_key_id
    assert await users.current_key_ids(tenant) == [second.access_key_id]
    stale = client(moto, "s3", first)
    assert code_of(lambda: stale.get_object(Bucket=BUCKET, Key=key)) == "InvalidAccessKeyId"
    assert client(moto, "s3", second).get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"1"


async def test_issue_key_makes_room_when_the_user_already_has_two(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    name = await users.ensure_user(tenant)
    iam = client(moto, "iam", moto.root)
    extra = [iam.create_access_key(UserName=name)["AccessKey"]["AccessKeyId"] for _ in range(2)]

    issued = await users.issue_key(tenant)

    assert await users.current_key_ids(tenant) == [issued.access_key_id]
    assert issued.access_key_id not in extra


async def test_current_key_ids_of_a_tenant_without_a_user_is_empty(
    users: StorageUsers, tenant: str
) -> None:
    assert await users.current_key_ids(tenant) == []


# --- deletion --------------------------------------------------------------------------------


async def test_delete_user_removes_keys_policies_and_the_user(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    name = await users.ensure_user(tenant)
    keys = await users.issue_key(tenant)
    artifact = f"{storage_policy.tenant_prefixes(tenant).artifacts}a.txt"
    client(moto, "s3", keys).put_object(Bucket=BUCKET, Key=artifact, Body=b"a")

    await users.delete_user(tenant)

    iam = client(moto, "iam", moto.root)
    assert code_of(lambda: iam.get_user(UserName=name)) == "NoSuchEntity"
    gone = client(moto, "s3", keys)
    assert code_of(lambda: gone.get_object(Bucket=BUCKET, Key=artifact)) == "InvalidAccessKeyId"
    assert await users.current_key_ids(tenant) == []
    await users.delete_user(tenant)  # already gone: still fine
    # The tenant's data is not the user's: deleting credentials keeps the artifacts.
    kept = client(moto, "s3", moto.root).get_object(Bucket=BUCKET, Key=artifact)
    assert kept["Body"].read() == b"a"


# --- settings and failures -------------------------------------------------------------------


def settings(**values: str) -> Settings:
    return Settings(DATABASE_URL="postgresql://unused/unused", **values)  # type: ignore[arg-type]


def test_from_settings_names_every_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ARTIFACT_IAM_USER_PATH", "ARTIFACT_IAM_USER_PREFIX", "ARTIFACT_IAM_BOUNDARY_ARN"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(ConfigError) as missing:
        StorageUsers.from_settings(settings(ARTIFACT_BUCKET=BUCKET))

    assert missing.value.message.startswith(
        "ARTIFACT_IAM_USER_PATH, ARTIFACT_IAM_USER_PREFIX, ARTIFACT_IAM_BOUNDARY_ARN:"
    )


async def test_from_settings_builds_a_working_client(moto: Moto, tenant: str) -> None:
    users = StorageUsers.from_settings(
        settings(
            ARTIFACT_BUCKET=BUCKET,
            ARTIFACT_IAM_USER_PATH=USER_PATH,
            ARTIFACT_IAM_USER_PREFIX=USER_PREFIX,
            ARTIFACT_IAM_BOUNDARY_ARN=moto.boundary_arn,
        ),
        endpoint_url=moto.url,
        access_key_id=moto.manager.access_key_id,
        secret_access_key=moto.manager.secret_access_key,
    )

    assert await users.ensure_user(tenant) == f"wm-{tenant}"


async def test_credentials_iam_refuses_are_a_configuration_error(moto: Moto, tenant: str) -> None:
    intruder = StorageCredentials("nobody", "AKIANOBODY0000000000", "wrong")
    users = StorageUsers(
        iam=client(moto, "iam", intruder),
        bucket=BUCKET,
        user_path=USER_PATH,
        user_prefix=USER_PREFIX,
        boundary_arn=moto.boundary_arn,
    )

    with pytest.raises(ConfigError) as refused:
        await users.ensure_user(tenant)

    assert refused.value.details == {
        "dependency": "iam",
        "operation": "GetUser",
        "code": "InvalidClientTokenId",
    }


async def test_unreachable_iam_is_a_dependency_down(moto: Moto, tenant: str) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    users = StorageUsers(
        iam=boto3.client(
            "iam",
            endpoint_url=closed,
            region_name=REGION,
            aws_access_key_id=moto.manager.access_key_id,
            aws_secret_access_key=moto.manager.secret_access_key,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2),
        ),
        bucket=BUCKET,
        user_path=USER_PATH,
        user_prefix=USER_PREFIX,
        boundary_arn=moto.boundary_arn,
    )

    with pytest.raises(DependencyDown) as down:
        await users.issue_key(tenant)

    assert down.value.retryable
    assert down.value.details["dependency"] == "iam"
