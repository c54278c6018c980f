"""Template interpretation: spec resolution, parameters, `{{...}}` substitution, `depends`
and `when` expressions. Purely computational, no side effects."""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.argo.naming import Obj

_EXPRESSION = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
_DEPENDS_TOKEN = re.compile(r"\s*(&&|\|\||!|\(|\)|[A-Za-z0-9_-]+(?:\.[A-Za-z]+)?)")


def substitute(value: Any, scope: Mapping[str, str]) -> Any:
    """Replace `{{name}}` by scope[name] in every string of a JSON value; unknown names stay."""
    if isinstance(value, str):
        return _EXPRESSION.sub(lambda m: scope.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [substitute(item, scope) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, scope) for key, item in value.items()}
    return value


def parameter_value(param: Mapping[str, Any]) -> str | None:
    """A parameter's value, falling back to `default` and `valueFrom.default`."""
    for candidate in (
        param.get("value"),
        param.get("default"),
        (param.get("valueFrom") or {}).get("default"),
    ):
        if candidate is not None:
            return str(candidate)
    return None


def merge_parameters(base: list[Obj], override: list[Obj]) -> list[Obj]:
    """`override` parameters replace `base` ones by name; order: base first, then new ones."""
    by_name = {p.get("name"): p for p in override}
    merged = [copy.deepcopy(by_name.pop(p.get("name"), p)) for p in base]
    merged.extend(copy.deepcopy(p) for p in override if p.get("name") in by_name)
    return merged


def override_parameters(parameters: list[Obj], assignments: list[str]) -> list[Obj]:
    """Argo's `overrideParameters`: "NAME=VALUE" strings first, then untouched old ones.

    Raises ValueError on an assignment without "=".
    """
    if not assignments:
        return parameters
    new: list[Obj] = []
    passed: set[str] = set()
    for text in assignments:
        name, sep, value = text.partition("=")
        if not sep:
            raise ValueError(f"expected parameter of the form: NAME=VALUE. Received: {text}")
        new.append({"name": name, "value": value})
        passed.add(name)
    new.extend(p for p in parameters if p.get("name") not in passed)
    return new


def effective_spec(workflow: Obj, template: Obj | None) -> Obj:
    """The spec a run executes: the workflow's own, or the WorkflowTemplate's spec with the
    workflow's arguments, entrypoint, onExit and shutdown laid over it."""
    spec: Obj = workflow.get("spec") or {}
    if template is None:
        return copy.deepcopy(spec)
    merged: Obj = copy.deepcopy(template.get("spec") or {})
    for key, value in spec.items():
        if key == "workflowTemplateRef":
            continue
        if key == "arguments":
            base = (merged.get("arguments") or {}).get("parameters") or []
            params = merge_parameters(base, (value or {}).get("parameters") or [])
            merged["arguments"] = {**(merged.get("arguments") or {}), **value}
            merged["arguments"]["parameters"] = params
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass(frozen=True)
class ResolvedInputs:
    parameters: list[Obj]
    missing: str | None


def resolve_inputs(template: Obj, arguments: list[Obj]) -> ResolvedInputs:
    """Bind a template's declared input parameters to the caller's arguments or defaults."""
    given = {a.get("name"): parameter_value(a) for a in arguments}
    resolved: list[Obj] = []
    for param in (template.get("inputs") or {}).get("parameters") or []:
        name = param.get("name")
        value = given.get(name)
        if value is None:
            value = parameter_value(param)
        if value is None:
            return ResolvedInputs(resolved, str(name))
        resolved.append({"name": name, "value": value})
    return ResolvedInputs(resolved, None)


def input_scope(parameters: list[Obj]) -> dict[str, str]:
    return {f"inputs.parameters.{p['name']}": str(p.get("value", "")) for p in parameters}


def when_is_false(expression: object) -> bool:
    """`when` after substitution: false only for a literal false or a false (in)equality."""
    text = str(expression).strip()
    if text.lower() == "false":
        return True
    for operator, equal in (("!=", False), ("==", True)):
        if operator in text:
            left, _, right = text.partition(operator)
            same = left.strip().strip("'\"") == right.strip().strip("'\"")
            return same != equal
    return False


