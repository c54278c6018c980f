"""The IAM names and checks every IAM user workflow-manager creates shares, and the policy of
the model readers. Purely computational: names and JSON documents only.

workflow-manager creates two kinds of IAM users, all on ``ARTIFACT_IAM_USER_PATH``, all
capped by ``ARTIFACT_IAM_BOUNDARY_ARN`` (``shared.iam_users`` talks to IAM):

- a tenant's storage user ``<prefix><tenant>`` (the compiler: ``compiler.tenants.storage_policy``
  holds its policy, the boundary and workflow-manager's own policy), which reads and writes
  the tenant's artifacts and training data;
- a tenant's model reader ``<prefix>.<tenant>`` (stagectl: KServe's storage initializer
  downloads models with its key), which can only read the tenant's registered models
  (``model_reader_policy``). A tenant id has no ``.``, so no reader name is ever a storage
  user's; when the name would pass IAM's 64 characters the tenant id is shortened and a
  digest of it appended.

Settings are validated here: a ``*`` in a bucket name or user path would silently turn a
resource ARN into a wildcard, and a path of ``/`` would hand workflow-manager every user of the
account (CreateAccessKey on an administrator).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final

from shared import storage
from shared.errors import ConfigError, Invalid
from shared.identifiers import TENANT_ID

PARTITION: Final = "aws"  # the platform runs in commercial regions; aws-cn/aws-us-gov would differ
POLICY_VERSION: Final = "2012-10-17"

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


def bucket_arn(bucket: str) -> str:
    return f"arn:{PARTITION}:s3:::{check_bucket(bucket)}"


MODEL_READER_POLICY_NAME: Final = "workflow-manager-model-reader"
MODEL_READER_SEPARATOR: Final = "."  # never in a tenant id
_DIGEST_LENGTH: Final = 10


def model_reader_name(prefix: str, tenant: str) -> str:
    """The IAM user name of ``tenant``'s model reader: ``<prefix>.<tenant>``, or, past 64
    characters, ``<prefix>.<tenant shortened>.<digest of the tenant>``."""
    name = check_user_prefix(prefix) + MODEL_READER_SEPARATOR + check_tenant(tenant)
    if len(name) <= MAX_USER_NAME_LENGTH:
        return name
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:_DIGEST_LENGTH]
    room = MAX_USER_NAME_LENGTH - len(prefix) - 2 - _DIGEST_LENGTH
    return f"{prefix}{MODEL_READER_SEPARATOR}{tenant[:room]}{MODEL_READER_SEPARATOR}{digest}"


def model_reader_policy(bucket: str, tenant: str) -> dict[str, Any]:
    """The inline policy of ``tenant``'s model reader: get and list its registered models
    (``tenants/<tenant>/models/``), nothing else (no artifacts, no training data, no other
    tenant, no write)."""
    arn = bucket_arn(bucket)
    models = tenant_prefixes(tenant).models
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "ListRegisteredModels",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": arn,
                "Condition": {"StringLike": {"s3:prefix": [models, f"{models}*"]}},
            },
            {
                "Sid": "ReadRegisteredModels",
                "Effect": "Allow",
                "Action": list(OBJECT_READ),
                "Resource": f"{arn}/{models}*",
            },
        ],
    }
