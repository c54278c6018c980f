"""The token format and the endpoint host scheme (shared/inference_tokens.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import inference_tokens as T


def test_a_new_token_parses_back_and_its_hash_matches() -> None:
    token, lookup_id, secret = T.new_token()
    assert token.startswith("wmi_")
    assert len(token) == T.TOKEN_LENGTH
    assert T.parse_token(token) == (lookup_id, secret)
    assert T.bearer_token(f"Bearer {token}") == (lookup_id, secret)
    assert T.bearer_token(f"bearer  {token} ") == (lookup_id, secret)
    stored = T.token_hash(lookup_id, secret)
    assert len(stored) == 32
    assert T.hash_matches(lookup_id, secret, stored)
    other = T.new_token()
    assert not T.hash_matches(lookup_id, other[2], stored)
    assert not T.hash_matches(other[1], secret, stored)  # the hash binds the lookup id


def test_tokens_are_distinct() -> None:
    assert len({T.new_token()[0] for _ in range(200)}) == 200


@pytest.mark.parametrize(
    "text",
    [
        "",
        "wmi_",
        "Bearer x",
        "wmi_" + "a" * 16 + "_" + "b" * 42,
        "wmi_" + "a" * 16 + "_" + "b" * 44,
        "wmi_" + "a" * 15 + "-" + "b" * 44,
        "wmi_" + "a" * 16 + "_" + "b" * 42 + "\n",
        "WMI_" + "a" * 16 + "_" + "b" * 43,
        "wmi_" + "ä" * 16 + "_" + "b" * 43,
        "wmi_" + "a" * 16 + "_" + "b" * 42 + "\udcff",
    ],
)
def test_malformed_tokens_are_none(text: str) -> None:
    assert T.parse_token(text) is None
    assert T.bearer_token(f"Bearer {text}") is None


def test_bearer_needs_the_scheme() -> None:
    token = T.new_token()[0]
    assert T.bearer_token(token) is None
    assert T.bearer_token(f"Basic {token}") is None
    assert T.bearer_token(None) is None


@given(st.one_of(st.text(max_size=300), st.binary(max_size=100), st.none(), st.integers()))
def test_parsing_never_raises(value: object) -> None:
    T.parse_token(value)
    T.bearer_token(value)
    T.normalise_host(value)
    assert T.parse_host(value, domain="models.example.com") is None or isinstance(value, str)


_TENANTS = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?\Z")
_MODELS = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,44}[a-z0-9])?\Z")
_ENVIRONMENTS = st.from_regex(r"\A[a-z][a-z0-9]{0,15}\Z")


@given(_TENANTS, _MODELS, _ENVIRONMENTS)
def test_the_host_scheme_round_trips(tenant: str, model: str, environment: str) -> None:
    host = T.endpoint_host(
        tenant=tenant, model=model, environment=environment, domain="Models.Example.com."
    )
    assert all(1 <= len(label) <= 63 for label in host.split("."))
    ref = T.DeploymentRef(tenant=tenant, model=model, environment=environment)
    assert T.parse_host(host, domain="models.example.com") == ref
    assert T.parse_host(host.upper() + ":8443", domain="models.example.com") == ref
    assert T.parse_host(host + ".", domain="models.example.com") == ref
    assert T.normalise_host(host.upper() + ":80") == host


def test_a_hyphenated_model_is_unambiguous() -> None:
    host = T.endpoint_host(
        tenant="acme", model="churn-v2", environment="production", domain="m.example.com"
    )
    assert host == "churn-v2-production.acme.m.example.com"
    assert T.parse_host(host, domain="m.example.com") == T.DeploymentRef(
        "acme", "churn-v2", "production"
    )


@pytest.mark.parametrize(
    "host",
    [
        "churn-production.acme.other.com",
        "churn-production.acme.m.example.com.evil.com",
        "x.churn-production.acme.m.example.com",
        "churnproduction.acme.m.example.com",
        "churn-production.m.example.com",
        "churn-production.acme.m.example.com:http",
        "churn-production.acme.m.example.com:99999999",
        "[::1]:80",
        "churn-pro_duction.acme.m.example.com",
        "churn-production.-acme.m.example.com",
        "user@churn-production.acme.m.example.com",
        "churn-production.acme.m.example.com\n",
    ],
)
def test_other_hosts_are_none(host: str) -> None:
    assert T.parse_host(host, domain="m.example.com") is None


@pytest.mark.parametrize(
    ("part", "value"),
    [
        ("tenant", "Acme"),
        ("tenant", "a" * 49),
        ("model", "-x"),
        ("model", "m" * 47),
        ("environment", "prod-eu"),
        ("environment", "1st"),
        ("environment", ""),
    ],
)
def test_parts_that_do_not_fit_are_refused(part: str, value: str) -> None:
    parts = {"tenant": "acme", "model": "churn", "environment": "production"}
    parts[part] = value
    with pytest.raises(ValueError, match=part):
        T.endpoint_host(**parts, domain="m.example.com")


def test_a_bad_domain_is_refused() -> None:
    with pytest.raises(ValueError, match="domain"):
        T.endpoint_host(tenant="a", model="b", environment="c", domain="not a domain")
