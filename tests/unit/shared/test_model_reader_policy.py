"""shared.storage_policy: the model readers' names and policy (the names and checks every
user shares are tested with the compiler's policies, tests/unit/compiler/test_storage_policy.py)."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import storage_policy as sp
from shared.errors import Invalid
from shared.identifiers import TENANT_ID

tenants = st.from_regex(TENANT_ID, fullmatch=True)
prefixes = st.from_regex(r"\A[A-Za-z0-9+=,.@_-]{1,16}\Z")
BUCKET = "wm-artifacts"


@given(prefix=prefixes, tenant=tenants, other=tenants)
def test_a_reader_name_fits_iam_and_is_never_a_storage_users(
    prefix: str, tenant: str, other: str
) -> None:
    name = sp.model_reader_name(prefix, tenant)
    assert len(name) <= sp.MAX_USER_NAME_LENGTH
    assert name.startswith(prefix)
    assert name != sp.user_name(prefix, other)
    if other != tenant:
        assert name != sp.model_reader_name(prefix, other)


def test_a_reader_name_is_readable_when_it_fits() -> None:
    assert sp.model_reader_name("wm-", "acme") == "wm-.acme"
    long = sp.model_reader_name("p" * 16, "t" * 48)
    assert len(long) == 64
    assert long.startswith("p" * 16 + ".ttt")


def test_malformed_readers_are_refused() -> None:
    with pytest.raises(Invalid, match="tenant id"):
        sp.model_reader_name("wm-", "a.b")
    with pytest.raises(Exception, match="ARTIFACT_IAM_USER_PREFIX"):
        sp.model_reader_name("wm*", "acme")


def _allowed(policy: dict[str, object], action: str, resource: str) -> bool:
    statements = policy["Statement"]
    assert isinstance(statements, list)
    for statement in statements:
        actions = statement["Action"]
        actions = actions if isinstance(actions, list) else [actions]
        resources = statement["Resource"]
        resources = resources if isinstance(resources, list) else [resources]
        if action in actions and any(fnmatch.fnmatchcase(resource, r) for r in resources):
            return True
    return False


@given(tenant=tenants, other=tenants)
def test_the_reader_gets_only_its_tenants_registered_models(tenant: str, other: str) -> None:
    policy = sp.model_reader_policy(BUCKET, tenant)
    arn = f"arn:aws:s3:::{BUCKET}"
    models = f"{arn}/tenants/{tenant}/models/churn/3/model.joblib"
    assert _allowed(policy, "s3:GetObject", models)
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
        assert not _allowed(policy, action, models)
    for elsewhere in (
        f"{arn}/tenants/{tenant}/artifacts/x",
        f"{arn}/tenants/{tenant}/training/x",
        f"{arn}/tenants/{tenant}/modelsx",
        f"arn:aws:s3:::other-bucket/tenants/{tenant}/models/x",
    ):
        assert not _allowed(policy, "s3:GetObject", elsewhere)
    if other != tenant:
        assert not _allowed(policy, "s3:GetObject", f"{arn}/tenants/{other}/models/churn/3/m")
    (listing,) = [s for s in policy["Statement"] if s["Action"] == "s3:ListBucket"]
    assert listing["Resource"] == arn
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": [f"tenants/{tenant}/models/", f"tenants/{tenant}/models/*"]}
    }


def test_no_reader_policy_for_a_wildcard_bucket() -> None:
    with pytest.raises(Exception, match="ARTIFACT_BUCKET"):
        sp.model_reader_policy("wm-*", "acme")
