"""Tenants' IAM storage users: created, granted, keyed and deleted (``shared.iam_users`` talks
to IAM; the names and documents come from ``compiler.tenants.storage_policy``).

A tenant's user is ``<ARTIFACT_IAM_USER_PREFIX><tenant>`` on ``ARTIFACT_IAM_USER_PATH``, capped
by ``ARTIFACT_IAM_BOUNDARY_ARN`` and granted ``tenant_user_policy``; errors are those of
``shared.iam_users`` (DependencyDown, ConfigError, Conflict). A secret access key exists only in
the ``StorageCredentials`` returned by ``issue_key``, whose repr hides it.
"""

from __future__ import annotations

from typing import Any

from compiler.tenants import storage_policy as policies
from shared.iam_users import (
    MANAGED_BY_TAG,
    MAX_ACCESS_KEYS,
    REQUIRED,
    TENANT_TAG,
    StorageCredentials,
    TenantUsers,
)

__all__ = [
    "MANAGED_BY_TAG",
    "MAX_ACCESS_KEYS",
    "REQUIRED",
    "TENANT_TAG",
    "StorageCredentials",
    "StorageUsers",
]


class StorageUsers(TenantUsers):
    """Each tenant's IAM user on ``user_path``, named ``<user_prefix><tenant>``, capped by
    ``boundary_arn`` and granted ``tenant_user_policy(bucket, tenant)``."""

    kind = "storage"
    policy_name = policies.POLICY_NAME

    def user_name(self, tenant: str) -> str:
        return policies.user_name(self.user_prefix, tenant)

    def policy(self, tenant: str) -> dict[str, Any]:
        return policies.tenant_user_policy(self.bucket, tenant)
