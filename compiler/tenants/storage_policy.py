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

from typing import Any, Final

from shared import storage_policy as shared_policy
from shared.storage_policy import (
    OBJECT_READ,
    OBJECT_READ_WRITE,
    PARTITION,
    POLICY_VERSION,
    TenantPrefixes,
    check_account_id,
    check_boundary_arn,
    check_bucket,
    check_tenant,
    check_user_path,
    check_user_prefix,
    tenant_prefixes,
    user_name,
)

__all__ = [
    "BOUNDARY_CHANGES",
    "BOUNDARY_POLICY_CHANGES",
    "MANAGER_USER_ACTIONS",
    "OBJECT_READ",
    "OBJECT_READ_WRITE",
    "POLICY_NAME",
    "TenantPrefixes",
    "boundary_policy",
    "check_account_id",
    "check_boundary_arn",
    "check_bucket",
    "check_tenant",
    "check_user_path",
    "check_user_prefix",
    "manager_policy",
    "tenant_prefixes",
    "tenant_user_policy",
    "user_name",
]

POLICY_NAME: Final = "workflow-manager-storage"  # the inline policy's name on every tenant user

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


def tenant_user_policy(bucket: str, tenant: str) -> dict[str, Any]:
    """The inline policy of ``tenant``'s user: read-write artifacts/ and training/, read models/,
    list only those prefixes, nothing else (no other bucket, no other tenant, no IAM)."""
    bucket_arn = shared_policy.bucket_arn(bucket)
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
    bucket_arn = shared_policy.bucket_arn(bucket)
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
    bucket_arn = shared_policy.bucket_arn(bucket)
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
