"""The two path languages Argo Events' sensors use on JSON, as far as the simulator needs them.
Purely computational.

- ``get`` reads a ``dataKey`` the way gjson (github.com/tidwall/gjson) does for plain paths:
  dot-separated keys, a number indexing an array, ``\\.`` escaping a dot inside a key. Every
  other gjson construct (wildcards, ``#`` queries, ``@`` modifiers, ``|`` pipes, multipaths) is
  refused with ValueError rather than answered wrongly.
- ``value_text`` is what Argo Events makes of the result (``getValueByKey`` in
  pkg/sensors/triggers/params.go): a string as it is, a number, boolean or null as its JSON
  text, an object or array as its JSON.
- ``set_path`` writes a ``dest`` the way sjson (github.com/tidwall/sjson) does for plain paths:
  missing objects are created, a number indexes an array (appending at its end).
"""

from __future__ import annotations

import json
import re
from typing import Any

_OPERATORS = re.compile(r"[*?#@|!=<>%()\[\]{}]")


def _segments(path: str) -> list[str]:
    if not path or path.startswith("..") or _OPERATORS.search(path.replace("\\.", "")):
        raise ValueError(f"not a plain gjson path: {path!r}")
    segments, current, escaped = [], "", False
    for char in path:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ".":
            segments.append(current)
            current = ""
        else:
            current += char
    segments.append(current)
    if any(segment == "" for segment in segments):
        raise ValueError(f"not a plain gjson path: {path!r}")
    return segments


def get(document: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at ``path`` in ``document``."""
    node = document
    for segment in _segments(path):
        if isinstance(node, dict) and segment in node:
            node = node[segment]
        elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
            node = node[int(segment)]
        else:
            return False, None
    return True, node


def value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def set_path(document: dict[str, Any], path: str, value: str) -> None:
    """Write ``value`` at ``path`` in ``document`` (in place)."""
    segments = _segments(path)
    node: Any = document
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        following: Any = value if last else ({} if not segments[index + 1].isdigit() else [])
        if isinstance(node, list):
            if not segment.isdigit():
                raise ValueError(f"{path!r}: {segment!r} is not an index of a list")
            position = int(segment)
            while len(node) < position:
                node.append(None)
            if position == len(node):
                node.append(following)
            elif last or not isinstance(node[position], dict | list):
                node[position] = following
            node = node[position]
        elif isinstance(node, dict):
            if last or not isinstance(node.get(segment), dict | list):
                node[segment] = following
            node = node[segment]
        else:
            raise ValueError(f"{path!r}: cannot descend into {type(node).__name__}")
