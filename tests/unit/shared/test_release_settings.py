"""A release's deployment settings as the body carries them (``shared.serving`` within
``shared.pipelines.Release``): every field's bounds, the defaults a version records, the checks
across fields, and ``production`` refused at save until canary releases exist."""

from __future__ import annotations

from typing import Any

import pytest

from shared import pipelines
from shared.errors import Invalid
from shared.pipelines import CANARY_REFUSAL, parse_body
from shared.serving import MODEL_FORMATS, Production, production_errors


def body(**release_fields: Any) -> dict[str, Any]:
    return {
        "name": "churn",
        "definition": {"type": "yaml", "template": "kind: WorkflowTemplate"},
        "release": {
            "model": "churn",
            "model_artifact": {"step": "train", "artifact": "model"},
            "scorecard": {"step": "evaluate", "artifact": "scorecard"},
            "gate": {"thresholds": [{"metric": "auc", "op": ">=", "value": 0.8}]},
            **release_fields,
        },
    }


def serving(**fields: Any) -> dict[str, Any]:
    return {"model_format": {"name": "sklearn"}, **fields}


def saved(**serving_fields: Any) -> dict[str, Any]:
    """The serving block a version records for these fields."""
    settings = parse_body(body(serving=serving(**serving_fields)), "ml").settings()
    result: dict[str, Any] = settings["release"]["serving"]
    return result


def refused(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(Invalid) as exc:
        parse_body(data, "ml")
    return [(e["field"], e["message"]) for e in exc.value.details["errors"]]


def refused_fields(**serving_fields: Any) -> list[str]:
    return [field for field, _ in refused(body(serving=serving(**serving_fields)))]


# --- serving ---------------------------------------------------------------------------------
def test_serving_is_optional_and_recorded_with_every_default() -> None:
    assert parse_body(body(), "ml").settings()["release"]["serving"] is None
    assert saved() == {
        "model_format": {"name": "sklearn", "version": None},
        "runtime": None,
        "resources": {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"cpu": "1", "memory": "2Gi"},
            "gpu": 0,
        },
        "min_replicas": 1,
        "max_replicas": 3,
        "readiness_deadline_seconds": 600,
    }


@pytest.mark.parametrize("name", MODEL_FORMATS)
def test_every_format_of_kserves_built_in_runtimes_is_accepted(name: str) -> None:
    assert saved(model_format={"name": name, "version": "2"})["model_format"] == {
        "name": name,
        "version": "2",
    }


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"model_format": {"name": "SKLearn"}}, "release.serving.model_format.name"),
        ({"model_format": {"name": "pickle"}}, "release.serving.model_format.name"),
        ({"model_format": {"name": "sklearn", "version": "v1"}}, "..model_format.version"),
        ({"model_format": {"name": "sklearn", "version": "1.2.3.4"}}, "..model_format.version"),
        ({"model_format": {"name": "sklearn", "version": 1}}, "..model_format.version"),
        ({"model_format": None}, "release.serving.model_format"),
        ({"runtime": "kserve_sklearn"}, "release.serving.runtime"),
        ({"runtime": "a" * 64}, "release.serving.runtime"),
        ({"replicas": 2}, "release.serving.replicas"),
    ],
)
def test_the_model_format_and_runtime_are_checked(fields: dict[str, Any], field: str) -> None:
    data = body(serving={"model_format": {"name": "sklearn"}} | fields)
    expected = field.replace("..", "release.serving.")
    assert [f for f, _ in refused(data)] == [expected]


def test_the_format_is_required_and_a_runtime_may_be_named() -> None:
    assert [f for f, _ in refused(body(serving={}))] == ["release.serving.model_format"]
    assert saved(runtime="kserve-mlserver")["runtime"] == "kserve-mlserver"


@pytest.mark.parametrize(
    ("cpu", "ok"),
    [
        ("10m", True),
        ("9m", False),
        ("0.0001", False),  # rounds up to 1m, below the minimum
        ("0", False),
        ("-1", False),
        ("64", True),
        ("64001m", False),
        ("65", False),
        (2, True),
        (0.5, True),
        ("1e3", False),
        ("two", False),
        (True, False),
        (None, False),
        (["1"], False),
    ],
)
def test_cpu_is_a_quantity_between_10m_and_64(cpu: object, ok: bool) -> None:
    fields = {"resources": {"requests": {"cpu": cpu}, "limits": {"cpu": "64"}}}
    if ok:
        assert saved(**fields)["resources"]["requests"]["cpu"] == (
            cpu if isinstance(cpu, str) else repr(cpu)
        )
    else:
        assert refused_fields(**fields) == ["release.serving.resources.requests.cpu"]


