"""IAM users workflow-manager creates on its own path with its boundary: created, granted,
keyed and deleted through boto3. The compiler's tenant storage users
(``compiler.tenants.storage_users``) and stagectl's model readers
(``stagectl.serving.readers``) are both ``TenantUsers`` (over ``IamUsers``); the names and
documents come from ``shared.storage_policy`` and ``compiler.tenants.storage_policy``.

boto3 blocks, so every call runs in a worker thread (``asyncio.to_thread``). Every operation
converges when repeated: a user that exists is reused, the inline policy is put again on every
``ensure_user`` (so a change of a policy reaches every user on the next reconcile), and deleting
what is already gone succeeds. botocore's errors become ``shared.errors``: unreachable or
failing IAM is ``DependencyDown`` (retry later); IAM refusing workflow-manager's own
credentials is ``ConfigError`` (its policy, docs/iam.md, is missing or does not match the
settings: retrying will not help).

A secret access key exists only in the ``StorageCredentials`` returned by ``issue_key``, whose
repr hides it; nothing here logs a key id or a secret.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self

import boto3  # type: ignore[import-untyped]
import botocore.exceptions  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]

from shared import storage_policy as policies
from shared.config import Settings
from shared.errors import ConfigError, Conflict, DependencyDown, NotFound, WorkflowManagerError
from shared.logging import get_logger

log = get_logger(__name__)

TENANT_TAG: Final = "workflow-manager/tenant"
MANAGED_BY_TAG: Final = "app.kubernetes.io/managed-by"
MAX_ACCESS_KEYS: Final = 2  # IAM's limit per user

# What a family of per-tenant users is built from (``TenantUsers.from_settings``).
REQUIRED: Final = (
    "ARTIFACT_BUCKET",
    "ARTIFACT_IAM_USER_PATH",
    "ARTIFACT_IAM_USER_PREFIX",
    "ARTIFACT_IAM_BOUNDARY_ARN",
)
_MISSING = frozenset({"NoSuchEntity"})
_EXISTS = frozenset({"EntityAlreadyExists"})
_REFUSED = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "ExpiredToken",
    }
)
_RETRYABLE = frozenset(
    {
        "ServiceFailure",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "ConcurrentModification",
    }
)


@dataclass(frozen=True)
class StorageCredentials:
    """A tenant user's access key. The secret stays out of repr, so logging the object, an
    exception carrying it or a test failure never prints it."""

    user_name: str
    access_key_id: str
    secret_access_key: str = field(repr=False)


def iam_client(
    settings: Settings,
    *,
    endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
) -> Any:
    """boto3's IAM client in ``AWS_REGION``. ``endpoint_url`` is IAM's (None: AWS);
    S3_ENDPOINT_URL is not reused because an S3 stand-in such as MinIO has no IAM API.
    Explicit credentials are for tests; in production boto3 finds the pod's own."""
    return boto3.session.Session(
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        region_name=settings.AWS_REGION,
    ).client(
        "iam",
        endpoint_url=endpoint_url,
        config=Config(
            connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"}
        ),
    )


