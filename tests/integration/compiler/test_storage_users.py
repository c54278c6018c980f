"""Tenants' IAM storage users against moto server with IAM authentication switched on.

moto runs in a child process (its authentication switch and its backends are process-global,
so an in-process server would change them for every other test of the session). It starts
with authentication off, long enough to create the bucket, the boundary policy and
workflow-manager's own user; then ``/moto-api/reset-auth`` switches it on and every later
request is signed with real keys and checked against the caller's IAM policies.

What moto 5.2.5 enforces and what it does not (docs/iam.md says the same):

- it checks signatures and access keys, and evaluates the caller's inline and attached policies
  (Allow, Deny, Action and Resource for S3 objects and buckets);
- it authorizes IAM user operations against Resource ``*`` only, never the user's ARN, so the
  manager policy's ``user/<path>*`` statements deny everything there. workflow-manager's user
  gets the manager policy with those Allow resources widened to ``*``
  (``as_moto_authorizes``); the action list and the Deny statements are unchanged, so a call
  the manager policy does not allow is still refused;
- it ignores Condition blocks in identity policies (``s3:prefix``, ``iam:PermissionsBoundary``),
  and it neither stores nor enforces a user's permissions boundary. The tests of those are
  ``xfail(strict=True)``: they fail today and will tell us when moto starts enforcing them.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from compiler import storage_policy
from compiler.storage_users import StorageCredentials, StorageUsers
from shared.config import Settings
from shared.errors import ConfigError, Conflict, DependencyDown

pytestmark = pytest.mark.integration

BUCKET = "wm-artifacts"
OTHER_BUCKET = "someone-elses-bucket"
USER_PATH = "/workflow-manager/tenants/"
USER_PREFIX = "wm-"
ACCOUNT = "123456789012"  # moto's default account
REGION = "eu-north-1"
DENIED = {"AccessDenied"}
# The expected failure of a test moto cannot pass: pytest.raises saw no error ("DID NOT RAISE").
# Any other exception in those tests is a real failure, not the known gap.
MOTO_ALLOWED_IT = pytest.fail.Exception


@dataclass(frozen=True)
class Moto:
    url: str
    boundary_arn: str
    manager: StorageCredentials  # workflow-manager's own keys
    root: StorageCredentials  # an administrator outside workflow-manager, for seeding/asserting


def client(moto: Moto, service: str, keys: StorageCredentials) -> Any:
    return boto3.client(
        service,
        endpoint_url=moto.url,
        region_name=REGION,
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def as_moto_authorizes(policy: dict[str, Any]) -> dict[str, Any]:
    """The manager policy as moto can evaluate it: Allow statements on IAM users get Resource
    ``*`` because moto checks IAM user operations against ``*`` only. Actions, conditions
    (which moto ignores) and every Deny stay as they are."""
    widened = copy.deepcopy(policy)
    for statement in widened["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else []
        if statement["Effect"] == "Allow" and any(a.startswith("iam:") for a in actions):
            statement["Resource"] = "*"
    return widened


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _post(url: str, body: bytes) -> bytes:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "text/plain"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return bytes(answer.read())


def _wait_until_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)  # polling a child process's start; not a timing assumption
    raise RuntimeError("moto server did not start within 30s")


def _keys(answer: dict[str, Any]) -> StorageCredentials:
    key = answer["AccessKey"]
    return StorageCredentials(key["UserName"], key["AccessKeyId"], key["SecretAccessKey"])


@pytest.fixture(scope="module")
def moto() -> Iterator[Moto]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_up(url, process)
        # Authentication is off until reset-auth: any keys are accepted for the bootstrap.
        anyone = StorageCredentials("bootstrap", "AKIABOOTSTRAP0000000", "bootstrap")
        bootstrap = Moto(url, "", anyone, anyone)
        iam, s3 = client(bootstrap, "iam", anyone), client(bootstrap, "s3", anyone)
        for bucket in (BUCKET, OTHER_BUCKET):
            s3.create_bucket(
                Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
            )
        boundary_arn = iam.create_policy(
            PolicyName="workflow-manager-tenant-boundary",
            PolicyDocument=json.dumps(storage_policy.boundary_policy(BUCKET)),
        )["Policy"]["Arn"]
        manager_document = storage_policy.manager_policy(
            bucket=BUCKET, user_path=USER_PATH, boundary_arn=boundary_arn, account_id=ACCOUNT
        )
        iam.create_user(UserName="workflow-manager", Path="/platform/")
        iam.put_user_policy(
            UserName="workflow-manager",
            PolicyName="workflow-manager",
            PolicyDocument=json.dumps(as_moto_authorizes(manager_document)),
        )
        manager = _keys(iam.create_access_key(UserName="workflow-manager"))
        iam.create_user(UserName="root-admin", Path="/")
        iam.put_user_policy(
            UserName="root-admin",
            PolicyName="everything",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                }
            ),
        )
        root = _keys(iam.create_access_key(UserName="root-admin"))

        answer = json.loads(_post(f"{url}/moto-api/reset-auth", b"0"))
        assert answer["status"] == "ok"
        running = Moto(url, boundary_arn, manager, root)
        # Authentication really is on: keys IAM never issued are refused.
        with pytest.raises(ClientError) as refused:
            client(running, "s3", anyone).list_objects_v2(Bucket=BUCKET)
        assert refused.value.response["Error"]["Code"] == "InvalidAccessKeyId"
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Observed:
    """The parameters of every CreateUser request workflow-manager sent: moto drops a user's
    permissions boundary, so the request is the only place the test can see it."""

    create_user: list[dict[str, Any]]


@pytest.fixture
def observed() -> Observed:
    return Observed(create_user=[])


@pytest.fixture
def users(moto: Moto, observed: Observed) -> StorageUsers:
    iam = client(moto, "iam", moto.manager)

    def record(params: dict[str, Any], **_: Any) -> None:
        observed.create_user.append(dict(params))

    iam.meta.events.register("provide-client-params.iam.CreateUser", record)
    return StorageUsers(
        iam=iam,
        bucket=BUCKET,
        user_path=USER_PATH,
        user_prefix=USER_PREFIX,
        boundary_arn=moto.boundary_arn,
    )


@pytest.fixture
def tenant() -> str:
    """A tenant of this test only: IAM state persists across the module's tests."""
    return f"t{uuid.uuid4().hex[:10]}"


def code_of(call: Any) -> str:
    """The error code of a boto3 call that must fail."""
    with pytest.raises(ClientError) as failure:
        call()
    return str(failure.value.response["Error"]["Code"])


def seed(moto: Moto, key: str, body: bytes = b"seeded") -> None:
    client(moto, "s3", moto.manager).put_object(Bucket=BUCKET, Key=key, Body=body)


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
    closed = f"http://127.0.0.1:{_free_port()}"
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
