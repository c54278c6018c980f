"""Template interpretation and lint: parameters, substitution, depends, when, key formats."""

from __future__ import annotations

import pytest

from sim.argo.lint import LintError, lint_spec
from sim.argo.naming import fnv32a, node_id, pod_name
from sim.argo.templates import (
    effective_spec,
    evaluate_depends,
    override_parameters,
    render_key_format,
    resolve_inputs,
    substitute,
    when_is_false,
)


def test_names_follow_argo() -> None:
    assert fnv32a("") == 0x811C9DC5
    assert node_id("wf", "wf") == "wf"
    assert node_id("wf", "wf.a") == f"wf-{fnv32a('wf.a')}"
    assert pod_name("wf", "wf.a", "echo") == f"wf-echo-{fnv32a('wf.a')}"
    assert pod_name("wf", "wf", "echo") == "wf"


def test_substitution_leaves_unknown_names() -> None:
    scope = {"inputs.parameters.x": "1"}
    assert substitute({"a": ["{{ inputs.parameters.x }}-{{other}}"]}, scope) == {
        "a": ["1-{{other}}"]
    }


def test_workflow_arguments_override_template_defaults() -> None:
    template = {
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]},
            "templates": [],
        }
    }
    workflow = {
        "spec": {
            "workflowTemplateRef": {"name": "t"},
            "arguments": {"parameters": [{"name": "b", "value": "B"}, {"name": "c", "value": "C"}]},
        }
    }
    spec = effective_spec(workflow, template)
    assert spec["arguments"]["parameters"] == [
        {"name": "a", "value": "1"},
        {"name": "b", "value": "B"},
        {"name": "c", "value": "C"},
    ]
    assert "workflowTemplateRef" not in spec


def test_inputs_bind_arguments_then_defaults_and_report_missing() -> None:
    template = {"inputs": {"parameters": [{"name": "a", "default": "x"}, {"name": "b"}]}}
    assert resolve_inputs(template, [{"name": "b", "value": "y"}]).parameters == [
        {"name": "a", "value": "x"},
        {"name": "b", "value": "y"},
    ]
    assert resolve_inputs(template, []).missing == "b"


def test_override_parameters_like_argo() -> None:
    old = [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]
    assert override_parameters(old, ["b=3", "c=x=y"]) == [
        {"name": "b", "value": "3"},
        {"name": "c", "value": "x=y"},
        {"name": "a", "value": "1"},
    ]
    with pytest.raises(ValueError, match="NAME=VALUE"):
        override_parameters(old, ["novalue"])


@pytest.mark.parametrize(
    ("expression", "phases", "expected"),
    [
        ("a", {"a": "Succeeded"}, True),
        ("a", {"a": "Skipped"}, True),
        ("a", {"a": "Failed"}, False),
        ("a.Failed", {"a": "Failed"}, True),
        ("a && b", {"a": "Succeeded", "b": "Failed"}, False),
        ("a || b", {"a": "Succeeded", "b": "Failed"}, True),
        ("(a.Succeeded || a.Failed) && !b.Errored", {"a": "Failed", "b": "Succeeded"}, True),
        ("a.Completed", {"a": "Failed"}, True),
        ("", {}, True),
    ],
)
def test_depends(expression: str, phases: dict[str, str], expected: bool) -> None:
    assert evaluate_depends(expression, phases) is expected


@pytest.mark.parametrize(
    ("when", "false"),
    [
        ("false", True),
        ("true", False),
        ("yes == yes", False),
        ("no == yes", True),
        ("a != a", True),
    ],
)
def test_when(when: str, false: bool) -> None:
    assert when_is_false(when) is false


def test_key_format() -> None:
    workflow = {
        "metadata": {
            "name": "wf",
            "namespace": "ns",
            "uid": "u",
            "creationTimestamp": "2024-03-05T10:11:12Z",
        }
    }
    assert render_key_format("", workflow, "pod") == "wf/pod"
    fmt = (
        "{{workflow.namespace}}/{{workflow.creationTimestamp.Y}}/"
        "{{workflow.creationTimestamp.m}}/{{pod.name}}/"
    )
    assert render_key_format(fmt, workflow, "pod") == "ns/2024/03/pod"


def _spec(**overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "entrypoint": "main",
        "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "a", "template": "leaf"}]}},
            {"name": "leaf", "container": {"image": "busybox"}},
        ],
    }
    spec.update(overrides)
    return spec


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (_spec(entrypoint=""), "spec.entrypoint is required"),
        (_spec(onExit="bye"), "spec.onExit template 'bye' undefined"),
        (
            _spec(templates=[{"name": "main", "container": {}}, {"name": "main", "suspend": {}}]),
            "spec.templates[1].name 'main' is not unique",
        ),
        (
            _spec(templates=[{"name": "main", "container": {}, "suspend": {}}]),
            "templates.main template type unspecified or multiple",
        ),
        (
            _spec(templates=[{"name": "main", "steps": [[{"name": "s", "template": "x"}]]}]),
            "templates.main.steps[0].s.template 'x' undefined",
        ),
        (
            _spec(
                templates=[
                    {
                        "name": "main",
                        "dag": {
                            "tasks": [
                                {"name": "a", "template": "main", "depends": "b"},
                                {"name": "b", "template": "main", "depends": "a"},
                            ]
                        },
                    }
                ]
            ),
            "dependency cycle",
        ),
    ],
)
def test_lint_errors(spec: dict[str, object], message: str) -> None:
    with pytest.raises(LintError, match=message.replace("[", r"\[").replace("]", r"\]")):
        lint_spec(spec)


def test_lint_accepts_a_valid_spec() -> None:
    lint_spec(_spec())