@pytest.mark.parametrize(
    ("memory", "ok"),
    [
        ("16Mi", True),
        ("16777215", False),
        ("256Gi", True),
        ("257Gi", False),
        ("1Ti", False),
        ("512M", True),
        ("2GB", False),
        (1073741824, True),
    ],
)
def test_memory_is_a_quantity_between_16mi_and_256gi(memory: object, ok: bool) -> None:
    fields = {"resources": {"limits": {"memory": memory}, "requests": {"memory": "16Mi"}}}
    if ok:
        assert saved(**fields)["resources"]["limits"]["memory"] == str(memory)
    else:
        assert refused_fields(**fields) == ["release.serving.resources.limits.memory"]


def test_a_limit_not_given_is_its_request_and_a_request_its_limit() -> None:
    resources = saved(resources={"requests": {"cpu": "2"}, "limits": {"memory": "4Gi"}})
    assert resources["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert resources["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    # A bad request is reported once, where it was written, not again as the limit.
    assert refused_fields(resources={"requests": {"cpu": "lots"}}) == [
        "release.serving.resources.requests.cpu"
    ]


def test_a_limit_below_its_request_is_refused_naming_it() -> None:
    fields = {
        "resources": {
            "requests": {"cpu": "2", "memory": "4Gi"},
            "limits": {"cpu": "1500m", "memory": "4095Mi"},
        }
    }
    assert refused(body(serving=serving(**fields))) == [
        ("release.serving.resources.limits.cpu", "'1500m' is below the request '2'"),
        ("release.serving.resources.limits.memory", "'4095Mi' is below the request '4Gi'"),
    ]
    equal = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2000m"}}}
    assert saved(**equal)["resources"]["limits"]["cpu"] == "2000m"


@pytest.mark.parametrize(
    ("gpu", "ok"), [(0, True), (1, True), (8, True), (9, False), (-1, False), (True, False)]
)
def test_at_most_8_gpus(gpu: object, ok: bool) -> None:
    fields = {"resources": {"gpu": gpu}}
    if ok:
        assert saved(**fields)["resources"]["gpu"] == gpu
    else:
        assert refused_fields(**fields) == ["release.serving.resources.gpu"]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"min_replicas": 0, "max_replicas": 1}, None),  # scale to zero
        ({"min_replicas": 20, "max_replicas": 20}, None),
        ({"min_replicas": -1}, "release.serving.min_replicas"),
        ({"min_replicas": 21, "max_replicas": 20}, "release.serving.min_replicas"),
        ({"max_replicas": 0}, "release.serving.max_replicas"),
        ({"max_replicas": 21}, "release.serving.max_replicas"),
        ({"max_replicas": 2.0}, "release.serving.max_replicas"),
        ({"min_replicas": 4, "max_replicas": 3}, "release.serving.min_replicas"),
    ],
)
def test_replicas_between_0_and_20_and_min_at_most_max(
    fields: dict[str, Any], error: str | None
) -> None:
    if error is None:
        assert saved(**fields)["min_replicas"] == fields["min_replicas"]
    else:
        assert refused_fields(**fields) == [error]
    assert refused(body(serving=serving(min_replicas=4, max_replicas=3))) == [
        ("release.serving.min_replicas", "4 is above max_replicas (3)")
    ]


@pytest.mark.parametrize(
    ("seconds", "ok"),
    [(30, True), (600, True), (3600, True), (29, False), (3601, False), ("600", False)],
)
def test_the_readiness_deadline_is_30_s_to_an_hour(seconds: object, ok: bool) -> None:
    if ok:
        assert saved(readiness_deadline_seconds=seconds)["readiness_deadline_seconds"] == seconds
    else:
        fields = refused_fields(readiness_deadline_seconds=seconds)
        assert fields == ["release.serving.readiness_deadline_seconds"]


# --- production (part three) -----------------------------------------------------------------
PRODUCTION = {"canary_steps": [10, 25, 50]}


def production_fields(fields: dict[str, Any]) -> list[str]:
    """The fields the production block's own validation refuses (beside the refusal of canary
    releases at save)."""
    data = body(serving=serving(), production={**PRODUCTION, **fields})
    with pytest.raises(Invalid) as exc:
        parse_body(data, "ml")
    return [e["field"] for e in exc.value.details["errors"]]


def test_a_release_with_production_is_refused_until_the_canary_stage_exists() -> None:
    data = body(serving=serving(), production=PRODUCTION)
    with pytest.raises(Invalid) as exc:
        parse_body(data, "ml")
    assert exc.value.message == (
        "release.production: canary releases arrive with the canary stage; until then a "
        "version reaches production through POST /models/{id}/versions/{v}/promote"
    )
    assert exc.value.details["errors"] == [
        {"field": "release.production", "message": CANARY_REFUSAL}
    ]
    # null is no production.
    assert parse_body(body(serving=serving(), production=None), "ml").release is not None


