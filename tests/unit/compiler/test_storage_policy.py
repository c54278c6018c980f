"""The storage layout and IAM policies (tenants.storage_policy), evaluated here with IAM's rules.

moto ignores Condition blocks and IAM user ARNs (docs/iam.md), so what it cannot check is
checked here with a small evaluator of IAM's semantics for the features these policies use:
Action and Resource globs, StringEquals/StringLike conditions (a missing key never matches),
explicit Deny over Allow, implicit deny otherwise. The docs' JSON and the chart's policy file
are compared with the functions so neither can go stale.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from compiler.tenants import storage_policy as sp
from shared.errors import ConfigError, Invalid
from shared.identifiers import TENANT_ID

ROOT = Path(__file__).resolve().parents[3]
BUCKET = "tcr-pipeline-artifacts"
USER_PATH = "/workflow-manager/tenants/"
ACCOUNT = "123456789012"
BOUNDARY = f"arn:aws:iam::{ACCOUNT}:policy/workflow-manager-tenant-boundary"
B = f"arn:aws:s3:::{BUCKET}"

tenants = st.from_regex(TENANT_ID, fullmatch=True)
prefixes = st.from_regex(r"[A-Za-z0-9+=,.@_-]{1,16}", fullmatch=True)


# --- a minimal IAM evaluator -----------------------------------------------------------------


def _glob(pattern: str, value: str, *, case: bool = True) -> bool:
    # IAM wildcards: * any run, ? one character; nothing else is special.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


def _listed(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def _conditions_hold(statement: dict[str, Any], context: dict[str, str]) -> bool:
    for operator, keys in statement.get("Condition", {}).items():
        for key, expected in keys.items():
            if key not in context:
                return False
            actual = context[key]
            if operator == "StringEquals":
                matched = actual in _listed(expected)
            elif operator == "StringLike":
                matched = any(_glob(p, actual) for p in _listed(expected))
            else:
                raise AssertionError(f"the evaluator does not know {operator}")
            if not matched:
                return False
    return True


def decision(
    policy: dict[str, Any], action: str, resource: str, context: dict[str, str] | None = None
) -> str:
    """'allow', 'deny' (explicit) or 'implicit' for one request, by IAM's rules."""
    outcome = "implicit"
    for statement in policy["Statement"]:
        if not any(_glob(a, action, case=False) for a in _listed(statement["Action"])):
            continue
        if not any(_glob(r, resource) for r in _listed(statement["Resource"])):
            continue
        if not _conditions_hold(statement, context or {}):
            continue
        if statement["Effect"] == "Deny":
            return "deny"
        outcome = "allow"
    return outcome


def allowed(policy: dict[str, Any], action: str, resource: str, **context: str) -> bool:
    keys = {k.replace("__", ":"): v for k, v in context.items()}
    return decision(policy, action, resource, keys) == "allow"


def test_the_evaluator_itself() -> None:
    policy = {
        "Statement": [
            {"Effect": "Allow", "Action": "s3:Get*", "Resource": f"{B}/a/*"},
            {"Effect": "Deny", "Action": "s3:GetObject", "Resource": f"{B}/a/secret"},
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": B,
                "Condition": {"StringLike": {"s3:prefix": ["a/*"]}},
            },
        ]
    }
    assert decision(policy, "s3:GetObject", f"{B}/a/x") == "allow"
    assert decision(policy, "S3:getobject", f"{B}/a/x") == "allow"  # actions ignore case
    assert decision(policy, "s3:GetObject", f"{B}/a/secret") == "deny"
    assert decision(policy, "s3:GetObject", f"{B}/b/x") == "implicit"
    assert decision(policy, "s3:ListBucket", B, {"s3:prefix": "a/x"}) == "allow"
    assert decision(policy, "s3:ListBucket", B, {"s3:prefix": "b/"}) == "implicit"
    assert decision(policy, "s3:ListBucket", B) == "implicit"  # no prefix: no match


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "tenant", "name"),
    [
        ("wm-", "acme", "wm-acme"),
        ("tcr.data@", "a", "tcr.data@a"),
        ("p" * 16, "a" + "b" * 46 + "c", "p" * 16 + "a" + "b" * 46 + "c"),
    ],
)
def test_user_name(prefix: str, tenant: str, name: str) -> None:
    assert sp.user_name(prefix, tenant) == name
    assert len(name) <= 64


