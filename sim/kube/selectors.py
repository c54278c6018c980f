"""Label and field selectors as the API server parses them. Purely computational."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sim.kube.types import ApiError, ResourceType

LabelOp = Literal["=", "!=", "in", "notin", "exists", "!exists"]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_TERM = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")
_EQ_TERM = re.compile(rf"^({_KEY})\s*(==|!=|=)\s*([-A-Za-z0-9_.]*)$")
_EXISTS_TERM = re.compile(rf"^(!?)\s*({_KEY})$")


def _bad(kind: str, text: str, why: str) -> ApiError:
    return ApiError(400, "BadRequest", f'unable to parse requirement: {kind} "{text}": {why}')


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    op: LabelOp
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        match self.op:
            case "=":
                return value is not None and value in self.values
            case "in":
                return value is not None and value in self.values
            case "!=" | "notin":
                return value is None or value not in self.values
            case "exists":
                return value is not None
            case "!exists":
                return value is None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[LabelRequirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    terms: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def parse_label_selector(text: str) -> LabelSelector:
    """Parse `a=b,c!=d,e in (f,g),h notin (i),j,!k`; 400 BadRequest when malformed."""
    requirements: list[LabelRequirement] = []
    if not text.strip():
        return LabelSelector(())
    for raw in _split_top_level(text):
        term = raw.strip()
        if m := _SET_TERM.match(term):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            if not values:
                raise _bad("label selector", term, "at least one value is required")
            op: LabelOp = "in" if m.group(2) == "in" else "notin"
            requirements.append(LabelRequirement(m.group(1), op, values))
        elif m := _EQ_TERM.match(term):
            eq: LabelOp = "!=" if m.group(2) == "!=" else "="
            requirements.append(LabelRequirement(m.group(1), eq, frozenset({m.group(3)})))
        elif m := _EXISTS_TERM.match(term):
            exists: LabelOp = "!exists" if m.group(1) else "exists"
            requirements.append(LabelRequirement(m.group(2), exists))
        else:
            raise _bad("label selector", term, "not a valid requirement")
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    path: tuple[str, ...]
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...]

    @property
    def metadata_only(self) -> bool:
        return all(r.path[0] == "metadata" for r in self.requirements)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    """The string form a field selector compares against; "" when absent."""
    current: Any = obj
    for part in path:
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, str | int | float):
        return str(current)
    return ""


def check_custom_resource_fields(selector: FieldSelector, *, namespaced: bool) -> None:
    """Custom resources select on metadata.name, and metadata.namespace when namespaced (a CRD
    declaring selectableFields is not emulated): 400 otherwise, in apiextensions-apiserver's
    words."""
    for requirement in selector.requirements:
        label = ".".join(requirement.path)
        if label != "metadata.name" and not (namespaced and label == "metadata.namespace"):
            raise ApiError(400, "BadRequest", f"field label not supported: {label}")


def parse_field_selector(text: str) -> FieldSelector:
    """Parse `metadata.name=x,status.phase!=Running`; 400 BadRequest when malformed."""
    requirements: list[FieldRequirement] = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        for op in ("!=", "==", "="):
            key, sep, value = term.partition(op)
            if sep:
                break
        else:
            raise _bad("field selector", term, "expected an operator")
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise _bad("field selector", term, "invalid field name")
        requirements.append(FieldRequirement(tuple(key.split(".")), value.strip(), op == "!="))
    return FieldSelector(tuple(requirements))


def field_selector_for(rtype: ResourceType, text: str | None) -> FieldSelector | None:
    """The parsed selector for a list or watch of ``rtype``; a custom resource's may only name
    what apiextensions-apiserver selects on (built-in types accept any field here: see
    docs/simulator.md)."""
    if not text:
        return None
    selector = parse_field_selector(text)
    if rtype.custom:
        check_custom_resource_fields(selector, namespaced=rtype.namespaced)
    return selector
