"""Argo's `nodeFieldSelector`: a Kubernetes field selector over a node's fields.

Purely computational, no side effects. Fields: displayName, id, name, templateName, phase,
templateRef.name, templateRef.template, inputs.parameters.<NAME>.value; operators `=`, `==`
and `!=`; a comma means AND; `\\`, `\\,` and `\\=` escape. A field a node lacks reads as "",
as in `fields.Set`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """The selector text does not parse."""


@dataclass(frozen=True)
class Requirement:
    field: str
    equal: bool
    value: str


@dataclass(frozen=True)
class NodeSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, node: Mapping[str, Any]) -> bool:
        fields = node_fields(node)
        return all((fields.get(r.field, "") == r.value) == r.equal for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        raise SelectorError(f"invalid selector: '{text}'; trailing escape")
    terms.append("".join(current))
    return terms


def _unescape(text: str) -> str:
    out: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            if char not in "\\,=!":
                raise SelectorError(f"invalid field selector value '{text}'")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            out.append(char)
    return "".join(out)


def _find_unescaped(term: str, operator: str) -> int:
    index = term.find(operator)
    while index > 0 and term[index - 1] == "\\":
        index = term.find(operator, index + 1)
    return index


def parse_node_field_selector(text: str) -> NodeSelector:
    """Parse selector text; raise SelectorError on a term without an operator."""
    if not text.strip():
        return NodeSelector(())
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        if not term:
            continue
        for operator, equal in (("!=", False), ("==", True), ("=", True)):
            index = _find_unescaped(term, operator)
            if index >= 0:
                field = term[:index].strip()
                if not field:
                    raise SelectorError(f"invalid selector: '{text}'; empty field in '{term}'")
                value = _unescape(term[index + len(operator) :])
                requirements.append(Requirement(field, equal, value))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
    return NodeSelector(tuple(requirements))


def node_fields(node: Mapping[str, Any]) -> dict[str, str]:
    """The field set Argo's `SelectorMatchesNode` builds for a node."""
    template_ref = node.get("templateRef") or {}
    template_name = node.get("templateName") or template_ref.get("template") or ""
    fields = {
        "displayName": str(node.get("displayName", "")),
        "templateName": str(template_name),
        "phase": str(node.get("phase", "")),
        "name": str(node.get("name", "")),
        "id": str(node.get("id", "")),
    }
    if template_ref:
        fields["templateRef.name"] = str(template_ref.get("name", ""))
        fields["templateRef.template"] = str(template_ref.get("template", ""))
    for param in (node.get("inputs") or {}).get("parameters") or []:
        value = param.get("value")
        fields[f"inputs.parameters.{param.get('name')}.value"] = "" if value is None else str(value)
    return fields