@pytest.mark.parametrize(
    "tenant",
    ["", "Acme", "-acme", "acme-", "ac_me", "ac.me", "a" * 49, "acme/..", " acme", "é", "acme\n"],
)
def test_user_name_refuses_what_is_not_a_tenant_id(tenant: str) -> None:
    with pytest.raises(Invalid):
        sp.user_name("wm-", tenant)


@pytest.mark.parametrize("prefix", ["", "p" * 17, "wm/", "wm*", "wm ", "wm:", "wm\n", "wm#"])
def test_user_name_refuses_a_prefix_that_cannot_make_iam_names(prefix: str) -> None:
    with pytest.raises(ConfigError, match="ARTIFACT_IAM_USER_PREFIX"):
        sp.user_name(prefix, "acme")


@given(prefix=prefixes, tenant=tenants)
def test_every_valid_prefix_and_tenant_make_a_valid_iam_user_name(prefix: str, tenant: str) -> None:
    name = sp.user_name(prefix, tenant)
    assert 1 <= len(name) <= 64
    assert re.fullmatch(r"[\w+=,.@-]+", name, re.ASCII)


def test_tenant_prefixes() -> None:
    assert sp.tenant_prefixes("acme") == sp.TenantPrefixes(
        root="tenants/acme/",
        artifacts="tenants/acme/artifacts/",
        training="tenants/acme/training/",
        models="tenants/acme/models/",
    )
    with pytest.raises(Invalid):
        sp.tenant_prefixes("../other")


@given(a=tenants, b=tenants)
def test_no_tenants_prefix_is_inside_another_tenants(a: str, b: str) -> None:
    if a != b:
        assert not sp.tenant_prefixes(b).root.startswith(sp.tenant_prefixes(a).root)


# --- settings validation ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/workflow-manager/tenants/", "/wm/", "/a/b/c/", "/x+y=z/"])
def test_user_paths_accepted(path: str) -> None:
    assert sp.check_user_path(path) == path


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "",
        "wm/",
        "/wm",
        "/wm*/",
        "/w?m/",
        "//",
        "/a//b/",
        "/wm tenants/",
        "/é/",
        "/wm/\n",
        "/" + "a" * 511 + "/",
    ],
)
def test_user_paths_refused(path: str) -> None:
    with pytest.raises(ConfigError, match="ARTIFACT_IAM_USER_PATH"):
        sp.check_user_path(path)


@pytest.mark.parametrize("bucket", ["abc", "tcr-pipeline-artifacts", "a.b.c", "a" * 63])
def test_buckets_accepted(bucket: str) -> None:
    assert sp.check_bucket(bucket) == bucket


@pytest.mark.parametrize(
    "bucket",
    ["", "ab", "a" * 64, "*", "bucket*", "Bucket", "-bucket", "bucket-", "a..b", "a/b", "abc\n"],
)
def test_buckets_refused(bucket: str) -> None:
    with pytest.raises(ConfigError, match="ARTIFACT_BUCKET"):
        sp.tenant_user_policy(bucket, "acme")


@pytest.mark.parametrize(
    "arn",
    [
        "",
        "workflow-manager-tenant-boundary",
        "arn:aws:iam::123456789012:user/boundary",
        "arn:aws:iam::*:policy/boundary",
        "arn:aws:iam::aws:policy/AdministratorAccess",
        "arn:aws:iam::123456789012:policy/*",
        "arn:aws:s3:::bucket",
        "arn:aws:iam::123456789012:policy/boundary\n",
    ],
)
def test_boundary_arns_refused(arn: str) -> None:
    with pytest.raises(ConfigError, match="ARTIFACT_IAM_BOUNDARY_ARN"):
        sp.manager_policy(bucket=BUCKET, user_path=USER_PATH, boundary_arn=arn)


@pytest.mark.parametrize(
    "account", ["", "12345678901", "1234567890123", "12345678901a", "?", "1" * 12 + "\n"]
)
def test_account_ids_refused(account: str) -> None:
    with pytest.raises(ConfigError, match="account id"):
        sp.manager_policy(
            bucket=BUCKET, user_path=USER_PATH, boundary_arn=BOUNDARY, account_id=account
        )


# --- the tenant user's policy ----------------------------------------------------------------

RW = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
RW += ["s3:ListMultipartUploadParts"]


