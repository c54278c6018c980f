"""Argo's schema as a second opinion on a WorkflowTemplate, from Hera's generated models.

Purely computational, no side effects. The allowlist (``compiler.pipelines.allowlist``) knows only
the fields it has judged safe; this module asks what Argo itself would make of the document, so that
a template the allowlist accepts is also one Argo reads as written. Two checks:

1. **Schema** (rule ``argo_schema``): the document is validated against Hera's
   ``WorkflowTemplate`` model (generated from Argo's OpenAPI document) in pydantic's *strict JSON*
   mode, which matches how Argo's Go types decode JSON: no string where a number belongs, no
   number where a string belongs, no float where an integer belongs. Two kinds of value Argo
   accepts in more than one form are let through as Argo reads them: a Kubernetes quantity given
   as a number (``cpu: 2``), and Argo's ``AnyString`` parameter fields (``value``, ``default``,
   ``enum``, ``description`` of a parameter, ``default`` of ``valueFrom``) given as a number or
   a boolean (``value: 3``).
2. **Round trip** (rule ``argo_schema_dropped``): the validated model is dumped again and
   compared with the input. Hera's models, like Argo's Go structs, ignore fields they do not
   know, so a misspelt ``contaner:`` or a field from another Argo version would silently vanish
   from what Argo runs while a reviewer still reads it: every path present in the input but
   missing (or changed) after the round trip is reported. When the schema check fails there is
   no model to dump, so unknown fields are then found by walking the document along the model's
   field tables instead; a refusal lists both kinds at once.

Paths are written as the allowlist writes them (``spec.templates[2].container.image``).
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final, Literal

import orjson
from hera.workflows.models.io.argoproj.workflow.v1alpha1 import (
    Parameter,
    ValueFrom,
    WorkflowTemplate,
)
from hera.workflows.models.io.k8s.apimachinery.pkg.api.resource import Quantity
from pydantic import BaseModel, RootModel, ValidationError
from pydantic_core import ErrorDetails

from compiler.pipelines.allowlist import Violation
from compiler.pipelines.podrules import Walk

__all__ = ["RULES", "schema_violations"]

RULES: Final[Mapping[str, str]] = {
    "argo_schema": "Argo's schema refuses the value (wrong type, missing required field)",
    "argo_schema_dropped": "unknown field: Argo would drop it (or rewrite the value), so what "
    "runs would differ from what was reviewed",
}
_DROPPED: Final = "unknown field: Argo would drop it"

# Argo's ``AnyString`` fields: Go's decoder accepts a JSON number or boolean and keeps its text.
_ANY_STRING: Final = frozenset(
    {
        (Parameter, "value"),
        (Parameter, "default"),
        (Parameter, "enum"),
        (Parameter, "description"),
        (ValueFrom, "default"),
    }
)

# A value's shape in the model: an object of a model class, a list or map of a shape, or a leaf.
_Shape = tuple[Literal["model", "list", "dict", "leaf"], Any]
_Field = tuple[str, _Shape]  # the Python field name (for ``_ANY_STRING``) and its shape
_Part = str | int


def schema_violations(document: Mapping[str, Any]) -> list[Violation]:
    """Every place where Argo's schema refuses ``document`` or would drop or rewrite part of it
    (empty: Argo reads the document exactly as written)."""
    try:
        payload = orjson.dumps(document)
    except (TypeError, orjson.JSONEncodeError) as exc:
        return [Violation("$", "argo_schema", f"not a JSON document: {exc}")]
    checked: object = document
    try:
        model = _validate(payload)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        judged = [(error, *_leniency(error)) for error in errors]
        refused = [error for error, parts, _ in judged if parts is None]
        if refused:
            return _refused(refused, document)
        for _, parts, value in judged:
            assert parts is not None
            checked = _replaced(checked, parts, value)
        try:
            model = _validate(orjson.dumps(checked))
        except ValidationError as again:  # defensive: a lenient value that still fails
            return _refused(again.errors(include_url=False), checked)
    dumped = orjson.loads(model.model_dump_json(by_alias=True, exclude_unset=True))
    if dumped == checked:
        return []
    return list(_changed(checked, dumped))


def _validate(payload: bytes) -> WorkflowTemplate:
    # by_name=False: Hera's models accept Python field names (service_account_name) too, which
    # Argo would not; here such a key is unknown, so it is dropped and reported.
    return WorkflowTemplate.model_validate_json(payload, strict=True, by_name=False)


def _refused(errors: list[ErrorDetails], document: object) -> list[Violation]:
    """The schema errors (one violation per path) followed by the unknown fields."""
    messages: dict[str, list[str]] = {}
    for error in errors:
        path = _locate(error["loc"])[0]
        found = messages.setdefault(path, [])
        if error["msg"] not in found:  # a union's members each report the same value
            found.append(error["msg"])
    violations = [
        Violation(path, "argo_schema", f"Argo's schema: {'; '.join(found)}")
        for path, found in messages.items()
    ]
    violations += [
        Violation(path, "argo_schema_dropped", _DROPPED)
        for path in _unknown_fields(document)
        if path not in messages
    ]
    return violations


# --- Argo's lenient fields -----------------------------------------------------------------------
def _leniency(error: ErrorDetails) -> tuple[list[_Part] | None, str]:
    """For an error Argo would not make (a number as a quantity, a number or boolean as an
    AnyString), the document path of the value and the string Argo reads; else (None, "")."""
    value = error["input"]
    if error["type"] != "string_type" or not isinstance(value, int | float):
        return None, ""
    _, parts, shape, owner = _locate(error["loc"])
    quantity = shape == ("leaf", Quantity) and not isinstance(value, bool)
    if quantity or owner in _ANY_STRING:
        return parts, _as_string(value)
    return None, ""


def _as_string(value: float | bool) -> str:
    """The text Go's decoder keeps for a JSON number or boolean (no exponent, no trailing .0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _replaced(document: object, parts: list[_Part], value: object) -> object:
    """``document`` with the value at ``parts`` replaced, copying only the containers on the way
    (the caller's document is never changed)."""
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(document, Mapping) and isinstance(head, str):
        return {**document, head: _replaced(document[head], rest, value)}
    if isinstance(document, list) and isinstance(head, int):
        copy = list(document)
        copy[head] = _replaced(document[head], rest, value)
        return copy
    raise LookupError(f"no value at {parts!r}")  # pydantic located it: cannot happen


