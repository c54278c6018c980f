"""The series names a PromQL expression reads, for holding the chart's alerts and dashboard to
what the deployables export (purely computational, no side effects).

A lexer, not a parser: enough of PromQL's grammar to tell a metric name from a function or an
aggregation (a name before ``(``, ``by`` or ``without``), a keyword, or a label name (inside
``{...}`` or the parentheses after ``by``, ``without``, ``on``, ``ignoring``, ``group_left``
and ``group_right``).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
    | (?P<range>\[[^\]]*\])
    | (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
    | (?P<number>[0-9][0-9a-zA-Z.]*)
    | (?P<open>[({])
    | (?P<close>[)}])
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE,
)
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end", "atan2"}
)
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_GRAFANA_VARIABLE = re.compile(r"\$\{?[a-zA-Z_]\w*(?::\w+)?\}?")


def series_names(expression: str) -> frozenset[str]:
    """Every metric name ``expression`` selects (``__name__`` matchers are not used here)."""
    tokens = [
        (match.lastgroup, match.group())
        for match in _TOKEN.finditer(_GRAFANA_VARIABLE.sub("x", expression))
        if match.lastgroup != "space"
    ]
    names: set[str] = set()
    depth_braces = 0
    label_list_depth: int | None = None  # the parenthesis depth of a by (...) list
    depth = 0
    for index, (kind, text) in enumerate(tokens):
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "open":
            depth += 1
            depth_braces += text == "{"
        elif kind == "close":
            depth -= 1
            depth_braces -= text == "}"
            if label_list_depth is not None and depth < label_list_depth:
                label_list_depth = None
        elif kind == "name" and not depth_braces and label_list_depth is None:
            if text in _LABEL_LISTS:
                label_list_depth = depth + 1
            elif text.lower() not in _KEYWORDS and following not in ("(", "by", "without"):
                names.add(text)
    return frozenset(names)