@pytest.mark.parametrize(
    ("action", "key", "expected"),
    [(a, f"tenants/acme/{p}/run/x", True) for a in RW for p in ("artifacts", "training")]
    + [("s3:GetObject", "tenants/acme/models/churn/v1/model.pkl", True)]
    + [(a, "tenants/acme/models/churn/v1/model.pkl", False) for a in RW[1:]]
    + [(a, f"tenants/acme-2/{p}/x", False) for a in RW for p in ("artifacts", "training")]
    + [(a, f"tenants/other/{p}/x", False) for a in RW for p in ("artifacts", "training", "models")]
    + [(a, "tenants/acme/x", False) for a in RW]
    + [(a, "tenants/acme/secrets/x", False) for a in RW]
    + [(a, "shared/x", False) for a in RW]
    + [
        ("s3:GetObjectAcl", "tenants/acme/artifacts/x", False),
        ("s3:PutObjectAcl", "tenants/acme/artifacts/x", False),
        ("s3:GetObjectVersion", "tenants/acme/models/x", False),
        ("s3:DeleteObjectVersion", "tenants/acme/artifacts/x", False),
        ("s3:PutObjectTagging", "tenants/acme/artifacts/x", False),
        ("s3:RestoreObject", "tenants/acme/training/x", False),
    ],
)
def test_tenant_objects(action: str, key: str, expected: bool) -> None:
    policy = sp.tenant_user_policy(BUCKET, "acme")
    assert allowed(policy, action, f"{B}/{key}") is expected
    assert not allowed(policy, action, f"arn:aws:s3:::other-bucket/{key}")


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("tenants/acme/", True),
        ("tenants/acme/artifacts/", True),
        ("tenants/acme/artifacts/run-1/", True),
        ("tenants/acme/training/", True),
        ("tenants/acme/models/churn/", True),
        ("tenants/acme", False),  # would also list acme-2
        ("tenants/acme/secrets/", False),
        ("tenants/acme-2/artifacts/", False),
        ("tenants/", False),
        ("", False),
        ("tenants/other/models/", False),
    ],
)
def test_tenant_listing(prefix: str, expected: bool) -> None:
    policy = sp.tenant_user_policy(BUCKET, "acme")
    assert allowed(policy, "s3:ListBucket", B, s3__prefix=prefix) is expected


def test_tenant_listing_without_a_prefix_and_other_bucket_operations_are_refused() -> None:
    policy = sp.tenant_user_policy(BUCKET, "acme")
    assert not allowed(policy, "s3:ListBucket", B)
    for action in [
        "s3:ListBucketMultipartUploads",
        "s3:ListBucketVersions",
        "s3:GetBucketPolicy",
        "s3:PutBucketPolicy",
        "s3:DeleteBucket",
        "s3:ListAllMyBuckets",
        "s3:GetBucketLocation",
    ]:
        assert not allowed(policy, action, B, s3__prefix="tenants/acme/")


@given(tenant=tenants)
def test_tenant_policy_touches_only_its_bucket_and_grants_no_wildcard_action(tenant: str) -> None:
    policy = sp.tenant_user_policy(BUCKET, tenant)
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        for action in _listed(statement["Action"]):
            assert action.startswith("s3:")
            assert "*" not in action
        for resource in _listed(statement["Resource"]):
            assert resource == B or resource.startswith(f"{B}/tenants/{tenant}/")


@given(tenant=tenants, other=tenants, part=st.sampled_from(["artifacts", "training", "models"]))
def test_no_tenant_reaches_another_tenants_objects(tenant: str, other: str, part: str) -> None:
    if tenant != other:
        policy = sp.tenant_user_policy(BUCKET, tenant)
        for action in RW:
            assert not allowed(policy, action, f"{B}/tenants/{other}/{part}/x")
        assert not allowed(policy, "s3:ListBucket", B, s3__prefix=f"tenants/{other}/{part}/")


# --- the boundary ----------------------------------------------------------------------------


@given(tenant=tenants)
def test_the_boundary_lets_through_everything_the_tenant_policy_grants(tenant: str) -> None:
    # On AWS a tenant user may do only what both allow: a boundary narrower than the policy
    # would silently break runs, and moto would not notice (it ignores boundaries).
    policy, boundary = sp.tenant_user_policy(BUCKET, tenant), sp.boundary_policy(BUCKET)
    prefixes = sp.tenant_prefixes(tenant)
    for key in (prefixes.artifacts, prefixes.training, prefixes.models):
        for action in RW:
            if allowed(policy, action, f"{B}/{key}x"):
                assert allowed(boundary, action, f"{B}/{key}x")
        assert allowed(boundary, "s3:ListBucket", B, s3__prefix=key)


