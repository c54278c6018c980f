"""What a tenant's storage key can reach, and what workflow-manager's own key can never do;
against moto with authentication on (moto_iam.py says what moto enforces and what it does not:
the strict xfails below are those gaps)."""

from __future__ import annotations

import json
import uuid

import pytest

from compiler.tenants import storage_policy
from compiler.tenants.storage_users import StorageUsers
from tests.integration.compiler.moto_iam import (
    ACCOUNT,
    BUCKET,
    DENIED,
    MOTO_ALLOWED_IT,
    OTHER_BUCKET,
    USER_PATH,
    Moto,
    client,
    code_of,
    seed,
)

pytestmark = pytest.mark.integration


# --- what a tenant's key can reach -----------------------------------------------------------


async def test_tenant_key_reads_and_writes_artifacts_and_training_and_reads_models(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    await users.ensure_user(tenant)
    keys = await users.issue_key(tenant)
    s3 = client(moto, "s3", keys)
    prefixes = storage_policy.tenant_prefixes(tenant)
    seed(moto, f"{prefixes.models}churn/v1/model.pkl", b"weights")

    for prefix in (prefixes.artifacts, prefixes.training):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}run-1/out.txt", Body=b"hello")
        assert s3.get_object(Bucket=BUCKET, Key=f"{prefix}run-1/out.txt")["Body"].read() == (
            b"hello"
        )
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        assert [o["Key"] for o in listed["Contents"]] == [f"{prefix}run-1/out.txt"]
        s3.delete_object(Bucket=BUCKET, Key=f"{prefix}run-1/out.txt")
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=f"{prefixes.training}ckpt.bin")
    part = s3.upload_part(
        Bucket=BUCKET,
        Key=f"{prefixes.training}ckpt.bin",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"x" * 1024,
    )
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key=f"{prefixes.training}ckpt.bin",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
    )
    model = s3.get_object(Bucket=BUCKET, Key=f"{prefixes.models}churn/v1/model.pkl")
    assert model["Body"].read() == b"weights"
    assert keys.secret_access_key not in f"{keys!r} {keys!s}"


