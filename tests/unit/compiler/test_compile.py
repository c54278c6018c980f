"""compiler.pipelines.compile: wizard specifications compiled into WorkflowTemplates."""

from __future__ import annotations

from typing import Any

import pytest
from _pipelines import pipeline, step, wide_dag

from compiler.pipelines.allowlist import Violation, check
from compiler.pipelines.compile import JQ_IMAGE, StepLimits, compile_wizard
from compiler.pipelines.spec import parse_spec
from compiler.pipelines.stamping import stamp
from shared.config import Settings
from shared.errors import Invalid
from shared.pipelines import PipelineKind

LIMITS = StepLimits(max_cpu="4", max_memory="8Gi", max_gpu=1)


def compiled(
    data: dict[str, Any], *, kind: PipelineKind = "data", limits: StepLimits = LIMITS
) -> dict[str, Any]:
    return compile_wizard(
        data,
        tenant="acme",
        pipeline_id="p1",
        version=3,
        kind=kind,
        limits=limits,
    )


def tasks(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    dag = document["spec"]["templates"][0]
    assert dag["name"] == document["spec"]["entrypoint"] == "pipeline"
    return {task["name"]: task for task in dag["dag"]["tasks"]}


def templates(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {template["name"]: template for template in document["spec"]["templates"]}


def violations(document: dict[str, Any], *, data_secrets: frozenset[str]) -> list[Violation]:
    stamped = stamp(
        document,
        tenant="acme",
        namespace="kubeopera-data-acme",
        pipeline_id="p1",
        version=3,
        kind="data",
    )
    return check(
        stamped,
        namespace="kubeopera-data-acme",
        tenant="acme",
        artifact_bucket="kubeopera-artifacts",
        kind="data",
        limits=LIMITS,
        data_secrets=data_secrets,
    )


def accepted(document: dict[str, Any]) -> bool:
    """Accepted by the allowlist, given the one data secret the test pipelines read."""
    assert violations(document, data_secrets=frozenset({"warehouse"})) == []
    return True


def test_what_the_platform_adds_needs_no_secret_of_the_tenants() -> None:
    """Filter containers, accounts and the executor: nothing compiling and stamping add is a
    Secret reference, so a tenant without data secrets can save any pipeline that reads none."""
    document = compiled(
        pipeline(
            step("a", outputs={"parameters": [{"name": "n", "path": "/n"}]}),
            step(
                "b",
                inputs={"parameters": [{"name": "n", "from": "a.n"}]},
                input_filter="{n: .n}",
                output_filter=".",
                runtime="spark",
                resources={"limits": {"cpu": "4", "memory": "8Gi"}},
            ),
        )
    )
    assert violations(document, data_secrets=frozenset()) == []


def test_a_steps_secret_is_refused_until_it_is_one_of_the_tenants_data_secrets() -> None:
    env = [{"name": "TOKEN", "from_secret": {"name": "warehouse", "key": "token"}}]
    document = compiled(pipeline(step("a", env=env)))
    found = violations(document, data_secrets=frozenset())
    assert [(v.rule, v.path) for v in found] == [
        ("secret_reference", "spec.templates[1].container.env[0].valueFrom.secretKeyRef.name")
    ]


def test_a_fifty_step_dag_compiles_into_an_accepted_template() -> None:
    document = compiled(wide_dag(50))
    assert document["apiVersion"] == "argoproj.io/v1alpha1"
    assert document["kind"] == "WorkflowTemplate"
    assert len(tasks(document)) == 50
    assert len(document["spec"]["templates"]) == 51
    assert tasks(document)["s0"].get("depends") is None
    assert tasks(document)["s5"]["depends"] == "s0 && s1"
    assert tasks(document)["s6"]["depends"] == "s1 && s2"
    # s14 has an activation over its parents: it becomes its whole depends expression.
    assert tasks(document)["s14"]["depends"] == "s9.Succeeded && (s5.Succeeded || s5.Skipped)"
    # s11 and s22 have jq filters; s44 both (a container set, checked in detail below).
    assert "containerSet" in templates(document)["step-s11"]
    assert document["spec"]["arguments"]["parameters"] == [
        {"name": "day", "value": "2026-01-01", "description": "Day"}
    ]
    assert accepted(document)


def test_compilation_is_deterministic() -> None:
    assert compiled(wide_dag(20)) == compiled(wide_dag(20))


@pytest.mark.parametrize(
    ("fields", "depends"),
    [
        ({"depends_on": ["a"]}, "a"),
        ({"depends_on": ["a", "b"]}, "a && b"),
        ({"activation": "a.failed"}, "a.Failed"),
        ({"activation": "a.failed or b.skipped"}, "a.Failed || b.Skipped"),
        (
            {"depends_on": ["b"], "activation": "a.failed or a.errored"},
            "b && (a.Failed || a.Errored)",
        ),
        ({"depends_on": ["a"], "activation": "a.completed"}, "(a.Succeeded || a.Failed)"),
        ({"inputs": {"parameters": [{"name": "n", "from": "b.n"}]}}, "b"),
    ],
)
def test_dependencies_and_activations_become_depends(fields: dict[str, Any], depends: str) -> None:
    document = compiled(
        pipeline(
            step("a"),
            step("b", outputs={"parameters": [{"name": "n", "path": "/n"}]}),
            step("c", **fields),
        )
    )
    assert tasks(document)["c"]["depends"] == depends


def test_retries_timeouts_secrets_resources_and_when() -> None:
    document = compiled(
        pipeline(
            step(
                "a",
                retries={
                    "limit": 4,
                    "policy": "OnError",
                    "backoff": {"duration": "1m", "factor": 3, "max_duration": "1h"},
                },
                timeout="2h",
                when="{{workflow.parameters.go}} == true",
                env=[
                    {"name": "TOKEN", "from_secret": {"name": "warehouse", "key": "token"}},
                    {"name": "MODE", "value": "x"},
                ],
                resources={
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                    "limits": {"cpu": "2", "memory": "2Gi"},
                },
            ),
            parameters=[{"name": "go", "type": "boolean", "default": False}],
        )
    )
    template = templates(document)["step-a"]
    assert template["retryStrategy"] == {
        "limit": 4,
        "retryPolicy": "OnError",
        "backoff": {"duration": "60s", "factor": 3, "maxDuration": "3600s"},
    }
    assert template["activeDeadlineSeconds"] == 7200
    assert template["container"]["env"] == [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "warehouse", "key": "token"}}},
        {"name": "MODE", "value": "x"},
    ]
    assert template["container"]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }
    assert tasks(document)["a"]["when"] == "{{workflow.parameters.go}} == true"
    assert document["spec"]["arguments"]["parameters"] == [{"name": "go", "value": "false"}]
    assert accepted(document)