@pytest.mark.parametrize(
    ("action", "resource"),
    [
        ("s3:GetObject", "arn:aws:s3:::other-bucket/tenants/acme/artifacts/x"),
        ("s3:GetObject", f"{B}/shared/x"),
        ("s3:PutObject", f"{B}/x"),
        ("s3:PutBucketPolicy", B),
        ("s3:DeleteBucket", B),
        ("s3:ListBucket", "arn:aws:s3:::other-bucket"),
        ("iam:CreateUser", "*"),
        ("iam:CreateAccessKey", f"arn:aws:iam::{ACCOUNT}:user/admin"),
        ("sts:AssumeRole", "*"),
        ("ec2:RunInstances", "*"),
    ],
)
def test_the_boundary_caps_everything_else(action: str, resource: str) -> None:
    assert not allowed(sp.boundary_policy(BUCKET), action, resource)


# --- workflow-manager's own policy -----------------------------------------------------------


def manager() -> dict[str, Any]:
    return sp.manager_policy(
        bucket=BUCKET, user_path=USER_PATH, boundary_arn=BOUNDARY, account_id=ACCOUNT
    )


def user(name: str, path: str = USER_PATH) -> str:
    return f"arn:aws:iam::{ACCOUNT}:user{path}{name}"


@pytest.mark.parametrize(
    ("path", "boundary", "expected"),
    [
        (USER_PATH, BOUNDARY, True),
        (USER_PATH, None, False),
        (USER_PATH, f"arn:aws:iam::{ACCOUNT}:policy/something-broader", False),
        (USER_PATH, "arn:aws:iam::aws:policy/AdministratorAccess", False),
        ("/", BOUNDARY, False),
        ("/humans/", BOUNDARY, False),
        ("/workflow-manager/", BOUNDARY, False),
        (f"{USER_PATH}nested/", BOUNDARY, True),  # documented: paths below are covered too
    ],
)
def test_manager_creates_users_only_on_its_path_with_the_boundary(
    path: str, boundary: str | None, expected: bool
) -> None:
    context = {} if boundary is None else {"iam__PermissionsBoundary": boundary}
    for action in ("iam:CreateUser", "iam:PutUserPolicy"):
        assert allowed(manager(), action, user("wm-acme", path), **context) is expected


@pytest.mark.parametrize("action", sp.MANAGER_USER_ACTIONS)
def test_manager_manages_only_users_on_its_path(action: str) -> None:
    assert allowed(manager(), action, user("wm-acme"))
    assert not allowed(manager(), action, user("admin", "/"))
    assert not allowed(manager(), action, user("wm-acme", "/humans/"))
    assert not allowed(manager(), action, f"arn:aws:iam::999999999999:user{USER_PATH}wm-acme")


@pytest.mark.parametrize("action", sp.BOUNDARY_CHANGES)
@pytest.mark.parametrize("resource", [user("wm-acme"), user("admin", "/"), "*"])
def test_manager_is_explicitly_denied_changing_boundaries(action: str, resource: str) -> None:
    context = {"iam__PermissionsBoundary": BOUNDARY}
    assert decision(manager(), action, resource, {"iam:PermissionsBoundary": BOUNDARY}) == "deny"
    # A Deny outlives an Allow someone attaches later.
    everything = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    combined = {"Statement": everything["Statement"] + manager()["Statement"]}
    assert not allowed(combined, action, resource, **context)


@pytest.mark.parametrize("action", sp.BOUNDARY_POLICY_CHANGES)
def test_manager_is_explicitly_denied_changing_the_boundary_policy(action: str) -> None:
    assert decision(manager(), action, BOUNDARY) == "deny"


@pytest.mark.parametrize(
    "action",
    [
        "iam:AttachUserPolicy",
        "iam:CreateLoginProfile",
        "iam:AddUserToGroup",
        "iam:UpdateUser",
        "iam:CreateRole",
        "iam:PassRole",
        "iam:CreatePolicy",
        "iam:ListUsers",
        "sts:AssumeRole",
    ],
)
def test_manager_has_no_other_iam_right(action: str) -> None:
    for resource in (user("wm-acme"), "*", f"arn:aws:iam::{ACCOUNT}:role/x"):
        assert not allowed(manager(), action, resource, iam__PermissionsBoundary=BOUNDARY)


def test_manager_reads_and_writes_the_whole_bucket_and_nothing_else() -> None:
    for action in RW:
        assert allowed(manager(), action, f"{B}/tenants/acme/models/v1/model.pkl")
        assert allowed(manager(), action, f"{B}/anything")
        assert not allowed(manager(), action, "arn:aws:s3:::other-bucket/x")
    assert allowed(manager(), "s3:ListBucket", B)
    for action in ("s3:PutBucketPolicy", "s3:DeleteBucket", "s3:PutBucketAcl", "s3:CreateBucket"):
        assert not allowed(manager(), action, B)