class IamUsers:
    """Users on ``user_path`` capped by ``boundary_arn``, each tagged with its tenant.
    ``kind`` names them in logs (``<kind>_user_created``, ``<kind>_key_issued``,
    ``<kind>_user_deleted``) and errors: ``storage`` for tenants' storage users."""

    def __init__(self, *, iam: Any, user_path: str, boundary_arn: str, kind: str) -> None:
        self._iam = iam
        self.user_path = policies.check_user_path(user_path)
        self.boundary_arn = policies.check_boundary_arn(boundary_arn)
        self._kind = kind
        self._what = kind.replace("_", " ") + " user"

    async def ensure_user(
        self, name: str, *, tenant: str, policy_name: str, policy: Mapping[str, Any]
    ) -> str:
        """Create the user if it is missing, then put its inline policy; return its name.
        Conflict when a user of that name exists elsewhere or with another boundary."""
        document = json.dumps(policy, separators=(",", ":"))
        existing = await self._call("GetUser", self._iam.get_user, tolerate=_MISSING, UserName=name)
        if existing is None:
            created = await self._call(
                "CreateUser",
                self._iam.create_user,
                tolerate=_EXISTS,
                UserName=name,
                Path=self.user_path,
                PermissionsBoundary=self.boundary_arn,
                Tags=[
                    {"Key": TENANT_TAG, "Value": tenant},
                    {"Key": MANAGED_BY_TAG, "Value": "workflow-manager"},
                ],
            )
            if created is not None:
                log.info(f"{self._kind}_user_created", tenant=tenant, user=name)
            else:  # another replica created it between our GetUser and CreateUser
                existing = await self._call("GetUser", self._iam.get_user, UserName=name)
        if existing is not None:
            self._check_ours(existing["User"], tenant=tenant)
        await self._call(
            "PutUserPolicy",
            self._iam.put_user_policy,
            UserName=name,
            PolicyName=policy_name,
            PolicyDocument=document,
        )
        return name

    def _check_ours(self, user: Mapping[str, Any], *, tenant: str) -> None:
        # IAM user names are unique across the account, whatever their path: a user of this
        # name outside our path belongs to someone else and must not be granted anything.
        if user.get("Path") != self.user_path:
            raise Conflict(
                f"an IAM user with the tenant's {self._what} name exists outside "
                "workflow-manager's path",
                details={"tenant": tenant, "user": user.get("UserName"), "path": user.get("Path")},
            )
        # A user without any boundary is refused by IAM itself at PutUserPolicy (the manager
        # policy's condition); one with a different boundary is reported here by name.
        boundary = (user.get("PermissionsBoundary") or {}).get("PermissionsBoundaryArn")
        if boundary is not None and boundary != self.boundary_arn:
            raise Conflict(
                f"the tenant's {self._what} carries another permissions boundary",
                details={"tenant": tenant, "user": user.get("UserName"), "boundary": boundary},
            )

    async def issue_key(self, name: str, *, tenant: str) -> StorageCredentials:
        """Create a new access key for the tenant's user and delete every older one.

        IAM allows two keys per user; when two exist already the oldest goes first to make
        room. Afterwards only the new key works, so the caller must store it (the tenant
        namespace's Secret) before runs need it.
        """
        older = await self._keys(name)
        if len(older) >= MAX_ACCESS_KEYS:
            oldest = min(older, key=lambda key: key["CreateDate"])
            await self._delete_key(name, str(oldest["AccessKeyId"]))
            older.remove(oldest)
        answer = await self._call("CreateAccessKey", self._iam.create_access_key, UserName=name)
        key = answer["AccessKey"]
        for stale in older:
            await self._delete_key(name, str(stale["AccessKeyId"]))
        log.info(f"{self._kind}_key_issued", tenant=tenant, user=name, deleted_keys=len(older))
        return StorageCredentials(
            user_name=name,
            access_key_id=str(key["AccessKeyId"]),
            secret_access_key=str(key["SecretAccessKey"]),
        )

    async def current_key_ids(self, name: str) -> list[str]:
        """The ids of the tenant user's access keys, oldest first; empty when there is no user
        (a reconciler compares them with the key id in the tenant's Secret)."""
        keys = await self._keys(name)
        keys.sort(key=lambda key: key["CreateDate"])
        return [str(key["AccessKeyId"]) for key in keys]

    async def delete_user(self, name: str, *, tenant: str) -> None:
        """Delete the tenant's keys, inline policies and user; a missing user is not an error.
        Conflict when IAM still finds something attached that workflow-manager did not put
        there (a managed policy, a login profile, a group)."""
        for key in await self._keys(name):
            await self._delete_key(name, str(key["AccessKeyId"]))
        listed = await self._call(
            "ListUserPolicies", self._iam.list_user_policies, tolerate=_MISSING, UserName=name
        )
        for policy_name in (listed or {}).get("PolicyNames", []):
            await self._call(
                "DeleteUserPolicy",
                self._iam.delete_user_policy,
                tolerate=_MISSING,
                UserName=name,
                PolicyName=policy_name,
            )
        deleted = await self._call(
            "DeleteUser", self._iam.delete_user, tolerate=_MISSING, UserName=name
        )
        if deleted is not None:
            log.info(f"{self._kind}_user_deleted", tenant=tenant, user=name)

    async def _keys(self, name: str) -> list[dict[str, Any]]:
        listed = await self._call(
            "ListAccessKeys", self._iam.list_access_keys, tolerate=_MISSING, UserName=name
        )
        return list((listed or {}).get("AccessKeyMetadata", []))

    async def _delete_key(self, name: str, key_id: str) -> None:
        await self._call(
            "DeleteAccessKey",
            self._iam.delete_access_key,
            tolerate=_MISSING,
            UserName=name,
            AccessKeyId=key_id,
        )

    async def _call(
        self,
        operation: str,
        method: Callable[..., Any],
        *,
        tolerate: frozenset[str] = frozenset(),
        **params: Any,
    ) -> Any:
        """Run one IAM call in a thread and return boto3's answer; None when IAM answers with an
        error code in ``tolerate`` (NoSuchEntity on a delete someone already did,
        EntityAlreadyExists on a create that raced another replica); any other failure as a
        shared error."""
        try:
            return await asyncio.to_thread(method, **params)
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in tolerate:
                return None
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            raise _translate(operation, code, status) from exc
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            raise DependencyDown(
                "IAM is unreachable",
                details={"dependency": "iam", "operation": operation, "error": type(exc).__name__},
            ) from exc


