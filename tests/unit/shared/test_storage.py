"""shared.storage: a key is a tenant's artifact only under its own ``artifacts/`` prefix, as
written (no segment a later normalisation would turn into another object)."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import storage

ARTIFACTS = "tenants/acme/artifacts/"


@pytest.mark.parametrize(
    ("key", "accepted"),
    [
        (f"{ARTIFACTS}p-1/train-1/model.tgz", True),
        (f"{ARTIFACTS}model.tgz", True),
        (f"{ARTIFACTS}a.b/..c/...", True),  # dots inside a name are a name
        (ARTIFACTS, False),  # the prefix itself names no object
        ("tenants/acme-2/artifacts/model.tgz", False),  # another tenant whose id starts alike
        ("tenants/globex/artifacts/model.tgz", False),
        ("tenants/acme/models/churn/1/model.tgz", False),  # the tenant's own registry
        ("tenants/acme/training/data.csv", False),
        ("tenants/acme/model.tgz", False),
        (f"{ARTIFACTS}../models/churn/1/model.tgz", False),
        (f"{ARTIFACTS}p-1/../../models/churn/1/model.tgz", False),
        (f"{ARTIFACTS}./model.tgz", False),
        (f"{ARTIFACTS}/model.tgz", False),  # tenants/acme/artifacts//model.tgz
        (f"{ARTIFACTS}p-1//model.tgz", False),
        (f"{ARTIFACTS}p-1/", False),  # a "directory"
        (f"{ARTIFACTS}p-1/..", False),
        (f"/{ARTIFACTS}model.tgz", False),
        ("kubeopera-data-acme/model.tgz", False),
        ("", False),
    ],
)
def test_a_key_is_a_tenant_artifact_only_under_its_artifacts_prefix(
    key: str, accepted: bool
) -> None:
    assert storage.is_tenant_artifact("acme", key) is accepted


segments = st.sampled_from(["", ".", "..", "a", "model.tgz", "..x", "p-1"])
keys = st.lists(segments, max_size=6).map("/".join)
prefixes = st.sampled_from(
    ["", ARTIFACTS, "tenants/acme/", "tenants/acme-2/artifacts/", "tenants/acme/models/"]
)


@given(prefix=prefixes, rest=keys, other=st.sampled_from(["acme-2", "acm", "globex"]))
def test_an_accepted_key_stays_itself_and_is_no_other_tenants(
    prefix: str, rest: str, other: str
) -> None:
    key = prefix + rest
    if storage.is_tenant_artifact("acme", key):
        assert posixpath.normpath(key) == key
        assert key.startswith(ARTIFACTS)
        assert not storage.is_tenant_artifact(other, key)