def test_one_flag_turns_canary_releases_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipelines, "CANARY_RELEASES", True)
    release = parse_body(body(serving=serving(), production=PRODUCTION), "ml").release
    assert release is not None
    assert release.production is not None
    assert release.production.model_dump() == {
        "canary_steps": [10, 25, 50],
        "analysis_interval_seconds": 60,
        "thresholds": {
            "min_success_rate": 99.0,
            "max_p99_latency_ms": 500.0,
            "compare_to_stable": None,
            "min_requests": 100,
        },
        "deadline_seconds": 3600,
    }
    # Even then, a canary is a deployment: it needs serving.
    assert refused(body(production=PRODUCTION)) == [
        ("release.production", "a canary release needs release.serving: what to deploy")
    ]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"canary_steps": []}, "release.production.canary_steps"),
        ({"canary_steps": [0, 50]}, "release.production.canary_steps[0]"),
        ({"canary_steps": [50, 100]}, "release.production.canary_steps[1]"),
        ({"canary_steps": [10, 10]}, "release.production.canary_steps"),
        ({"canary_steps": [50, 20]}, "release.production.canary_steps"),
        ({"canary_steps": list(range(1, 12))}, "release.production.canary_steps"),
        ({"canary_steps": [True]}, "release.production.canary_steps[0]"),
        ({"canary_steps": None}, "release.production.canary_steps"),
        ({"analysis_interval_seconds": 9}, "release.production.analysis_interval_seconds"),
        ({"analysis_interval_seconds": 3601}, "release.production.analysis_interval_seconds"),
        ({"deadline_seconds": 59}, "release.production.deadline_seconds"),
        ({"deadline_seconds": 86401}, "release.production.deadline_seconds"),
        # Three steps of a 600 s analysis need 1800 s.
        (
            {"analysis_interval_seconds": 600, "deadline_seconds": 1799},
            "release.production.deadline_seconds",
        ),
        ({"thresholds": {"min_success_rate": 0}}, "..min_success_rate"),
        ({"thresholds": {"min_success_rate": 100.5}}, "..min_success_rate"),
        ({"thresholds": {"min_success_rate": "99"}}, "..min_success_rate"),
        ({"thresholds": {"max_p99_latency_ms": 0}}, "..max_p99_latency_ms"),
        ({"thresholds": {"max_p99_latency_ms": 60001}}, "..max_p99_latency_ms"),
        ({"thresholds": {"min_requests": 0}}, "..min_requests"),
        ({"thresholds": {"min_requests": 1_000_001}}, "..min_requests"),
        (
            {
                "thresholds": {
                    "compare_to_stable": {
                        "max_success_rate_drop": -1,
                        "max_latency_increase_percent": 10,
                    }
                }
            },
            "..compare_to_stable.max_success_rate_drop",
        ),
        (
            {
                "thresholds": {
                    "compare_to_stable": {
                        "max_success_rate_drop": 1,
                        "max_latency_increase_percent": 1001,
                    }
                }
            },
            "..compare_to_stable.max_latency_increase_percent",
        ),
        ({"thresholds": {"compare_to_stable": {}}}, "..compare_to_stable.max_success_rate_drop"),
        ({"steps": [10]}, "release.production.steps"),
    ],
)
def test_the_production_block_names_each_bad_field(fields: dict[str, Any], field: str) -> None:
    expected = field.replace("..", "release.production.thresholds.")
    assert expected in production_fields(fields)
    assert "release.production" not in production_fields(fields)  # not reached


def test_the_production_blocks_bounds_are_inclusive() -> None:
    edge = Production.model_validate(
        {
            "canary_steps": [1, 99],
            "analysis_interval_seconds": 3600,
            "deadline_seconds": 7200,
            "thresholds": {
                "min_success_rate": 100,
                "max_p99_latency_ms": 60000,
                "min_requests": 1,
                "compare_to_stable": {
                    "max_success_rate_drop": 0,
                    "max_latency_increase_percent": 1000,
                },
            },
        }
    )
    assert production_errors(edge) == []
    short = Production.model_validate({"canary_steps": [5, 10], "deadline_seconds": 119})
    assert production_errors(short) == [
        {
            "field": "release.production.deadline_seconds",
            "message": "119 s is shorter than the 2 steps' analysis (120 s)",
        }
    ]
    ten = Production.model_validate({"canary_steps": [10, 20, 30, 40, 50, 60, 70, 80, 90, 95]})
    assert len(ten.canary_steps) == 10
