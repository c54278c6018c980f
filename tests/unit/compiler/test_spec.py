"""compiler.pipelines.spec: the wizard schema, its errors naming the offending field."""

from __future__ import annotations

from typing import Any

import pytest
from _pipelines import pipeline, step

from compiler.pipelines.spec import PipelineSpec, find_cycle, parse_spec
from shared.errors import Invalid


def errors_of(data: Any) -> list[dict[str, str]]:
    with pytest.raises(Invalid) as invalid:
        parse_spec(data)
    errors: list[dict[str, str]] = invalid.value.details["errors"]
    assert all(error["field"] in invalid.value.message for error in errors[:5])
    return errors


def fields_of(data: Any) -> set[str]:
    return {error["field"] for error in errors_of(data)}


def test_a_full_specification_parses() -> None:
    spec = parse_spec(
        pipeline(
            step(
                "extract",
                outputs={"parameters": [{"name": "rows", "path": "/tmp/rows"}]},
                retries={"limit": 3, "policy": "Always", "backoff": {"duration": "10s"}},
                timeout="30m",
                env=[{"name": "T", "from_secret": {"name": "warehouse", "key": "token"}}],
            ),
            step(
                "load",
                inputs={"parameters": [{"name": "rows", "from": "extract.rows"}]},
                activation="extract.succeeded",
                input_filter=".",
                runtime="spark",
            ),
            parameters=[{"name": "day", "type": "string", "default": "x"}],
        )
    )
    assert isinstance(spec, PipelineSpec)
    assert spec.steps[0].timeout == 1800
    assert spec.steps[0].retries is not None
    assert spec.steps[0].retries.backoff is not None
    assert spec.steps[0].retries.backoff.duration == 10
    assert spec.steps[1].inputs.parameters[0].from_ == "extract.rows"
    assert parse_spec(spec) is spec


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"steps": [step("a")]}, "apiVersion"),
        (pipeline(step("a"), apiVersion="pipelines.kubeopera.io/v2"), "apiVersion"),
        (pipeline(), "steps"),
        (pipeline(step("Bad_Name")), "steps[0].name"),
        (pipeline(step("a", image="has space")), "steps[0].image"),
        (pipeline(step("a", colour="red")), "steps[0].colour"),
        (pipeline(step("a", retries={"limit": 99})), "steps[0].retries.limit"),
        (
            pipeline(step("a", retries={"limit": 1, "policy": "Sometimes"})),
            "steps[0].retries.policy",
        ),
        (pipeline(step("a", timeout="soon")), "steps[0].timeout"),
        (pipeline(step("a", timeout="30d")), "steps[0].timeout"),
        (
            pipeline(step("a", resources={"limits": {"cpu": "lots"}})),
            "steps[0].resources.limits.cpu",
        ),
        (
            pipeline(step("a", resources={"requests": {"memory": "1Gb"}})),
            "steps[0].resources.requests.memory",
        ),
        # The API server reads no whitespace in a quantity; a negative amount is no amount.
        (
            pipeline(step("a", resources={"requests": {"cpu": " 1"}})),
            "steps[0].resources.requests.cpu",
        ),
        (
            pipeline(step("a", resources={"limits": {"memory": "-1Gi"}})),
            "steps[0].resources.limits.memory",
        ),
        (
            pipeline(step("a", resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})),
            "steps[0].resources",
        ),
        (pipeline(step("a", env=[{"name": "X"}])), "steps[0].env[0]"),
        (
            pipeline(
                step(
                    "a", env=[{"name": "X", "value": "v", "from_secret": {"name": "s", "key": "k"}}]
                )
            ),
            "steps[0].env[0]",
        ),
        (
            pipeline(
                step(
                    "a",
                    env=[{"name": "X", "from_secret": {"name": "kubeopera-storage", "key": "k"}}],
                )
            ),
            "steps[0].env[0].from_secret.name",
        ),
        (
            pipeline(step("a", env=[{"name": "X", "from_secret": {"name": "s", "key": "a/b"}}])),
            "steps[0].env[0].from_secret.key",
        ),
        (pipeline(step("a", activation="a.finished")), "steps[0].activation"),
        (pipeline(step("a", input_filter="{{x}}")), "steps[0].input_filter"),
        (pipeline(step("a", output_filter="  ")), "steps[0].output_filter"),
        (pipeline(step("a", input_filter=".", command=[])), "steps[0]"),
        (pipeline(step("a", runtime="mpi")), "steps[0].runtime"),
        (
            pipeline(step("a", inputs={"parameters": [{"name": "p"}]})),
            "steps[0].inputs.parameters[0]",
        ),
        (
            pipeline(
                step("a", inputs={"artifacts": [{"name": "p", "path": "rel", "from": "b.x"}]})
            ),
            "steps[0].inputs.artifacts[0].path",
        ),
        (
            pipeline(step("a"), parameters=[{"name": "n", "type": "integer", "default": "3"}]),
            "parameters[0]",
        ),
        (
            pipeline(step("a"), parameters=[{"name": "n", "type": "integer", "default": True}]),
            "parameters[0]",
        ),
        (pipeline(step("a"), parameters=[{"name": "1n"}]), "parameters[0].name"),
    ],
)
def test_shape_errors_name_the_field(data: Any, field: str) -> None:
    assert field in fields_of(data)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (pipeline(step("a"), step("a")), "steps[1].name", "duplicate step"),
        (pipeline(step("and")), "steps[0].name", "reserved"),
        (
            pipeline(step("a"), parameters=[{"name": "p"}, {"name": "p"}]),
            "parameters[1].name",
            "duplicate",
        ),
        (pipeline(step("a", depends_on=["ghost"])), "steps[0].depends_on[0]", "no step 'ghost'"),
        (pipeline(step("a", depends_on=["a"])), "steps[0].depends_on[0]", "no step 'a'"),
        (pipeline(step("a", activation="ghost.succeeded")), "steps[0].activation", "no other step"),
        (
            pipeline(
                step("a"), step("b", inputs={"parameters": [{"name": "x", "from": "a.rows"}]})
            ),
            "steps[1].inputs.parameters[0].from",
            "has no output 'rows'",
        ),
        (
            pipeline(
                step("a", outputs={"parameters": [{"name": "rows", "path": "/r"}]}),
                step("b", inputs={"artifacts": [{"name": "x", "path": "/x", "from": "a.rows"}]}),
            ),
            "steps[1].inputs.artifacts[0].from",
            "has no output 'rows'",
        ),
        (
            pipeline(step("a", args=["{{workflow.parameters.day}}"])),
            "steps[0].args[0]",
            "undeclared",
        ),
        (
            pipeline(step("a", command=["{{inputs.parameters.p}}"])),
            "steps[0].command[0]",
            "undeclared",
        ),
        (
            pipeline(step("a", when="{{workflow.parameters.go}} == true")),
            "steps[0].when",
            "undeclared",
        ),
        (
            pipeline(
                step(
                    "a", inputs={"parameters": [{"name": "p", "value": "{{inputs.parameters.p}}"}]}
                )
            ),
            "steps[0].inputs.parameters[0].value",
            "undeclared",
        ),
        (
            pipeline(step("a", env=[{"name": "E", "value": "{{ workflow.parameters.x }}"}])),
            "steps[0].env[0].value",
            "undeclared",
        ),
    ],
)
def test_reference_errors_name_the_field(data: Any, field: str, message: str) -> None:
    errors = errors_of(data)
    assert any(error["field"] == field and message in error["message"] for error in errors), errors


