"""The object-storage layout and the three IAM policies that guard it.

Purely computational, no side effects: names and JSON documents only;
``compiler.tenants.storage_users`` sends them to IAM. One bucket holds every tenant under
``tenants/<tenant>/``:

- ``artifacts/`` pipeline artifacts (Argo's artifact repository): the tenant reads and writes;
- ``training/`` ML training storage (checkpoints, datasets): the tenant reads and writes;
- ``models/``    registered models, written only by workflow-manager's registration stage: the
  tenant only reads, so a run cannot rewrite a version that was gated and approved.

Three documents (docs/iam.md shows each):

- ``tenant_user_policy``: the inline policy of a tenant's IAM user;
- ``boundary_policy``: the permissions boundary every tenant user carries, created once by an
  operator; it caps what any inline policy can grant, so even a bug in ``tenant_user_policy``
  cannot reach beyond ``tenants/`` of the bucket;
- ``manager_policy``: workflow-manager's own permissions. It may create users only on its path and
  only with that boundary, and may never change or remove a boundary, so a compromised
  workflow-manager still cannot mint credentials broader than the boundary.

Settings are validated here, not only in ``StorageUsers``: a ``*`` in a bucket name or user path
would silently turn a resource ARN into a wildcard, and a path of ``/`` would hand
workflow-manager every user of the account (CreateAccessKey on an administrator).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from shared import storage
from shared.errors import ConfigError, Invalid
from shared.identifiers import TENANT_ID

PARTITION: Final = "aws"  # the platform runs in commercial regions; aws-cn/aws-us-gov would differ
POLICY_VERSION: Final = "2012-10-17"
POLICY_NAME: Final = "workflow-manager-storage"  # the inline policy's name on every tenant user

MAX_TENANT_LENGTH: Final = 48
MAX_USER_NAME_LENGTH: Final = 64  # IAM's limit
# Room left for the prefix once the longest tenant id is in the name.
MAX_USER_PREFIX_LENGTH: Final = MAX_USER_NAME_LENGTH - MAX_TENANT_LENGTH
# IAM user names: letters, digits and + = , . @ _ - (the API's [\w+=,.@-]+).
_USER_NAME_CHARS = re.compile(r"^[A-Za-z0-9+=,.@_-]+$")
# IAM paths are /…/ of printable ASCII; we also refuse the wildcards * and ?, which would widen
# the ``user<path>*`` resource of the manager policy, and require at least one segment.
_USER_PATH = re.compile(r"^/(?:[\x21-\x7e]+/)+$")
MAX_USER_PATH_LENGTH: Final = 512
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ACCOUNT = re.compile(r"^[0-9]{12}$")
_BOUNDARY_ARN = re.compile(r"^arn:aws:iam::[0-9]{12}:policy/[A-Za-z0-9+=,.@_/-]+$")

# Object actions on the read-write prefixes. Multipart: PutObject covers CreateMultipartUpload,
# UploadPart and CompleteMultipartUpload; aborting and listing parts are separate actions.
OBJECT_READ_WRITE: Final = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
OBJECT_READ: Final = ("s3:GetObject",)

# What workflow-manager does to a tenant user after creating it (compiler.tenants.storage_users).
# iam:TagUser is needed because CreateUser carries tags.
MANAGER_USER_ACTIONS: Final = (
    "iam:GetUser",
    "iam:TagUser",
    "iam:ListUserPolicies",
    "iam:DeleteUserPolicy",
    "iam:ListAccessKeys",
    "iam:CreateAccessKey",
    "iam:DeleteAccessKey",
    "iam:DeleteUser",
)
# The boundary may be set only by CreateUser (with the condition); never changed or removed.
BOUNDARY_CHANGES: Final = ("iam:PutUserPermissionsBoundary", "iam:DeleteUserPermissionsBoundary")
# The boundary document itself is the operator's: a new default version would widen every user.
BOUNDARY_POLICY_CHANGES: Final = (
    "iam:CreatePolicyVersion",
    "iam:SetDefaultPolicyVersion",
    "iam:DeletePolicyVersion",
    "iam:DeletePolicy",
)


@dataclass(frozen=True)
class TenantPrefixes:
    """A tenant's key prefixes in the bucket, each ending in ``/`` so ``acme`` never matches
    ``acme-2``."""

    root: str
    artifacts: str
    training: str
    models: str


def check_tenant(tenant: str) -> str:
    """The tenant id, or Invalid when it is not one (it becomes part of names and ARNs)."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise Invalid("not a tenant id", details={"tenant": str(tenant)[:64]})
    return tenant


