"""The files a model version serves and where they are read from; an integer path rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.models.files import object_key, served_file
from apiserver.routing import PATH_PARAMS
from shared.errors import NotFound

PREFIX = "tenants/acme/models/churn/3/"


@pytest.mark.parametrize("name", ["eval_scorecard.json", "lineage.json"])
def test_the_two_files_are_served_from_the_versions_prefix(name: str) -> None:
    assert object_key(tenant="acme", prefix=PREFIX, state="passed", name=name) == PREFIX + name


@pytest.mark.parametrize(
    ("prefix", "state", "name"),
    [
        (PREFIX, "passed", "model.tgz"),
        (PREFIX, "passed", "../lineage.json"),
        (PREFIX, "registering", "lineage.json"),
        (PREFIX, "abandoned", "lineage.json"),
        ("tenants/globex/models/churn/3/", "passed", "lineage.json"),
        ("tenants/acme/models/../artifacts/", "passed", "lineage.json"),
        ("tenants/acme/models//x/", "passed", "lineage.json"),
        ("tenants/acme/models/churn/3", "passed", "lineage.json"),
        ("tenants/acme/", "passed", "lineage.json"),
    ],
)
def test_anything_else_is_not_found(prefix: str, state: str, name: str) -> None:
    with pytest.raises(NotFound):
        object_key(tenant="acme", prefix=prefix, state=state, name=name)


@given(st.text(max_size=80))
def test_only_two_names_ever_pass(name: str) -> None:
    try:
        served_file(name)
    except NotFound:
        return
    assert name in ("eval_scorecard.json", "lineage.json")


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("1", True),
        ("2147483647", True),
        ("0", False),
        ("2147483648", False),
        ("-1", False),
        ("1.0", False),
        ("²", False),
        ("", False),
        ("9" * 40, False),
    ],
)
def test_a_version_number_is_an_integer_in_range(value: str, accepted: bool) -> None:
    assert PATH_PARAMS["v"].accepts(value) is accepted
