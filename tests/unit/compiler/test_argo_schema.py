"""rules.argo_schema: Argo's schema (Hera's models) and the round trip as a second opinion."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _pipelines import pipeline, step, wide_dag

from compiler.pipelines.allowlist import Violation
from compiler.pipelines.argo_schema import RULES, schema_violations
from compiler.pipelines.compile import StepLimits, compile_wizard
from compiler.pipelines.stamping import stamp
from shared.pipelines import PipelineKind

HERE = Path(__file__).parent
BENIGN = sorted((HERE / "benign_corpus").glob("*.yaml"))
LIMITS = StepLimits(max_cpu="4", max_memory="8Gi", max_gpu=1)
DROPPED = "unknown field: Argo would drop it"
T0 = "spec.templates[0]"


def benign(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((HERE / "benign_corpus" / name).read_text())
    return loaded


def found(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(violation.rule, violation.path) for violation in schema_violations(document)}


def compiled(spec: dict[str, Any], kind: PipelineKind = "data") -> dict[str, Any]:
    return compile_wizard(
        spec, tenant="acme", pipeline_id="p1", version=3, kind=kind, limits=LIMITS
    )


def test_the_benign_corpus_is_not_empty() -> None:
    assert len(BENIGN) >= 10


@pytest.mark.parametrize("path", BENIGN, ids=lambda path: path.name)
def test_benign_templates_pass(path: Path) -> None:
    assert schema_violations(yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        (wide_dag(50), "data"),
        (wide_dag(7), "ml"),
        (pipeline(step("a")), "data"),
        (pipeline(step("s", runtime="spark"), step("t", runtime="pytorch"), step("u")), "data"),
        (
            pipeline(
                step("a", outputs={"parameters": [{"name": "day", "path": "/d"}]}),
                step(
                    "b",
                    inputs={"parameters": [{"name": "day", "from": "a.day"}]},
                    input_filter="{day: .day}",
                    output_filter="{total: .count}",
                ),
            ),
            "data",
        ),
        (
            pipeline(
                step(
                    "a",
                    resources={"limits": {"cpu": "4", "memory": "8Gi", "gpu": 1}},
                    retries={"limit": 4, "policy": "OnError", "backoff": {"duration": "1m"}},
                )
            ),
            "ml",
        ),
    ],
    ids=["wide-50", "wide-7-ml", "one-step", "spark-pytorch", "jq-filters", "gpu-retries"],
)
def test_compiled_and_stamped_templates_pass(spec: dict[str, Any], kind: PipelineKind) -> None:
    document = compiled(spec, kind)
    assert schema_violations(document) == []
    stamped = stamp(
        document,
        tenant="acme",
        namespace="kubeopera-data-acme",
        pipeline_id="p1",
        version=3,
        kind=kind,
    )
    assert schema_violations(stamped) == []


def _set(document: dict[str, Any], path: list[str | int], value: object) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    target: Any = changed
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("name", "where", "value", "path"),
    [
        # The classic typo: the container vanishes and the template has nothing to run.
        ("02_steps.yaml", ["spec", "templates", 3, "contaner"], {"image": "x"}, "contaner"),
        ("01_dag.yaml", ["spec", "entrypont"], "main", "spec.entrypont"),
        ("01_dag.yaml", ["specs"], {}, "specs"),
        ("01_dag.yaml", ["metadata", "nmae"], "x", "metadata.nmae"),
        (
            "07_volumes_security.yaml",
            ["spec", "templates", 0, "container", "securityContext", "privilegd"],
            True,
            f"{T0}.container.securityContext.privilegd",
        ),
        (
            "07_volumes_security.yaml",
            ["spec", "templates", 0, "container", "env", 0, "valueFrom", "secretKeyRef", "nam"],
            "x",
            f"{T0}.container.env[0].valueFrom.secretKeyRef.nam",
        ),
        (
            "01_dag.yaml",
            ["spec", "templates", 0, "dag", "tasks", 1, "dependencies2"],
            ["extract"],
            f"{T0}.dag.tasks[1].dependencies2",
        ),
        (
            "02_steps.yaml",
            ["spec", "templates", 0, "steps", 1, 0, "withItem"],
            ["a"],
            f"{T0}.steps[1][0].withItem",
        ),
        (
            "07_volumes_security.yaml",
            ["spec", "volumeClaimTemplates", 0, "spec", "resources", "request"],
            {"storage": "1Gi"},
            "spec.volumeClaimTemplates[0].spec.resources.request",
        ),
        # A key that is not an identifier is quoted as the allowlist quotes it.
        ("01_dag.yaml", ["spec", "x-kubernetes"], 1, 'spec["x-kubernetes"]'),
        # Hera accepts Python field names; Argo does not know them.
        ("01_dag.yaml", ["spec", "service_account_name"], "x", "spec.service_account_name"),
    ],
)
def test_unknown_fields_are_reported_at_their_exact_path(
    name: str, where: list[str | int], value: object, path: str
) -> None:
    document = _set(benign(name), where, value)
    if path == "contaner":
        path = "spec.templates[3].contaner"
    assert schema_violations(document) == [Violation(path, "argo_schema_dropped", DROPPED)]


def test_an_unknown_field_inside_an_inline_template_is_reported() -> None:
    document = benign("02_steps.yaml")
    document["spec"]["templates"][0]["steps"][0][0] = {
        "name": "inline",
        "inline": {"container": {"image": "alpine:3.20", "imagePullPolicyy": "Always"}},
    }
    assert found(document) == {
        ("argo_schema_dropped", f"{T0}.steps[0][0].inline.container.imagePullPolicyy")
    }


@pytest.mark.parametrize(
    ("where", "value", "path", "message"),
    [
        (
            ["spec", "templates", 0, "container", "image"],
            3,
            f"{T0}.container.image",
            "Argo's schema: Input should be a valid string",
        ),
        (
            ["spec", "activeDeadlineSeconds"],
            "7200",
            "spec.activeDeadlineSeconds",
            "Argo's schema: Input should be a valid integer",
        ),
        (
            ["spec", "activeDeadlineSeconds"],
            1.5,
            "spec.activeDeadlineSeconds",
            "Argo's schema: Input should be a valid integer",
        ),
        (
            ["spec", "templates", 0, "retryStrategy", "limit"],
            1.5,
            f"{T0}.retryStrategy.limit",
            "Argo's schema: Input should be a valid string; Input should be a valid integer",
        ),
        (
            ["spec", "templates", 0, "container", "command"],
            "sh -c exit",
            f"{T0}.container.command",
            "Argo's schema: Input should be a valid array",
        ),
        (
            ["spec", "podGC"],
            "OnPodSuccess",
            "spec.podGC",
            "Argo's schema: Input should be an object",
        ),
        (
            ["spec", "templates", 0, "container", "securityContext"],
            {"privileged": "false"},
            f"{T0}.container.securityContext.privileged",
            "Argo's schema: Input should be a valid boolean",
        ),
        (
            ["metadata", "labels"],
            {"team": 7},
            "metadata.labels.team",
            "Argo's schema: Input should be a valid string",
        ),
        (
            ["spec", "templates", 0, "container", "resources", "limits", "cpu"],
            True,
            f"{T0}.container.resources.limits.cpu",
            "Argo's schema: Input should be a valid string",
        ),
        (
            ["spec", "arguments"],
            {"parameters": [{"value": "x"}]},
            "spec.arguments.parameters[0].name",
            "Argo's schema: Field required",
        ),
    ],
)
def test_wrong_types_are_reported_with_the_schema_rule(
    where: list[str | int], value: object, path: str, message: str
) -> None:
    document = benign("04_retries_timeouts.yaml")
    document["spec"]["templates"][0]["container"]["resources"] = {"limits": {"cpu": "1"}}
    document = _set(document, where, value)
    assert schema_violations(document) == [Violation(path, "argo_schema", message)]


def test_type_errors_and_unknown_fields_are_reported_together() -> None:
    document = benign("01_dag.yaml")
    extract = document["spec"]["templates"][1]
    extract["container"]["image"] = ["a", "b"]
    extract["container"]["imagee"] = "x"
    extract["outputs"]["parameters"][0]["valueFrom"]["paht"] = "/tmp/x"
    assert found(document) == {
        ("argo_schema", "spec.templates[1].container.image"),
        ("argo_schema_dropped", "spec.templates[1].container.imagee"),
        ("argo_schema_dropped", "spec.templates[1].outputs.parameters[0].valueFrom.paht"),
    }


@pytest.mark.parametrize(
    ("where", "value"),
    [
        # Kubernetes quantities decode from JSON numbers as from strings.
        (["spec", "templates", 0, "container", "resources", "limits", "cpu"], 2),
        (["spec", "templates", 0, "container", "resources", "requests", "memory"], 1.5),
        # Argo's AnyString parameter fields keep a number's or a boolean's text.
        (["spec", "arguments"], {"parameters": [{"name": "n", "value": 3}]}),
        (["spec", "arguments"], {"parameters": [{"name": "n", "value": True}]}),
        (["spec", "arguments"], {"parameters": [{"name": "n", "default": 0.5}]}),
        (["spec", "arguments"], {"parameters": [{"name": "n", "enum": [1, "two", False]}]}),
        (
            ["spec", "templates", 0, "outputs"],
            {"parameters": [{"name": "n", "valueFrom": {"path": "/n", "default": 0}}]},
        ),
        # IntOrString fields take either.
        (["spec", "templates", 0, "retryStrategy", "limit"], 3),
        (["spec", "templates", 0, "retryStrategy", "limit"], "3"),
        # Empty objects, nulls and floats that are whole numbers are kept as written.
        (["spec", "templates", 0, "container", "securityContext"], {}),
        (["spec", "templates", 0, "container", "args"], None),
        (["spec", "podGC"], {"strategy": "OnPodSuccess", "labelSelector": {}}),
    ],
)
def test_values_argo_accepts_in_another_form_pass(where: list[str | int], value: object) -> None:
    document = benign("04_retries_timeouts.yaml")
    document["spec"]["templates"][0]["container"]["resources"] = {"limits": {}, "requests": {}}
    assert schema_violations(_set(document, where, value)) == []


def test_a_number_is_not_accepted_where_argo_wants_only_a_string() -> None:
    document = _set(
        benign("01_dag.yaml"), ["spec", "templates", 1, "inputs", "parameters", 0, "name"], 5
    )
    assert found(document) == {("argo_schema", "spec.templates[1].inputs.parameters[0].name")}


def test_the_input_document_is_never_changed() -> None:
    document = benign("04_retries_timeouts.yaml")
    document["spec"]["templates"][0]["container"]["resources"] = {"limits": {"cpu": 2}}
    document["spec"]["bogus"] = True
    before = copy.deepcopy(document)
    assert found(document) == {("argo_schema_dropped", "spec.bogus")}
    assert document == before


@pytest.mark.parametrize(
    ("document", "path", "message"),
    [
        ([], "$", "Argo's schema: Input should be an object"),
        ({"metadata": {"name": "x"}}, "spec", "Argo's schema: Field required"),
        (
            {"metadata": {"name": "x"}, "spec": []},
            "spec",
            "Argo's schema: Input should be an object",
        ),
    ],
)
def test_malformed_documents_are_reported_not_raised(
    document: Any, path: str, message: str
) -> None:
    assert Violation(path, "argo_schema", message) in schema_violations(document)


def test_a_value_json_cannot_hold_is_reported() -> None:
    (violation,) = schema_violations({"metadata": {"name": "x"}, "spec": {"x": {1, 2}}})
    assert (violation.path, violation.rule) == ("$", "argo_schema")


def nested(levels: int) -> dict[str, Any]:
    template: dict[str, Any] = {"container": {"image": "x", "imagee": "y"}}
    for _ in range(levels):
        template = {"steps": [[{"name": "s", "inline": template}]]}
    return {"metadata": {"name": "x"}, "spec": {"templates": [{"name": "t", **template}]}}


def test_unknown_fields_deep_in_inline_templates_are_found() -> None:
    (violation,) = schema_violations(nested(30))
    assert violation.rule == "argo_schema_dropped"
    assert violation.path.endswith("].inline.container.imagee")
    assert violation.path.count("inline") == 30


def test_a_document_nested_beyond_the_json_parser_limit_is_reported_not_raised() -> None:
    """pydantic's JSON parser stops at a fixed depth; yamldoc and the allowlist refuse such
    documents long before (64 levels, 8 inline templates), this is the last line."""
    violations = schema_violations(nested(60))
    assert Violation("$", "argo_schema", violations[0].message) == violations[0]
    assert "recursion limit" in violations[0].message


def test_every_rule_has_a_reason() -> None:
    assert set(RULES) == {"argo_schema", "argo_schema_dropped"}
    assert all(RULES.values())


def test_importing_the_module_loads_no_io_library() -> None:
    """import-linter sees only that we import ``hera``, not what hera imports: check it runs."""
    forbidden = ["aiohttp", "asyncpg", "kubernetes_asyncio", "redis", "boto3", "botocore"]
    code = (
        "import sys, compiler.pipelines.argo_schema, compiler.pipelines.yamldoc; "
        f"print(sorted(name for name in {forbidden!r} if name in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE.parents[2],
    )
    assert result.stdout.strip() == "[]"
