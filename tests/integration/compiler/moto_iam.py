"""moto server with IAM authentication switched on, for the tests of tenants' storage users
(test_storage_users.py: their life cycle; test_storage_access.py: what their keys and
workflow-manager's own can reach).

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

import contextlib
import copy
import json
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

from compiler.tenants import storage_policy
from compiler.tenants.storage_users import StorageCredentials, StorageUsers
from sim.ports import free_port

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


@contextlib.contextmanager
def moto_process() -> Iterator[str]:
    """A moto server in a child process of its own (its authentication switch is
    process-global), up and answering; its URL. Stopped when the block ends."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_up(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def authentication_on(url: str) -> None:
    """Turn moto's IAM authentication on: from now on only keys its IAM issued are accepted."""
    answer = json.loads(_post(f"{url}/moto-api/reset-auth", b"0"))
    assert answer["status"] == "ok"


@pytest.fixture(scope="session")
def moto() -> Iterator[Moto]:
    with moto_process() as url:
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

        authentication_on(url)
        running = Moto(url, boundary_arn, manager, root)
        # Authentication really is on: keys IAM never issued are refused.
        with pytest.raises(ClientError) as refused:
            client(running, "s3", anyone).list_objects_v2(Bucket=BUCKET)
        assert refused.value.response["Error"]["Code"] == "InvalidAccessKeyId"
        yield running


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
    """A tenant of this test only: IAM state persists across the session's tests."""
    return f"t{uuid.uuid4().hex[:10]}"


def code_of(call: Any) -> str:
    """The error code of a boto3 call that must fail."""
    with pytest.raises(ClientError) as failure:
        call()
    return str(failure.value.response["Error"]["Code"])


def seed(moto: Moto, key: str, body: bytes = b"seeded") -> None:
    client(moto, "s3", moto.manager).put_object(Bucket=BUCKET, Key=key, Body=body)
