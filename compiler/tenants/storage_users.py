"""Tenants' IAM storage users: created, granted, keyed and deleted (``shared.iam_users`` talks
to IAM; the names and documents come from ``compiler.tenants.storage_policy``).

A tenant's user is ``<ARTIFACT_IAM_USER_PREFIX><tenant>`` on ``ARTIFACT_IAM_USER_PATH``, capped
by ``ARTIFACT_IAM_BOUNDARY_ARN`` and granted ``tenant_user_policy``; errors are those of
``shared.iam_users`` (DependencyDown, ConfigError, Conflict). A secret access key exists only in
the ``StorageCredentials`` returned by ``issue_key``, whose repr hides it.
"""

from __future__ import annotations

from typing import Any, Final

from compiler.tenants import storage_policy as policies
from shared.config import Settings
from shared.iam_users import (
    MANAGED_BY_TAG,
    MAX_ACCESS_KEYS,
    TENANT_TAG,
    IamUsers,
    StorageCredentials,
    iam_client,
)

__all__ = ["MANAGED_BY_TAG", "MAX_ACCESS_KEYS", "TENANT_TAG", "StorageCredentials", "StorageUsers"]

REQUIRED: Final = (
    "ARTIFACT_BUCKET",
    "ARTIFACT_IAM_USER_PATH",
    "ARTIFACT_IAM_USER_PREFIX",
    "ARTIFACT_IAM_BOUNDARY_ARN",
)


class StorageUsers:
    """Each tenant's IAM user on ``user_path``, named ``<user_prefix><tenant>``, capped by
    ``boundary_arn`` and granted ``tenant_user_policy(bucket, tenant)``."""

    def __init__(
        self,
        *,
        iam: Any,
        bucket: str,
        user_path: str,
        user_prefix: str,
        boundary_arn: str,
    ) -> None:
        self._users = IamUsers(
            iam=iam, user_path=user_path, boundary_arn=boundary_arn, kind="storage"
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
    ) -> StorageUsers:
        """Build from the four ARTIFACT_* settings; ConfigError names every one that is unset.
        ``endpoint_url`` is IAM's (None: AWS); explicit credentials are for tests."""
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
        """The IAM user name of ``tenant``."""
        return policies.user_name(self.user_prefix, tenant)

    async def ensure_user(self, tenant: str) -> str:
        """Create the tenant's user if it is missing, then put its inline policy; return its
        name. Conflict when a user of that name exists elsewhere or with another boundary."""
        return await self._users.ensure_user(
            self.user_name(tenant),
            tenant=tenant,
            policy_name=policies.POLICY_NAME,
            policy=policies.tenant_user_policy(self.bucket, tenant),
        )

    async def issue_key(self, tenant: str) -> StorageCredentials:
        """A new access key for the tenant's user, every older one deleted (the caller must
        store it, the tenant namespace's Secret, before runs need it)."""
        return await self._users.issue_key(self.user_name(tenant), tenant=tenant)

    async def current_key_ids(self, tenant: str) -> list[str]:
        """The ids of the tenant user's access keys, oldest first; empty without a user."""
        return await self._users.current_key_ids(self.user_name(tenant))

    async def delete_user(self, tenant: str) -> None:
        """Delete the tenant's keys, inline policies and user; a missing user is not an error."""
        await self._users.delete_user(self.user_name(tenant), tenant=tenant)
