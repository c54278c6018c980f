"""Stored object versions and their JSON bytes, shared by the store and the server."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from sim.kube.types import ApiError, JsonObject

_REUSED_PART_BYTES = 1024

_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes, as the API server sends them."""
    return _ENCODER.encode(obj).encode()


def owned(value: Any) -> Any:
    """A private deep copy of caller data, refusing what JSON cannot carry."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ApiError(400, "BadRequest", f"object is not valid JSON: {exc}") from exc


class ParsedPool:
    """Bounds how many stored versions keep their parsed dict (several times the size of
    the JSON); the others keep bytes and metadata only and parse again when needed."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._parsed: OrderedDict[int, Stored] = OrderedDict()

    def touch(self, stored: Stored) -> None:
        key = id(stored)
        self._parsed[key] = stored
        self._parsed.move_to_end(key)
        while len(self._parsed) > self._size:
            self._parsed.popitem(last=False)[1].release()


class Stored:
    """One version of an object: its JSON bytes, its metadata and, while it is in the pool,
    the parsed (never mutated) dict.

    Large top-level values (a Workflow's spec) keep their serialised form, so the next version
    reuses it when a patch left that value untouched (the same object, by identity).
    """

    __slots__ = ("_obj", "_parts", "_pool", "data", "meta")
    _parts: dict[str, bytes]

    def __init__(self, obj: JsonObject, pool: ParsedPool, previous: Stored | None = None) -> None:
        self._obj: JsonObject | None = obj
        self._pool = pool
        self.meta: JsonObject = obj["metadata"]
        kept: dict[str, bytes] = {}
        chunks: list[bytes] = []
        reusable: dict[str, bytes] = previous._parts if previous is not None else {}
        before = (previous._obj if previous is not None else None) or {}
        for key, value in obj.items():
            chunk = reusable.get(key)
            if chunk is None or before.get(key) is not value:
                chunk = (_ENCODER.encode(key) + ":" + _ENCODER.encode(value)).encode()
            if len(chunk) >= _REUSED_PART_BYTES:
                kept[key] = chunk
            chunks.append(chunk)
        self._parts = kept
        self.data = b"{" + b",".join(chunks) + b"}"
        pool.touch(self)

    @property
    def obj(self) -> JsonObject:
        """The object as a dict; callers must not mutate it."""
        if self._obj is None:
            self._obj = json.loads(self.data)
            self._pool.touch(self)
        return self._obj

    def release(self) -> None:
        self._obj = None
        self._parts = {}

    @property
    def resource_version(self) -> str:
        return str(self.meta["resourceVersion"])

    def copy(self) -> JsonObject:
        result: JsonObject = json.loads(self.data)
        return result


def with_status_of(current: JsonObject, changed: JsonObject) -> JsonObject:
    """``current`` with the status of ``changed`` (a write to the status subresource changes
    nothing else)."""
    obj = dict(current)
    if "status" in changed:
        obj["status"] = changed["status"]
    else:
        obj.pop("status", None)
    return obj