async def test_tenant_key_is_denied_other_tenants_and_writes_to_its_models(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    # "<tenant>-b" also proves the trailing / of every prefix: tenant "acme" and "acme-b".
    other = f"{tenant}-b"
    for owner in (tenant, other):
        await users.ensure_user(owner)
    keys = await users.issue_key(tenant)
    s3 = client(moto, "s3", keys)
    mine, theirs = storage_policy.tenant_prefixes(tenant), storage_policy.tenant_prefixes(other)
    seed(moto, f"{mine.models}churn/v1/model.pkl")
    for prefix in (theirs.artifacts, theirs.training, theirs.models):
        seed(moto, f"{prefix}x.txt")
    seed(moto, "shared/config.txt")
    client(moto, "s3", moto.root).put_object(Bucket=OTHER_BUCKET, Key="x.txt", Body=b"x")

    for prefix in (theirs.artifacts, theirs.training, theirs.models):
        assert code_of(lambda p=prefix: s3.get_object(Bucket=BUCKET, Key=f"{p}x.txt")) in DENIED
        assert (
            code_of(lambda p=prefix: s3.put_object(Bucket=BUCKET, Key=f"{p}y.txt", Body=b"y"))
            in DENIED
        )
        assert code_of(lambda p=prefix: s3.delete_object(Bucket=BUCKET, Key=f"{p}x.txt")) in (
            DENIED
        )
    model_key = f"{mine.models}churn/v1/model.pkl"
    assert code_of(lambda: s3.put_object(Bucket=BUCKET, Key=model_key, Body=b"evil")) in DENIED
    assert code_of(lambda: s3.put_object(Bucket=BUCKET, Key=f"{mine.models}new", Body=b"")) in (
        DENIED
    )
    assert code_of(lambda: s3.delete_object(Bucket=BUCKET, Key=model_key)) in DENIED
    assert code_of(lambda: s3.put_object(Bucket=BUCKET, Key=f"{mine.root}x", Body=b"")) in DENIED
    assert code_of(lambda: s3.get_object(Bucket=BUCKET, Key="shared/config.txt")) in DENIED
    assert code_of(lambda: s3.get_object(Bucket=OTHER_BUCKET, Key="x.txt")) in DENIED
    assert code_of(lambda: s3.list_objects_v2(Bucket=OTHER_BUCKET)) in DENIED
    assert code_of(lambda: client(moto, "iam", keys).list_users()) in DENIED
    # Nothing above got through: the seeded objects are untouched.
    root = client(moto, "s3", moto.root)
    assert root.get_object(Bucket=BUCKET, Key=model_key)["Body"].read() == b"seeded"
    assert root.get_object(Bucket=BUCKET, Key=f"{theirs.artifacts}x.txt")["Body"].read() == (
        b"seeded"
    )


@pytest.mark.xfail(
    strict=True,
    raises=MOTO_ALLOWED_IT,
    reason="moto 5.2.5 ignores Condition blocks in identity policies (s3:prefix on ListBucket)",
)
async def test_tenant_key_cannot_list_another_tenants_prefix(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    other = f"{tenant}-b"
    await users.ensure_user(tenant)
    keys = await users.issue_key(tenant)
    seed(moto, f"{storage_policy.tenant_prefixes(other).artifacts}x.txt")
    s3 = client(moto, "s3", keys)

    prefix = storage_policy.tenant_prefixes(other).artifacts
    assert code_of(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)) in DENIED


@pytest.mark.xfail(
    strict=True,
    raises=MOTO_ALLOWED_IT,
    reason="moto 5.2.5 neither stores nor enforces a user's permissions boundary",
)
async def test_the_boundary_caps_a_widened_tenant_policy(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    name = await users.ensure_user(tenant)
    keys = await users.issue_key(tenant)
    everything = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
    }
    client(moto, "iam", moto.root).put_user_policy(
        UserName=name, PolicyName="widened", PolicyDocument=json.dumps(everything)
    )
    client(moto, "s3", moto.root).put_object(Bucket=OTHER_BUCKET, Key="y.txt", Body=b"y")

    s3 = client(moto, "s3", keys)
    assert code_of(lambda: s3.get_object(Bucket=OTHER_BUCKET, Key="y.txt")) in DENIED


# --- workflow-manager's own limits -----------------------------------------------------------


def test_the_shipped_policies_pass_iams_policy_grammar(moto: Moto) -> None:
    iam = client(moto, "iam", moto.root)
    documents = {
        "manager": storage_policy.manager_policy(
            bucket=BUCKET, user_path=USER_PATH, boundary_arn=moto.boundary_arn
        ),
        "boundary": storage_policy.boundary_policy(BUCKET),
        "tenant": storage_policy.tenant_user_policy(BUCKET, "acme"),
    }
    for name, document in documents.items():
        answer = iam.create_policy(
            PolicyName=f"grammar-{name}-{uuid.uuid4().hex[:6]}", PolicyDocument=json.dumps(document)
        )
        assert answer["Policy"]["Arn"].startswith(f"arn:aws:iam::{ACCOUNT}:policy/grammar-")
    broken = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject"}]}
    assert (
        code_of(
            lambda: iam.create_policy(
                PolicyName="grammar-broken", PolicyDocument=json.dumps(broken)
            )
        )
        == "MalformedPolicyDocument"
    )


async def test_the_manager_can_never_change_a_boundary_or_act_beyond_its_policy(
    moto: Moto, users: StorageUsers, tenant: str
) -> None:
    name = await users.ensure_user(tenant)
    iam = client(moto, "iam", moto.manager)

    assert (
        code_of(
            lambda: iam.put_user_permissions_boundary(
                UserName=name, PermissionsBoundary="arn:aws:iam::aws:policy/AdministratorAccess"
            )
        )
        in DENIED
    )
    assert code_of(lambda: iam.delete_user_permissions_boundary(UserName=name)) in DENIED
    assert (
        code_of(
            lambda: iam.attach_user_policy(
                UserName=name, PolicyArn="arn:aws:iam::aws:policy/AdministratorAccess"
            )
        )
        in DENIED
    )
    assert code_of(lambda: iam.create_role(RoleName="escape", AssumeRolePolicyDocument="{}")) in (
        DENIED
    )
    assert code_of(lambda: iam.list_users()) in DENIED
    s3 = client(moto, "s3", moto.manager)
    assert code_of(lambda: s3.get_object(Bucket=OTHER_BUCKET, Key="x.txt")) in DENIED


@pytest.mark.xfail(
    strict=True,
    raises=MOTO_ALLOWED_IT,
    reason="moto 5.2.5 ignores the iam:PermissionsBoundary condition and user ARNs in "
    "IAM authorization, so the manager can create any user there",
)
def test_the_manager_cannot_create_a_user_without_the_boundary_or_off_its_path(
    moto: Moto,
) -> None:
    iam = client(moto, "iam", moto.manager)
    name = f"rogue-{uuid.uuid4().hex[:8]}"
    assert code_of(lambda: iam.create_user(UserName=name, Path=USER_PATH)) in DENIED
    assert (
        code_of(
            lambda: iam.create_user(
                UserName=f"{name}-2", Path="/", PermissionsBoundary=moto.boundary_arn
            )
        )
        in DENIED
    )