@dataclass(frozen=True)
class DependsTerm:
    task: str
    result: str  # "" means the default: Succeeded, Skipped (or Daemoned)


def dependency_expression(task: Obj) -> str:
    """The `depends` expression of a DAG task (`dependencies: [a, b]` is `a && b`)."""
    depends = task.get("depends")
    if depends:
        return str(depends)
    return " && ".join(str(d) for d in task.get("dependencies") or [])


def depends_terms(expression: str) -> list[DependsTerm]:
    """The task references of a `depends` expression; raise ValueError when it does not parse."""
    terms: list[DependsTerm] = []
    for token in _tokenise(expression):
        if token not in ("&&", "||", "!", "(", ")"):
            task, _, result = token.partition(".")
            terms.append(DependsTerm(task, result))
    return terms


def _tokenise(expression: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = expression.strip()
    while position < len(text):
        match = _DEPENDS_TOKEN.match(text, position)
        if match is None:
            raise ValueError(f"invalid depends expression '{expression}'")
        tokens.append(match.group(1))
        position = match.end()
    return tokens


_RESULTS: dict[str, frozenset[str]] = {
    "": frozenset({"Succeeded", "Skipped"}),
    "Succeeded": frozenset({"Succeeded"}),
    "Failed": frozenset({"Failed"}),
    "Errored": frozenset({"Error"}),
    "Skipped": frozenset({"Skipped"}),
    "Omitted": frozenset({"Omitted"}),
    "Completed": frozenset({"Succeeded", "Failed"}),
    "AnySucceeded": frozenset({"Succeeded"}),
    "AllFailed": frozenset({"Failed", "Error"}),
    "Daemoned": frozenset(),
}
HANDLING_RESULTS = frozenset({"Failed", "Errored", "Completed", "AllFailed"})


def evaluate_depends(expression: str, phases: Mapping[str, str]) -> bool:
    """Evaluate a `depends` expression once every referenced task has a fulfilled phase."""
    if not expression.strip():
        return True
    python: list[str] = []
    for token in _tokenise(expression):
        if token == "&&":
            python.append(" and ")
        elif token == "||":
            python.append(" or ")
        elif token == "!":
            python.append(" not ")
        elif token in ("(", ")"):
            python.append(token)
        else:
            task, _, result = token.partition(".")
            if result not in _RESULTS:
                raise ValueError(f"unknown task result '{result}' in '{expression}'")
            python.append(str(phases.get(task, "") in _RESULTS[result]))
    return _evaluate_boolean(ast.parse("".join(python), mode="eval").body)


def _evaluate_boolean(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BoolOp):
        values = [_evaluate_boolean(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _evaluate_boolean(node.operand)
    raise ValueError("invalid depends expression")


def template_kind(template: Obj) -> str | None:
    """The single template type, or None when zero or several are set."""
    kinds = [
        k for k in ("container", "script", "steps", "dag", "suspend", "resource") if k in template
    ]
    return kinds[0] if len(kinds) == 1 else None


DEFAULT_KEY_FORMAT = "{{workflow.name}}/{{pod.name}}"


def render_key_format(key_format: str, workflow: Obj, pod: str) -> str:
    """An artifact repository `keyFormat` for one pod, without a trailing slash."""
    metadata = workflow.get("metadata") or {}
    created = str(metadata.get("creationTimestamp") or "")
    scope = {
        "workflow.name": str(metadata.get("name", "")),
        "workflow.namespace": str(metadata.get("namespace", "")),
        "workflow.uid": str(metadata.get("uid", "")),
        "pod.name": pod,
    }
    for part, (start, end) in {
        "Y": (0, 4),
        "m": (5, 7),
        "d": (8, 10),
        "H": (11, 13),
        "M": (14, 16),
        "S": (17, 19),
    }.items():
        scope[f"workflow.creationTimestamp.{part}"] = created[start:end]
    for key, value in (metadata.get("labels") or {}).items():
        scope[f"workflow.labels.{key}"] = str(value)
    rendered: str = substitute(key_format or DEFAULT_KEY_FORMAT, scope)
    return rendered.rstrip("/")
