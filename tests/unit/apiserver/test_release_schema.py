"""The OpenAPI document's schema of a body's ``release`` says what a save accepts: on each
field's own rule (type, enum, pattern, bounds), the schema and ``shared.pipelines.parse_body``
agree, and the document serves it on every pipeline route that takes a body."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from openapi_schema_validator import OAS30Validator

from apiserver.app import route_specs
from apiserver.openapi import document
from apiserver.pipelines.release_schema import RELEASE_SCHEMA
from shared import pipelines
from shared.errors import Invalid
from shared.pipelines import parse_body

VALIDATOR = OAS30Validator(RELEASE_SCHEMA)
RELEASE: dict[str, Any] = {
    "model": "churn",
    "model_artifact": {"step": "train", "artifact": "model"},
    "scorecard": {"step": "evaluate", "artifact": "scorecard"},
    "gate": {"thresholds": [{"metric": "auc", "op": ">=", "value": 0.8}]},
    "serving": {"model_format": {"name": "sklearn"}},
}


def changed(path: str, value: object) -> dict[str, Any]:
    release = copy.deepcopy(RELEASE)
    *parents, last = path.split(".")
    node = release
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return release


def accepted(release: dict[str, Any]) -> bool:
    body = {"name": "x", "definition": {"type": "yaml", "template": "x"}, "release": release}
    try:
        parse_body(body, "ml")
    except Invalid:
        return False
    return True


CASES = [
    ("model", "Churn"),
    ("model", "churn-2"),
    ("approval.required", "yes"),
    ("gate.thresholds", []),
    ("gate.thresholds", [{"metric": "a", "op": "=>", "value": 1}]),
    ("serving.model_format", {"name": "pickle"}),
    ("serving.model_format", {"name": "onnx", "version": "1.2"}),
    ("serving.model_format", {"name": "onnx", "version": "v1"}),
    ("serving.runtime", "kserve-mlserver"),
    ("serving.runtime", "Kserve"),
    ("serving.min_replicas", 0),
    ("serving.min_replicas", -1),
    ("serving.max_replicas", 20),
    ("serving.max_replicas", 21),
    ("serving.readiness_deadline_seconds", 29),
    ("serving.readiness_deadline_seconds", 3600),
    ("serving.resources", {"gpu": 8}),
    ("serving.resources", {"gpu": 9}),
    ("serving.resources", {"cpus": 1}),
    ("serving.extra", 1),
    ("production", {"canary_steps": []}),
    ("production", {"canary_steps": [0]}),
    ("production", {"canary_steps": [10, 99]}),
    ("production", {"canary_steps": [10], "analysis_interval_seconds": 9}),
    ("production", {"canary_steps": [10], "thresholds": {"min_success_rate": 0}}),
    ("production", {"canary_steps": [10], "thresholds": {"min_success_rate": 100}}),
    ("production", {"canary_steps": [10], "thresholds": {"max_p99_latency_ms": 60001}}),
    ("production", {"canary_steps": [10], "thresholds": {"min_requests": 0}}),
]


@pytest.mark.parametrize(("path", "value"), CASES)
def test_the_schema_and_a_save_agree_on_each_fields_rule(
    path: str, value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As it will be once canary releases exist; until then production is refused whatever
    # it holds (the schema's description says so).
    monkeypatch.setattr(pipelines, "CANARY_RELEASES", True)
    release = changed(path, value)
    assert VALIDATOR.is_valid(release) == accepted(release)


def test_the_release_schema_is_a_valid_openapi_schema_on_every_body() -> None:
    OAS30Validator.check_schema(RELEASE_SCHEMA)
    assert VALIDATOR.is_valid(RELEASE)
    assert VALIDATOR.is_valid(None)
    served = document(route_specs())
    bodies = [
        operation["requestBody"]["content"]["application/json"]["schema"]
        for path, item in served["paths"].items()
        if path in ("/api/v1/ml-pipelines", "/api/v1/ml-pipelines/{id}")
        for operation in item.values()
        if "requestBody" in operation
    ]
    assert len(bodies) == 2  # create and update
    assert all(body["properties"]["release"] == RELEASE_SCHEMA for body in bodies)
    assert "Refused (400)" in RELEASE_SCHEMA["properties"]["production"]["description"]