def check_bucket(bucket: str) -> str:
    """ARTIFACT_BUCKET, or ConfigError: a bucket name with ``*`` would grant every bucket."""
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(f"ARTIFACT_BUCKET: {bucket!r} is not an S3 bucket name")
    return bucket


def check_user_path(path: str) -> str:
    """ARTIFACT_IAM_USER_PATH, or ConfigError: ``/x/…/``, no wildcards, never ``/`` alone."""
    if (
        len(path) > MAX_USER_PATH_LENGTH
        or not _USER_PATH.fullmatch(path)
        or "*" in path
        or "?" in path
        or "//" in path
    ):
        raise ConfigError(
            f"ARTIFACT_IAM_USER_PATH: {path!r} must look like /workflow-manager/tenants/ "
            "(a path of its own, starting and ending with /, without * or ?)"
        )
    return path


def check_user_prefix(prefix: str) -> str:
    """ARTIFACT_IAM_USER_PREFIX, or ConfigError when the longest tenant id would not fit."""
    if not prefix or not _USER_NAME_CHARS.fullmatch(prefix) or len(prefix) > MAX_USER_PREFIX_LENGTH:
        raise ConfigError(
            f"ARTIFACT_IAM_USER_PREFIX: {prefix!r} must be 1 to {MAX_USER_PREFIX_LENGTH} of "
            "A-Z a-z 0-9 + = , . @ _ - (IAM user names are at most 64 characters and "
            "unique across the account)"
        )
    return prefix


def check_boundary_arn(arn: str) -> str:
    """ARTIFACT_IAM_BOUNDARY_ARN, or ConfigError unless it names a customer managed policy."""
    if not _BOUNDARY_ARN.fullmatch(arn):
        raise ConfigError(
            f"ARTIFACT_IAM_BOUNDARY_ARN: {arn!r} is not a policy ARN such as "
            "arn:aws:iam::123456789012:policy/workflow-manager-tenant-boundary"
        )
    return arn


def check_account_id(account_id: str) -> str:
    """A 12-digit account id, or ``*`` for "whichever account this is"."""
    if account_id != "*" and not _ACCOUNT.fullmatch(account_id):
        raise ConfigError(f"account id: {account_id!r} is neither 12 digits nor *")
    return account_id


def user_name(prefix: str, tenant: str) -> str:
    """The IAM user name of ``tenant``: ``<prefix><tenant>``, at most 64 characters."""
    return check_user_prefix(prefix) + check_tenant(tenant)


def tenant_prefixes(tenant: str) -> TenantPrefixes:
    """The tenant's prefixes in the bucket (``tenants/<tenant>/…/``)."""
    tenant = check_tenant(tenant)
    return TenantPrefixes(
        root=storage.tenant_prefix(tenant),
        artifacts=storage.tenant_artifacts(tenant),
        training=storage.tenant_training(tenant),
        models=storage.tenant_models(tenant),
    )


def _bucket_arn(bucket: str) -> str:
    return f"arn:{PARTITION}:s3:::{check_bucket(bucket)}"


