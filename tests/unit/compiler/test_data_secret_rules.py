"""compiler.secrets.rules: names, keys, sizes and the Secret a data secret is; no error ever
carries a value."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.secrets import rules
from shared import labels as L
from shared.errors import Invalid

VALUE = "s3cr3t-VALUE-never-echoed"


@pytest.mark.parametrize(
    "name",
    ["a", "warehouse", "s3.creds", "a-b.c-d", "0", "x" * 253, "a." + "b" * 251, "kubeoperax"],
)
def test_dns_1123_subdomains_are_names(name: str) -> None:
    assert rules.check_name(name) == name
    assert rules.is_own(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "x" * 254,
        "Warehouse",
        "-a",
        "a-",
        "a..b",
        ".a",
        "a_b",
        "a b",
        "a/b",
        "é",
        "a.-b",
    ],
)
def test_anything_else_is_refused_naming_the_parameter(name: str) -> None:
    with pytest.raises(Invalid) as refused:
        rules.check_name(name)
    assert refused.value.details == {"parameter": "name"}
    assert "DNS-1123" in refused.value.message
    assert not rules.is_own(name)


@pytest.mark.parametrize(
    "name",
    [
        "kubeopera-artifact-credentials",
        "kubeopera-executor.service-account-token",
        "kubeopera-mlflow",
        "kubeopera-x",
        "kubeopera-anything",
    ],
)
def test_platform_names_are_reserved(name: str) -> None:
    with pytest.raises(Invalid, match="belong to the platform"):
        rules.check_name(name)
    assert not rules.is_own(name)


@pytest.mark.parametrize("key", ["a", "TOKEN", "aws_access_key_id", "a.b-c_d", ".env", "x" * 253])
def test_kubernetes_secret_keys_are_accepted(key: str) -> None:
    assert rules.key_problem(key) is None
    assert rules.parse_body({"data": {key: VALUE}}) == {key: VALUE}


@pytest.mark.parametrize("key", ["", ".", "..", "..a", "a/b", "a b", "é", "x" * 254, "a:b"])
def test_other_keys_are_refused_by_name(key: str) -> None:
    assert rules.key_problem(key) is not None
    with pytest.raises(Invalid) as refused:
        rules.parse_body({"data": {key: VALUE}})
    assert refused.value.details["errors"][0]["field"].startswith("data.")
    assert VALUE not in json.dumps(refused.value.to_json())


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "data", "at least one key"),
        ({"data": {}}, "data", "at least one key"),
        ({"data": VALUE}, "data", "at least one key"),
        ({"data": [VALUE]}, "data", "at least one key"),
        ({"data": {"token": 1}}, "data.token", "string"),
        ({"data": {"token": [VALUE]}}, "data.token", "string"),
        ({"data": {"token": {"v": VALUE}}}, "data.token", "string"),
        ({"data": {"token": None}}, "data.token", "string"),
        ({"data": {"token": "\ud800" + VALUE}}, "data.token", "UTF-8"),
        ({"data": {"token": VALUE}, "value": VALUE}, "value", "unknown field"),
        ({"data": {"token": VALUE}, "metadata": {"labels": {}}}, "metadata", "unknown field"),
    ],
)
def test_malformed_bodies_name_the_field_never_the_value(
    body: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(Invalid) as refused:
        rules.parse_body(body)
    fields = {error["field"]: error["message"] for error in refused.value.details["errors"]}
    assert message in fields[field]
    assert VALUE not in json.dumps(refused.value.to_json())
    assert VALUE not in str(refused.value)


def test_a_body_not_an_object_is_refused() -> None:
    with pytest.raises(Invalid, match="JSON object"):
        rules.parse_body([VALUE])


def test_every_problem_is_listed_at_once_and_the_message_summarises_five() -> None:
    data = {f"bad/{index}": VALUE for index in range(7)}
    with pytest.raises(Invalid) as refused:
        rules.parse_body({"data": data})
    assert len(refused.value.details["errors"]) == 7
    assert "(and 2 more)" in refused.value.message


def test_a_long_key_is_shown_cut() -> None:
    key = "k" * 300
    with pytest.raises(Invalid) as refused:
        rules.parse_body({"data": {key: VALUE}})
    assert refused.value.details["errors"][0]["field"] == f"data.{'k' * 64}..."


def test_keys_and_values_are_capped_at_64_kib_together() -> None:
    at_cap = {"k": "v" * (rules.MAX_BYTES - 1)}
    assert rules.parse_body({"data": at_cap}) == at_cap
    with pytest.raises(Invalid) as refused:
        rules.parse_body({"data": {"k": "v" * rules.MAX_BYTES}})
    assert refused.value.details["errors"] == [
        {"field": "data", "message": f"keys and values exceed {rules.MAX_BYTES} bytes"}
    ]
    # counted in UTF-8 bytes: 2 bytes each
    with pytest.raises(Invalid):
        rules.parse_body({"data": {"k": "é" * (rules.MAX_BYTES // 2)}})
    spread = {f"k{index}": "v" * 1000 for index in range(70)}
    with pytest.raises(Invalid, match="exceed"):
        rules.parse_body({"data": spread})


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=8))
def test_any_body_is_accepted_or_refused_without_echoing_a_value(data: dict[str, str]) -> None:
    marked = {key: f"{VALUE}{value}" for key, value in data.items()}
    refusal: Invalid | None = None
    try:
        parsed = rules.parse_body({"data": marked})
    except Invalid as refused:
        refusal = refused
    if refusal is None:
        assert parsed == marked
    else:
        assert VALUE not in json.dumps(refusal.to_json())


def test_the_manifest_is_an_opaque_labelled_secret_with_its_history() -> None:
    secret = rules.manifest(
        tenant="acme",
        name="warehouse",
        values={"user": "etl", "token": VALUE},
        actor="bob@acme",
        at="2026-01-02T03:04:05Z",
        created_by="alice@acme",
    )
    assert secret["metadata"]["namespace"] == "kubeopera-data-acme"
    assert secret["metadata"]["labels"] == {
        L.DATA_SECRET: "true",
        L.MANAGED_BY: L.MANAGED_BY_US,
        L.TENANT: "acme",
    }
    assert secret["type"] == "Opaque"
    assert list(secret["data"]) == ["token", "user"]
    assert base64.b64decode(secret["data"]["token"]).decode() == VALUE
    assert "stringData" not in secret
    secret["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    assert rules.describe(secret) == {
        "name": "warehouse",
        "keys": ["token", "user"],
        "created_at": "2026-01-01T00:00:00Z",
        "created_by": "alice@acme",
        "updated_at": "2026-01-02T03:04:05Z",
        "updated_by": "bob@acme",
    }
    assert VALUE not in json.dumps(rules.describe(secret))


def test_a_first_write_is_its_own_creator_and_a_bare_secret_is_described_as_it_is() -> None:
    secret = rules.manifest(
        tenant="acme", name="s", values={"k": VALUE}, actor="alice", at="2026-01-02T00:00:00Z"
    )
    assert secret["metadata"]["annotations"][rules.CREATED_BY] == "alice"
    bare = {"metadata": {"name": "s", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    assert rules.describe({**bare, "stringData": {"b": VALUE}, "data": {"a": "eA=="}}) == {
        "name": "s",
        "keys": ["a", "b"],
        "created_at": "2026-01-01T00:00:00Z",
        "created_by": None,
        "updated_at": "2026-01-01T00:00:00Z",
        "updated_by": None,
    }
