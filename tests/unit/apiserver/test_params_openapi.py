"""Query encoding checks, path parameter rules, and which errors the document gives a route."""

from __future__ import annotations

import pytest

from apiserver.app import route_specs
from apiserver.openapi import document, error_statuses
from apiserver.params import check_encoding
from apiserver.routing import PATH_PARAMS, path_params
from shared.errors import Invalid


@pytest.mark.parametrize("raw", ["", "q=abc", "q=%E2%82%AC", "a=1&b=%41+b", "flag", "q=a%2Fb&&x="])
def test_well_encoded_queries_pass(raw: str) -> None:
    check_encoding(raw)


@pytest.mark.parametrize(
    ("raw", "parameter"),
    [
        ("q=%ff", "q"),
        ("a=1&cluster=%ED%A0%80", "cluster"),  # an encoded surrogate is not UTF-8
        ("q=%E2%82", "q"),  # truncated sequence
        ("q=%zz", "q"),
        ("q=a%", "q"),
        ("%ff=1", "\ufffd"),
    ],
)
def test_badly_encoded_queries_name_the_parameter(raw: str, parameter: str) -> None:
    with pytest.raises(Invalid) as caught:
        check_encoding(raw)
    assert caught.value.details["parameter"] == parameter


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("cluster", "c1", True),
        ("cluster", "3f2a1c9e-0b7d-5e41-9a1f-2b6c8d0e4f10", True),
        ("cluster", "host-3f2a", True),
        ("cluster", "-c1", False),
        ("cluster", "c 1", False),
        ("cluster", "c\x001", False),
        ("cluster", "a" * 254, False),
        ("ns", "kubeopera-data-acme", True),
        ("ns", "Kubeopera", False),
        ("ns", "a" * 64, False),
        ("name", "etl-daily-x7k2p", True),
        ("name", "a.b-c", True),
        ("name", "a..b", False),
        ("name", "etl\n", False),
        ("artifact", "main-logs", True),
        ("artifact", "out_1", True),
        ("artifact", "out/1", False),
        ("id", "a1b2c3", True),
        ("id", "A1", False),
        ("id", "a" * 41, False),
    ],
)
def test_path_parameter_rules(name: str, value: str, accepted: bool) -> None:
    assert PATH_PARAMS[name].accepts(value) is accepted


def test_every_placeholder_has_a_rule() -> None:
    for spec in route_specs():
        path_params(spec.path)  # KeyError for an undeclared one
    with pytest.raises(KeyError):
        path_params("/api/v1/things/{thing}")


def test_every_operation_documents_the_errors_it_can_answer() -> None:
    specs = {(spec.method, spec.path): spec for spec in route_specs()}
    doc = document(specs.values())
    for (method, path), spec in specs.items():
        documented = doc["paths"][path][method.lower()]["responses"]
        statuses = error_statuses(spec)
        assert {int(s) for s in documented if int(s) >= 400} == set(statuses)
        assert 401 in statuses
        if spec.access != "internal":
            assert {400, 403, 503} <= set(statuses), path
        if "{" in path:
            assert 404 in statuses, path
        for answer in documented.values():
            assert "X-Request-Id" in answer["headers"]
