"""Each tenant's model reader: the IAM user whose key KServe's storage initializer downloads the
tenant's registered models with (``shared.iam_users`` talks to IAM).

``<ARTIFACT_IAM_USER_PREFIX>.<tenant>`` (``shared.storage_policy.model_reader_name``) on
``ARTIFACT_IAM_USER_PATH``, capped by ``ARTIFACT_IAM_BOUNDARY_ARN`` like the tenants' storage
users, granted ``model_reader_policy``: GetObject and ListBucket under ``tenants/<t>/models/``
only. Not the tenant's storage user, which writes its artifacts and training data: a model
server compromised through a tenant's model can read that tenant's registered models and
nothing else.
"""

from __future__ import annotations

from typing import Any, Final

from shared import storage_policy as policies
from shared.config import Settings
from shared.iam_users import IamUsers, StorageCredentials, iam_client

REQUIRED: Final = (
    "ARTIFACT_BUCKET",
    "ARTIFACT_IAM_USER_PATH",
    "ARTIFACT_IAM_USER_PREFIX",
    "ARTIFACT_IAM_BOUNDARY_ARN",
)


class ModelReaders:
    def __init__(
        self, *, iam: Any, bucket: str, user_path: str, user_prefix: str, boundary_arn: str
    ) -> None:
        self._users = IamUsers(
            iam=iam, user_path=user_path, boundary_arn=boundary_arn, kind="model_reader"
        )
        self.bucket = policies.check_bucket(bucket)
        self.user_prefix = policies.check_user_prefix(user_prefix)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> ModelReaders:
        """From the four ARTIFACT_* settings (ConfigError names each one unset);
        ``endpoint_url`` is IAM's (None: AWS), explicit credentials are for tests."""
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
        return policies.model_reader_name(self.user_prefix, tenant)

    async def ensure_reader(self, tenant: str) -> str:
        """Create the tenant's reader when missing, put its policy again; its name."""
        return await self._users.ensure_user(
            self.user_name(tenant),
            tenant=tenant,
            policy_name=policies.MODEL_READER_POLICY_NAME,
            policy=policies.model_reader_policy(self.bucket, tenant),
        )

    async def issue_key(self, tenant: str) -> StorageCredentials:
        """A new key for the reader, every older one deleted: store it before models load."""
        return await self._users.issue_key(self.user_name(tenant), tenant=tenant)

    async def current_key_ids(self, tenant: str) -> list[str]:
        return await self._users.current_key_ids(self.user_name(tenant))

    async def delete_reader(self, tenant: str) -> None:
        await self._users.delete_user(self.user_name(tenant), tenant=tenant)