def test_manager_policy_default_account_is_any() -> None:
    policy = sp.manager_policy(bucket=BUCKET, user_path=USER_PATH, boundary_arn=BOUNDARY)
    assert policy["Statement"][0]["Resource"] == f"arn:aws:iam::*:user{USER_PATH}*"


# --- sizes -----------------------------------------------------------------------------------


def _size(policy: dict[str, Any]) -> int:
    # IAM counts a policy's characters without whitespace.
    return len(re.sub(r"\s", "", json.dumps(policy)))


def test_the_longest_tenant_policy_fits_iams_inline_limit() -> None:
    tenant = "a" + "b" * 46 + "c"
    assert _size(sp.tenant_user_policy("b" * 63, tenant)) <= 2048


def test_the_manager_and_boundary_policies_fit_a_managed_policy() -> None:
    long_path = "/" + "p" * 126 + "/"
    long_boundary = f"arn:aws:iam::{ACCOUNT}:policy/" + "b" * 100
    policy = sp.manager_policy(
        bucket="b" * 63, user_path=long_path, boundary_arn=long_boundary, account_id=ACCOUNT
    )
    assert _size(policy) <= 6144
    assert _size(sp.boundary_policy("b" * 63)) <= 6144


# --- the docs and the chart match the code ---------------------------------------------------

DOC_EXAMPLES = {
    "tenant_user_policy": lambda: sp.tenant_user_policy(BUCKET, "acme"),
    "boundary_policy": lambda: sp.boundary_policy(BUCKET),
    "manager_policy": manager,
}


def test_docs_iam_json_equals_the_functions() -> None:
    text = (ROOT / "docs" / "iam.md").read_text()
    blocks = dict(re.findall(r"<!-- generated: (\w+) -->\n```json\n(.*?)\n```", text, re.S))

    assert sorted(blocks) == sorted(DOC_EXAMPLES)
    for name, render in DOC_EXAMPLES.items():
        expected = render()
        assert json.loads(blocks[name]) == expected, (
            f"docs/iam.md is stale: replace the {name} block with\n{json.dumps(expected, indent=2)}"
        )


def test_chart_policy_file_renders_to_the_manager_policy() -> None:
    chart = ROOT / "charts" / "workflow-manager"
    raw = (chart / "files" / "iam-policy.json").read_text()
    template = (chart / "templates" / "iam-policy.yaml").read_text()
    values = yaml.safe_load((chart / "values.yaml").read_text())["iam"]
    # What the template's replace chain does with .Values.iam.
    placeholders = {
        "__BUCKET__": ("bucket", BUCKET),
        "__USER_PATH__": ("userPath", USER_PATH),
        "__BOUNDARY_ARN__": ("boundaryArn", BOUNDARY),
        "__ACCOUNT_ID__": ("accountId", ACCOUNT),
    }

    assert set(re.findall(r"__[A-Z_]+?__", raw)) == set(placeholders)
    rendered = raw
    for placeholder, (key, value) in placeholders.items():
        assert key in values
        assert re.search(rf'replace "{placeholder}" (\(toString )?\.{key}\b', template)
        rendered = rendered.replace(placeholder, value)
    assert json.loads(rendered) == manager()
    assert values["userPath"] == USER_PATH
    assert sp.check_user_path(values["userPath"])


def test_chart_default_account_renders_the_any_account_policy() -> None:
    chart = ROOT / "charts" / "workflow-manager"
    raw = (chart / "files" / "iam-policy.json").read_text()
    values = yaml.safe_load((chart / "values.yaml").read_text())["iam"]
    rendered = (
        raw.replace("__BUCKET__", BUCKET)
        .replace("__USER_PATH__", values["userPath"])
        .replace("__BOUNDARY_ARN__", BOUNDARY)
        .replace("__ACCOUNT_ID__", str(values["accountId"]))
    )
    assert json.loads(rendered) == sp.manager_policy(
        bucket=BUCKET, user_path=values["userPath"], boundary_arn=BOUNDARY
    )


def test_policies_are_deterministic_documents() -> None:
    for render in DOC_EXAMPLES.values():
        first, second = render(), render()
        assert first == second
        assert first is not second  # callers may mutate their copy
        assert first["Version"] == "2012-10-17"
        assert len({s["Sid"] for s in first["Statement"]}) == len(first["Statement"])
        assert all(fnmatch.fnmatch(s["Sid"], "[A-Z]*") for s in first["Statement"])
