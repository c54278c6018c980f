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

from typing import Any

from shared import storage_policy as policies
from shared.iam_users import TenantUsers


class ModelReaders(TenantUsers):
    """Each tenant's model reader (see the module docstring); ``ensure_user`` creates it and
    puts its policy again, ``issue_key`` gives it a new key (store it before models load)."""

    kind = "model_reader"
    policy_name = policies.MODEL_READER_POLICY_NAME

    def user_name(self, tenant: str) -> str:
        return policies.model_reader_name(self.user_prefix, tenant)

    def policy(self, tenant: str) -> dict[str, Any]:
        return policies.model_reader_policy(self.bucket, tenant)