def test_a_cycle_is_named_step_by_step() -> None:
    errors = errors_of(
        pipeline(
            step("a", depends_on=["c"]),
            step("b", depends_on=["a"]),
            step("c", activation="b.succeeded"),
            step("d"),
        )
    )
    assert errors == [{"field": "steps[0]", "message": "dependency cycle: a -> c -> b -> a"}]


def test_a_cycle_through_from_references_is_found() -> None:
    errors = errors_of(
        pipeline(
            step(
                "a",
                outputs={"parameters": [{"name": "o", "path": "/o"}]},
                inputs={"parameters": [{"name": "i", "from": "b.o"}]},
            ),
            step(
                "b",
                outputs={"parameters": [{"name": "o", "path": "/o"}]},
                inputs={"parameters": [{"name": "i", "from": "a.o"}]},
            ),
        )
    )
    assert errors[0]["message"] == "dependency cycle: a -> b -> a"


def test_filtered_steps_offer_result_to_later_steps() -> None:
    parse_spec(
        pipeline(
            step("a", output_filter="{n: .count}"),
            step("b", inputs={"parameters": [{"name": "n", "from": "a.result"}]}),
        )
    )


def test_every_error_is_reported_at_once() -> None:
    errors = errors_of(pipeline(step("a", depends_on=["x"]), step("b", depends_on=["y"])))
    assert [error["field"] for error in errors] == [
        "steps[0].depends_on[0]",
        "steps[1].depends_on[0]",
    ]


def test_find_cycle() -> None:
    assert find_cycle({"a": ["b"], "b": []}) is None
    assert find_cycle({"a": ["a"]}) == ["a", "a"]
    long = {f"n{i}": [f"n{i + 1}"] for i in range(5000)}
    assert find_cycle(long) is None
    long["n5000"] = ["n0"]
    cycle = find_cycle(long)
    assert cycle is not None
    assert cycle[0] == cycle[-1]
    assert len(cycle) == 5002