# --- the model's shape ---------------------------------------------------------------------------
def _shape(annotation: Any) -> _Shape:
    """What a field annotation holds, with Optional, Annotated and root models looked through."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _shape(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return _shape(members[0]) if len(members) == 1 else ("leaf", annotation)
    if origin is list:
        return ("list", typing.get_args(annotation)[0])
    if origin is dict:
        return ("dict", typing.get_args(annotation)[1])
    if isinstance(annotation, type) and issubclass(annotation, RootModel):
        inner = _shape(annotation.model_fields["root"].annotation)
        return inner if inner[0] != "leaf" else ("leaf", annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation)
    return ("leaf", annotation)


@functools.cache
def _fields(model: type[BaseModel]) -> Mapping[str, _Field]:
    """A model's fields by their JSON name (the alias where there is one)."""
    return {
        field.alias or name: (name, _shape(field.annotation))
        for name, field in model.model_fields.items()
    }


_ROOT: Final[_Shape] = ("model", WorkflowTemplate)


def _locate(
    loc: tuple[_Part, ...],
) -> tuple[str, list[_Part], _Shape, tuple[type[BaseModel], str] | None]:
    """A pydantic error location as a document path, the parts of that path, the shape of the
    value there and the (model, field) that holds it. Union members add their own names to a
    location (``limit.str``, ``limit.int``); they are not part of the document path."""
    shape: _Shape = _ROOT
    owner: tuple[type[BaseModel], str] | None = None
    parts: list[_Part]
    path, parts = "", []
    for index, part in enumerate(loc):
        kind, argument = shape
        if kind == "model" and isinstance(part, str) and part in _fields(argument):
            name, shape = _fields(argument)[part]
            owner = (argument, name)
        elif (kind == "list" and isinstance(part, int)) or (
            kind == "dict" and isinstance(part, str)
        ):
            shape = _shape(argument)
        elif kind == "leaf":
            break  # the rest names union members
        else:  # pydantic went where the shape does not say: keep its location as it is
            for rest in loc[index:]:
                path = _join(path, rest)
                parts.append(rest)
            break
        path = _join(path, part)
        parts.append(part)
    return path or "$", parts, shape, owner


def _join(path: str, part: _Part) -> str:
    return f"{path}[{part}]" if isinstance(part, int) else Walk.join(path, part)


# --- what Argo would not keep --------------------------------------------------------------------
def _unknown_fields(document: object) -> list[str]:
    """Paths of keys the model has no field for, in document order (iteratively: the inline
    template nesting of a hostile document cannot exhaust the stack)."""
    found: list[str] = []
    stack: list[tuple[object, _Shape, str]] = [(document, _ROOT, "")]
    while stack:
        value, (kind, argument), path = stack.pop()
        children: list[tuple[object, _Shape, str]] = []
        if kind == "model" and isinstance(value, Mapping):
            fields = _fields(argument)
            for key, item in value.items():
                field = fields.get(key)
                if field is None:
                    found.append(Walk.join(path, key))
                else:
                    children.append((item, field[1], Walk.join(path, key)))
        elif kind == "list" and isinstance(value, list):
            shape = _shape(argument)
            children = [(item, shape, f"{path}[{index}]") for index, item in enumerate(value)]
        elif kind == "dict" and isinstance(value, Mapping):
            shape = _shape(argument)
            children = [(item, shape, Walk.join(path, key)) for key, item in value.items()]
        stack.extend(reversed(children))
    return found


def _changed(before: object, after: object) -> Iterator[Violation]:
    """Every path of ``before`` that ``after`` lacks or holds differently, in document order."""
    stack: list[tuple[object, object, str]] = [(before, after, "")]
    while stack:
        old, new, path = stack.pop()
        if isinstance(old, dict) and isinstance(new, dict):
            pending = []
            for key, item in old.items():
                child = Walk.join(path, key)
                if key not in new:
                    yield Violation(child, "argo_schema_dropped", _DROPPED)
                elif not _same(item, new[key]):
                    pending.append((item, new[key], child))
            stack.extend(reversed(pending))
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            stack.extend(
                reversed(
                    [
                        (item, new[index], f"{path}[{index}]")
                        for index, item in enumerate(old)
                        if not _same(item, new[index])
                    ]
                )
            )
        elif not _same(old, new):
            yield Violation(
                path or "$",
                "argo_schema_dropped",
                f"Argo would not keep this value as written: it reads {_brief(new)}",
            )


def _same(old: object, new: object) -> bool:
    """Equal as JSON values: 2 and 2.0 are one number (a float field dumps 2 as 2.0), but a
    boolean is not a number and a string is not a list."""
    if type(old) is type(new) or (type(old) in _NUMBERS and type(new) in _NUMBERS):
        return old == new
    return False


_NUMBERS: Final = (int, float)


def _brief(value: object) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 80 else f"{text[:77]}..."
