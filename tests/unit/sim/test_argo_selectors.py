"""nodeFieldSelector parsing and matching, per Argo's SelectorMatchesNode."""

from __future__ import annotations

import pytest

from sim.argo.selectors import Requirement, SelectorError, parse_node_field_selector

NODE = {
    "id": "wf-123",
    "name": "wf.approve",
    "displayName": "approve",
    "templateName": "gate",
    "phase": "Running",
    "templateRef": {"name": "shared", "template": "gate-tpl"},
    "inputs": {"parameters": [{"name": "env", "value": "prod"}, {"name": "n", "value": 3}]},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("id=wf-123", True),
        ("id==wf-123", True),
        ("id!=wf-123", False),
        ("displayName=approve,phase=Running", True),
        ("displayName=approve,phase=Succeeded", False),
        ("name=wf.approve", True),
        ("templateName=gate", True),
        ("templateRef.name=shared,templateRef.template=gate-tpl", True),
        ("inputs.parameters.env.value=prod", True),
        ("inputs.parameters.n.value=3", True),
        ("inputs.parameters.env.value!=prod", False),
        ("inputs.parameters.missing.value=", True),
        ("inputs.parameters.missing.value!=x", True),
        ("unknown=x", False),
    ],
)
def test_matching(selector: str, matches: bool) -> None:
    assert parse_node_field_selector(selector).matches(NODE) is matches


def test_escapes_and_operators_parse() -> None:
    parsed = parse_node_field_selector(r"displayName=a\,b,id!=x\=y")
    assert parsed.requirements == (
        Requirement("displayName", True, "a,b"),
        Requirement("id", False, "x=y"),
    )


def test_template_name_falls_back_to_template_ref() -> None:
    node = {"templateRef": {"name": "shared", "template": "gate-tpl"}}
    assert parse_node_field_selector("templateName=gate-tpl").matches(node)


@pytest.mark.parametrize("text", ["displayName", "=x", "a=b,c"])
def test_terms_without_operator_or_field_are_refused(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_node_field_selector(text)