def tenant_user_policy(bucket: str, tenant: str) -> dict[str, Any]:
    """The inline policy of ``tenant``'s user: read-write artifacts/ and training/, read models/,
    list only those prefixes, nothing else (no other bucket, no other tenant, no IAM)."""
    bucket_arn = _bucket_arn(bucket)
    prefixes = tenant_prefixes(tenant)
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                # The bare root lets a client browse with a delimiter and see its three folders;
                # the sub-prefixes are listed one by one so a prefix added under tenants/<t>/
                # later is not listable until someone decides it should be.
                "Sid": "ListOwnPrefixes",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket_arn,
                "Condition": {
                    "StringLike": {
                        "s3:prefix": [
                            prefixes.root,
                            f"{prefixes.artifacts}*",
                            f"{prefixes.training}*",
                            f"{prefixes.models}*",
                        ]
                    }
                },
            },
            {
                "Sid": "ReadWriteArtifactsAndTraining",
                "Effect": "Allow",
                "Action": list(OBJECT_READ_WRITE),
                "Resource": [
                    f"{bucket_arn}/{prefixes.artifacts}*",
                    f"{bucket_arn}/{prefixes.training}*",
                ],
            },
            {
                "Sid": "ReadRegisteredModels",
                "Effect": "Allow",
                "Action": list(OBJECT_READ),
                "Resource": f"{bucket_arn}/{prefixes.models}*",
            },
        ],
    }


def boundary_policy(bucket: str) -> dict[str, Any]:
    """The permissions boundary of every tenant user: at most the object actions under
    ``tenants/`` of the bucket and listing that bucket. Created once by an operator."""
    bucket_arn = _bucket_arn(bucket)
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "ListTheArtifactBucket",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket_arn,
            },
            {
                "Sid": "ObjectsUnderTenants",
                "Effect": "Allow",
                "Action": list(OBJECT_READ_WRITE),
                "Resource": f"{bucket_arn}/tenants/*",
            },
        ],
    }


def manager_policy(
    *, bucket: str, user_path: str, boundary_arn: str, account_id: str = "*"
) -> dict[str, Any]:
    """workflow-manager's own policy: tenant users only on ``user_path``, only with
    ``boundary_arn``; boundaries never changed; read-write on the whole bucket."""
    users = f"arn:{PARTITION}:iam::{check_account_id(account_id)}:user{check_user_path(user_path)}*"
    with_boundary = {"StringEquals": {"iam:PermissionsBoundary": check_boundary_arn(boundary_arn)}}
    bucket_arn = _bucket_arn(bucket)
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                # iam:PermissionsBoundary is the boundary in the request (CreateUser) or the one
                # the user already carries (PutUserPolicy): an inline policy can only be put on
                # a user that is capped by the boundary.
                "Sid": "CreateAndGrantTenantUsersWithBoundary",
                "Effect": "Allow",
                "Action": ["iam:CreateUser", "iam:PutUserPolicy"],
                "Resource": users,
                "Condition": with_boundary,
            },
            {
                "Sid": "ManageTenantUsers",
                "Effect": "Allow",
                "Action": list(MANAGER_USER_ACTIONS),
                "Resource": users,
            },
            {
                "Sid": "NeverChangeBoundaries",
                "Effect": "Deny",
                "Action": list(BOUNDARY_CHANGES),
                "Resource": "*",
            },
            {
                "Sid": "NeverChangeTheBoundaryPolicy",
                "Effect": "Deny",
                "Action": list(BOUNDARY_POLICY_CHANGES),
                "Resource": boundary_arn,
            },
            {
                # The registration stage writes models/, the apiserver streams artifacts.
                "Sid": "ListTheArtifactBucket",
                "Effect": "Allow",
                "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
                "Resource": bucket_arn,
            },
            {
                "Sid": "ReadWriteTheArtifactBucket",
                "Effect": "Allow",
                "Action": list(OBJECT_READ_WRITE),
                "Resource": f"{bucket_arn}/*",
            },
        ],
    }