def test_inputs_and_outputs_are_wired_between_steps() -> None:
    document = compiled(
        pipeline(
            step(
                "a",
                outputs={
                    "parameters": [{"name": "n", "path": "/tmp/n"}],
                    "artifacts": [{"name": "data", "path": "/data"}],
                },
            ),
            step(
                "b",
                inputs={
                    "parameters": [{"name": "n", "from": "a.n"}, {"name": "lit", "value": "7"}],
                    "artifacts": [{"name": "data", "path": "/in", "from": "a.data"}],
                },
            ),
        )
    )
    assert tasks(document)["b"]["arguments"] == {
        "parameters": [
            {"name": "n", "value": "{{tasks.a.outputs.parameters.n}}"},
            {"name": "lit", "value": "7"},
        ],
        "artifacts": [{"name": "data", "from": "{{tasks.a.outputs.artifacts.data}}"}],
    }
    a, b = templates(document)["step-a"], templates(document)["step-b"]
    assert a["outputs"] == {
        "parameters": [{"name": "n", "valueFrom": {"path": "/tmp/n"}}],
        "artifacts": [{"name": "data", "path": "/data"}],  # the namespace's default repository
    }
    assert b["inputs"] == {
        "parameters": [{"name": "n"}, {"name": "lit"}],
        "artifacts": [{"name": "data", "path": "/in"}],
    }
    assert accepted(document)