class TenantUsers:
    """One IAM user per tenant, of one family: the compiler's storage users and stagectl's
    model readers are both. A subclass names its family (``kind``, in logs and errors), its
    users (``user_name``) and their inline policy (``policy_name``, ``policy``); the rest,
    from the settings to deleting a user, is the same for every family."""

    kind: ClassVar[str]
    policy_name: ClassVar[str]

    def __init__(
        self, *, iam: Any, bucket: str, user_path: str, user_prefix: str, boundary_arn: str
    ) -> None:
        self._users = IamUsers(
            iam=iam, user_path=user_path, boundary_arn=boundary_arn, kind=self.kind
        )
        self.bucket = policies.check_bucket(bucket)
        self.user_path = self._users.user_path
        self.user_prefix = policies.check_user_prefix(user_prefix)
        self.boundary_arn = self._users.boundary_arn

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> Self:
        """Build from the four ARTIFACT_* settings (``REQUIRED``); ConfigError names every one
        that is unset. ``endpoint_url`` is IAM's (None: AWS); explicit credentials are for
        tests."""
        settings.require(*REQUIRED)
        return cls(
            iam=iam_client(
                settings,
                endpoint_url=endpoint_url,
                access_key_id=access_key_id,
                secret_access_key=secret_access_key,
            ),
            bucket=str(settings.ARTIFACT_BUCKET),
            user_path=str(settings.ARTIFACT_IAM_USER_PATH),
            user_prefix=str(settings.ARTIFACT_IAM_USER_PREFIX),
            boundary_arn=str(settings.ARTIFACT_IAM_BOUNDARY_ARN),
        )

    def user_name(self, tenant: str) -> str:
        """The IAM user name of ``tenant`` in this family."""
        raise NotImplementedError

    def policy(self, tenant: str) -> Mapping[str, Any]:
        """The inline policy of ``tenant``'s user in this family."""
        raise NotImplementedError

    async def ensure_user(self, tenant: str) -> str:
        """Create the tenant's user if it is missing, then put its inline policy; return its
        name. Conflict when a user of that name exists elsewhere or with another boundary."""
        return await self._users.ensure_user(
            self.user_name(tenant),
            tenant=tenant,
            policy_name=self.policy_name,
            policy=self.policy(tenant),
        )

    async def issue_key(self, tenant: str) -> StorageCredentials:
        """A new access key for the tenant's user, every older one deleted (the caller must
        store it before anything needs it)."""
        return await self._users.issue_key(self.user_name(tenant), tenant=tenant)

    async def current_key_ids(self, tenant: str) -> list[str]:
        """The ids of the tenant user's access keys, oldest first; empty without a user."""
        return await self._users.current_key_ids(self.user_name(tenant))

    async def delete_user(self, tenant: str) -> None:
        """Delete the tenant's keys, inline policies and user; a missing user is not an error."""
        await self._users.delete_user(self.user_name(tenant), tenant=tenant)


def _translate(operation: str, code: str, status: int) -> WorkflowManagerError:
    details = {"dependency": "iam", "operation": operation, "code": code}
    if code in _REFUSED:
        return ConfigError(
            f"IAM refused {operation} to workflow-manager: its IAM policy is missing or does not "
            "match ARTIFACT_IAM_USER_PATH / ARTIFACT_IAM_BOUNDARY_ARN (docs/iam.md)",
            details=details,
        )
    if code in _MISSING:
        return NotFound(f"IAM has no such user ({operation})", details=details)
    if code in _RETRYABLE or status >= 500:
        return DependencyDown("IAM failed the request", details=details)
    if code in {"DeleteConflict", "LimitExceeded", "EntityAlreadyExists"}:
        return Conflict(f"IAM refused {operation}: {code}", details=details)
    return WorkflowManagerError(f"IAM rejected {operation}: {code}", details=details)
