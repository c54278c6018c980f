"""Merge patch (RFC 7386) and JSON patch (RFC 6902), and PATCH request bodies chosen by content
type. Purely computational, no side effects."""

from __future__ import annotations

import json
from typing import Any

from sim.kube.types import ApiError, JsonObject

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def patch_media(content_type: str, *, custom: bool = False) -> str:
    """The media type of a PATCH request; 415 unless a patch type the resource accepts (a custom
    resource takes no strategic merge patch: it has no Go struct to carry patch strategies)."""
    media = content_type.split(";", 1)[0].strip().lower()
    accepted = (
        (JSON_PATCH, MERGE_PATCH) if custom else (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)
    )
    if media not in accepted:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(accepted),
        )
    return media


def apply_patch(obj: JsonObject, body: Any, media: str) -> JsonObject:
    """`obj` patched by a request body (bytes, or an owned value) of media type `media`
    (strategic merge is treated as merge); 400 for a bad body, 422 when metadata is gone."""
    patch: Any = body
    if isinstance(body, bytes):
        try:
            patch = json.loads(body)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid patch body: {exc}") from exc
    if media == JSON_PATCH:
        result = json_patch(obj, patch)
    elif isinstance(patch, dict):
        result = merge_patch(obj, patch)
    else:
        raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
    if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
        raise ApiError(422, "Invalid", "the patched object has no metadata")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch; returns a new value and never mutates `target`.

    Subtrees the patch does not touch are shared with `target`, and values from `patch` are
    inserted as they are, so neither input may be mutated afterwards.
    """
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def clone(value: Any) -> Any:
    """Deep copy of a JSON value."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def _invalid(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise _invalid(f"invalid JSON pointer: {path!r}")
    if not path:
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_insert: bool) -> int:
    if for_insert and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise _invalid(f"invalid array index: {token!r}")
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise _invalid(f"array index out of bounds: {index}")
    return index


def _resolve(doc: Any, parts: list[str]) -> Any:
    current = doc
    for token in parts:
        if isinstance(current, dict):
            if token not in current:
                raise _invalid(f"path not found: /{'/'.join(parts)}")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, for_insert=False)]
        else:
            raise _invalid(f"path not found: /{'/'.join(parts)}")
    return current


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    token = parts[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, for_insert=True), value)
    else:
        raise _invalid(f"cannot add to a scalar at /{'/'.join(parts)}")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise _invalid("cannot remove the whole document")
    parent = _resolve(doc, parts[:-1])
    token = parts[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise _invalid(f"path not found: /{'/'.join(parts)}")
        return parent.pop(token)
    if isinstance(parent, list):
        return parent.pop(_index(parent, token, for_insert=False))
    raise _invalid(f"path not found: /{'/'.join(parts)}")


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch to a copy of `doc`; 400 when the patch is not a list of
    operations, 422 when an operation cannot apply or a `test` fails."""
    if not isinstance(operations, list):
        raise ApiError(
            400,
            "BadRequest",
            f"json patch must be a JSON array of operations, got {type(operations).__name__}",
        )
    result = clone(doc)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise ApiError(400, "BadRequest", f"invalid json patch operation: {op!r}")
        name = op["op"]
        parts = _pointer(op.get("path"))
        if name in ("add", "replace", "test") and "value" not in op:
            raise ApiError(400, "BadRequest", f"json patch {name} needs a value")
        match name:
            case "add":
                result = _add(result, parts, clone(op["value"]))
            case "remove":
                _remove(result, parts)
            case "replace":
                if parts:
                    _remove(result, parts)
                result = _add(result, parts, clone(op["value"]))
            case "move" | "copy":
                source = _pointer(op.get("from"))
                if name == "move":
                    if parts[: len(source)] == source and parts != source:
                        raise _invalid("cannot move a value into one of its children")
                    value = _remove(result, source)
                else:
                    value = clone(_resolve(result, source))
                result = _add(result, parts, value)
            case "test":
                if _resolve(result, parts) != op["value"]:
                    raise _invalid(f"test operation failed at {op['path']}")
            case _:
                raise ApiError(400, "BadRequest", f"unknown json patch operation: {name!r}")
    return result