def test_jq_filters_compile_to_a_container_set_around_the_step() -> None:
    document = compiled(
        pipeline(
            step("a", outputs={"parameters": [{"name": "day", "path": "/d"}]}),
            step(
                "b",
                inputs={
                    "parameters": [{"name": "day", "from": "a.day"}, {"name": "n", "value": "3"}]
                },
                input_filter=".n |= tonumber",
                output_filter="{total: .count}",
            ),
            step("c", inputs={"parameters": [{"name": "total", "from": "b.result"}]}),
        )
    )
    template = templates(document)["step-b"]
    assert "container" not in template
    assert template["volumes"] == [{"name": "kubeopera-io", "emptyDir": {}}]
    containers = {
        container["name"]: container for container in template["containerSet"]["containers"]
    }
    assert list(containers) == ["input-filter", "main", "output-filter"]
    first, main, last = containers.values()
    assert first["image"] == last["image"] == JQ_IMAGE
    assert main["image"] == "ghcr.io/acme/job:1.0"
    assert main["dependencies"] == ["input-filter"]
    assert last["dependencies"] == ["main"]
    env = {item["name"]: item["value"] for item in first["env"]}
    assert env["KUBEOPERA_JQ_PROGRAM"] == (
        '{"day": $ENV.KUBEOPERA_P0, "n": $ENV.KUBEOPERA_P1} | (.n |= tonumber\n)'
    )
    assert env["KUBEOPERA_P0"] == "{{inputs.parameters.day}}"
    # Values reach jq through the environment, never through the shell text.
    assert first["command"] == [
        "sh",
        "-c",
        'jq -n -c "$KUBEOPERA_JQ_PROGRAM" > /kubeopera/io/input.json',
    ]
    assert {"name": "KUBEOPERA_OUTPUT", "value": "/kubeopera/io/output.json"} in main["env"]
    assert last["env"] == [{"name": "KUBEOPERA_JQ_PROGRAM", "value": "{total: .count}"}]
    assert template["outputs"]["parameters"] == [
        {"name": "result", "valueFrom": {"path": "/kubeopera/io/result.json"}}
    ]
    assert tasks(document)["c"]["arguments"]["parameters"][0]["value"] == (
        "{{tasks.b.outputs.parameters.result}}"
    )
    assert accepted(document)


def test_spark_and_pytorch_steps_ask_stamping_for_the_platform_accounts() -> None:
    document = compiled(
        pipeline(step("s", runtime="spark"), step("t", runtime="pytorch"), step("u"))
    )
    stamped = stamp(
        document,
        tenant="acme",
        namespace="kubeopera-data-acme",
        pipeline_id="p1",
        version=3,
        kind="data",
    )
    accounts = {
        template["name"]: template.get("serviceAccountName")
        for template in stamped["spec"]["templates"]
    }
    assert accounts["step-s"] == "kubeopera-spark"
    assert accounts["step-t"] == "kubeopera-training"
    assert accounts["step-u"] is None
    assert accepted(document)


@pytest.mark.parametrize(
    ("resources", "kind", "fields"),
    [
        ({"limits": {"cpu": "8"}}, "data", ["steps[0].resources.limits.cpu"]),
        ({"requests": {"cpu": "4001m"}}, "data", ["steps[0].resources.requests.cpu"]),
        ({"limits": {"memory": "9Gi"}}, "data", ["steps[0].resources.limits.memory"]),
        (
            {"limits": {"memory": "9Gi", "cpu": "5"}},
            "ml",
            ["steps[0].resources.limits.cpu", "steps[0].resources.limits.memory"],
        ),
        ({"limits": {"gpu": 1}}, "data", ["steps[0].resources.limits.gpu"]),
        ({"limits": {"gpu": 2}}, "ml", ["steps[0].resources.limits.gpu"]),
    ],
)
def test_resources_above_the_limits_are_refused(
    resources: dict[str, Any], kind: PipelineKind, fields: list[str]
) -> None:
    with pytest.raises(Invalid) as invalid:
        compiled(pipeline(step("a", resources=resources)), kind=kind)
    assert [error["field"] for error in invalid.value.details["errors"]] == fields
    assert fields[0] in invalid.value.message


def test_resources_at_the_limits_compile_with_gpus_for_ml() -> None:
    document = compiled(
        pipeline(step("a", resources={"limits": {"cpu": "4", "memory": "8Gi", "gpu": 1}})),
        kind="ml",
    )
    limits = templates(document)["step-a"]["container"]["resources"]["limits"]
    assert limits == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 1}
    assert document["metadata"]["labels"]["kubeopera.io/pipeline-kind"] == "ml"


def test_limits_come_from_settings() -> None:
    settings = Settings(DATABASE_URL="postgresql://x/y", DATA_MAX_CPU="2", ML_MAX_GPU=2)
    assert StepLimits.from_settings(settings, "data") == StepLimits("2", "8Gi", 0)
    assert StepLimits.from_settings(settings, "ml") == StepLimits("2", "8Gi", 2)


def test_an_invalid_specification_is_refused_before_compiling() -> None:
    with pytest.raises(Invalid, match=r"steps\[0\]\.depends_on\[0\]"):
        compiled(pipeline(step("a", depends_on=["nope"])))


def test_a_parsed_specification_compiles_too() -> None:
    assert compiled(wide_dag(5)) == compile_wizard(
        parse_spec(wide_dag(5)),
        tenant="acme",
        pipeline_id="p1",
        version=3,
        kind="data",
        limits=LIMITS,
    )
