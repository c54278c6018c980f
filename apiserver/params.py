"""Reading path, query and body parameters; every failure is Invalid naming the parameter."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote_plus, unquote_to_bytes

from aiohttp import web

from apiserver.auth import ACTING_TENANT_PARAM
from shared.errors import Invalid
from shared.web import is_text, json_body

__all__ = ["check_encoding", "flag", "json_body", "query_params", "string_map", "text_field"]

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check_encoding(raw_query: str) -> None:
    """Raise Invalid naming the first query parameter whose percent-encoding is malformed or
    does not decode to UTF-8 (the parsed query would hold U+FFFD or the escape as it came).
    Purely computational."""
    for pair in raw_query.split("&"):
        raw_name, _, raw_value = pair.partition("=")
        for part in (raw_name, raw_value):
            problem = None
            if _BAD_ESCAPE.search(part):
                problem = "malformed percent-encoding"
            else:
                try:
                    unquote_to_bytes(part.replace("+", " ")).decode("utf-8")
                except UnicodeDecodeError:
                    problem = "percent-encoded bytes that are not UTF-8"
            if problem is not None:
                name = unquote_plus(raw_name)[:253]
                raise Invalid(f"{name}: {problem}", details={"parameter": name})


def group_params(items: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Query items (repeated keys allowed) as name -> values, in order."""
    grouped: dict[str, list[str]] = {}
    for key, value in items:
        grouped.setdefault(key, []).append(value)
    return grouped


def check_known(params: Mapping[str, Sequence[str]], allowed: Iterable[str]) -> None:
    """Raise Invalid naming the first parameter the route does not take."""
    known = {*allowed, ACTING_TENANT_PARAM}
    for name in params:
        if name not in known:
            raise Invalid(f"{name}: unknown query parameter", details={"parameter": name})


def query_params(request: web.Request, allowed: frozenset[str] | set[str]) -> dict[str, list[str]]:
    """The query as name -> values, refusing names the route does not take and values that
    are not text."""
    check_encoding(request.rel_url.raw_query_string)
    params = group_params(request.query.items())
    check_known(params, allowed)
    for name, values in params.items():
        if not all(is_text(value) for value in values):  # %00 decodes to a NUL
            raise Invalid(f"{name}: a value holds a NUL character", details={"parameter": name})
    return params


def flag(params: dict[str, list[str]], name: str, *, default: bool = False) -> bool:
    values = params.get(name)
    if not values:
        return default
    if len(values) > 1:
        raise Invalid(f"{name}: may be given once", details={"parameter": name})
    text = values[0].strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise Invalid(f"{name}: expected true or false", details={"parameter": name})


def text_field(body: dict[str, Any], name: str, *, max_length: int = 253) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > max_length:
        raise Invalid(
            f"{name}: a non-empty string of at most {max_length} characters is required",
            details={"parameter": name},
        )
    return value.strip()


def string_map(body: dict[str, Any], name: str) -> dict[str, str]:
    """An optional ``{name: value}`` object of strings (numbers and booleans as JSON text)."""
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid(f"{name}: expected an object of strings", details={"parameter": name})
    result: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            result[key] = "true" if item else "false"
        elif isinstance(item, int | float | str):
            result[key] = str(item)
        else:
            raise Invalid(
                f"{name}.{key}: expected a string, number or boolean",
                details={"parameter": f"{name}.{key}"},
            )
        if not key or len(key) > 253 or len(result[key]) > 16 * 1024:
            raise Invalid(f"{name}.{key}: name or value too long", details={"parameter": name})
    return result
