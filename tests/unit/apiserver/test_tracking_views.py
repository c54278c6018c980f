"""MLflow's documents as /ml-tracking shows them: hostile or partial input never breaks the
view, and what reaches JSON is always JSON (no NaN)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.tracking.views import experiment_of, metric_item, millis_iso, number, run_item

RUN = {
    "info": {
        "run_id": "5df970fc59da4761ad087131c171f4aa",
        "run_uuid": "5df970fc59da4761ad087131c171f4aa",
        "experiment_id": "7",
        "run_name": "train-1",
        "user_id": "",
        "status": "FINISHED",
        "start_time": 1_700_000_000_123,
        "end_time": 1_700_000_060_000,
        "artifact_uri": "mlflow-artifacts:/7/5df9/artifacts",
        "lifecycle_stage": "active",
    },
    "data": {
        "metrics": [
            {"key": "loss", "value": 0.25, "timestamp": 1, "step": 3},
            {"key": "diverged", "value": "NaN", "timestamp": 1, "step": 0},
        ],
        "params": [{"key": "lr", "value": "0.01"}],
        "tags": [
            {"key": "mlflow.runName", "value": "train-1"},
            {"key": "mlflow.user", "value": "tenant-acme"},
            {"key": "team", "value": "fraud"},
        ],
    },
}


def test_a_run_keeps_what_the_interface_shows_and_drops_storage_and_system_tags() -> None:
    assert run_item(RUN) == {
        "run_id": "5df970fc59da4761ad087131c171f4aa",
        "name": "train-1",
        "status": "FINISHED",
        "started_at": "2023-11-14T22:13:20.123Z",
        "ended_at": "2023-11-14T22:14:20.000Z",
        "user": "tenant-acme",
        "metrics": {"loss": 0.25, "diverged": None},
        "params": {"lr": "0.01"},
        "tags": {"team": "fraud"},
    }
    assert experiment_of(RUN) == "7"
    assert experiment_of({}) is None


def test_a_metric_point() -> None:
    assert metric_item(
        {"key": "loss", "value": 0.5, "timestamp": 1_700_000_000_000, "step": 4}
    ) == {
        "step": 4,
        "value": 0.5,
        "timestamp": 1_700_000_000_000,
        "at": "2023-11-14T22:13:20.000Z",
    }
    assert metric_item({"value": float("inf"), "step": "7"}) == {
        "step": 7,
        "value": None,
        "timestamp": None,
        "at": None,
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), ("2.5", 2.5), (True, None), ("NaN", None), ("-Infinity", None), ([], None)],
)
def test_number(value: object, expected: float | None) -> None:
    assert number(value) == expected


@pytest.mark.parametrize("value", [None, -1, 10**30, "soon", float("nan")])
def test_absurd_times_are_null(value: object) -> None:
    assert millis_iso(value) is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
_fields = st.sampled_from(
    ["info", "data", "metrics", "params", "tags", "key", "value", "run_id", "start_time", "step"]
)
_shaped = st.recursive(
    _json,
    lambda inner: st.dictionaries(_fields, inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=40,
)


@given(_shaped)
def test_any_document_gives_strict_json(document: Any) -> None:
    candidate = document if isinstance(document, dict) else {"info": document, "data": document}
    for shown in (run_item(candidate), metric_item(candidate)):
        json.dumps(shown, allow_nan=False)  # ValueError on NaN or an infinity anywhere
