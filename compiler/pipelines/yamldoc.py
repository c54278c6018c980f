"""Parse one tenant-authored YAML document into plain JSON-shaped data, with hard limits.

Purely computational, no side effects. Tenant YAML is hostile input, and YAML offers more than a
Kubernetes document needs; everything beyond JSON's data model is refused rather than
interpreted, so that the document the allowlist judges is exactly the one that gets applied:

- size, nesting depth and node count are capped, so a crafted document cannot exhaust memory or
  the stack (``MAX_BYTES``, ``MAX_DEPTH``, ``MAX_NODES``);
- exactly one document: a second one would be silently ignored by some tools and not others;
- no anchors or aliases: aliases are how the "billion laughs" expands a few bytes into gigabytes,
  and a shared node is a value a reviewer reads in one place and Argo applies in another; for
  the same reason the ``<<`` merge key is refused;
- no tags beyond the JSON core (``!!str``, ``!!int``, ``!!float``, ``!!bool``, ``!!null``,
  ``!!seq``, ``!!map``): no ``!!python/...``, ``!!binary``, ``!!set`` or custom tags;
- duplicate keys are refused: YAML calls them an error, PyYAML silently keeps the last, and an
  attacker could show a reviewer one value of a field while Argo reads another;
- keys must be strings (``yes:``, ``1:`` or ``null:`` are not Kubernetes field names);
- scalars resolve as PyYAML's safe loader resolves them (YAML 1.1: ``yes`` is true, ``012`` is
  ten), except that timestamps stay strings as written (``2024-01-01`` is a parameter value, not
  a date: JSON has no dates), ``=`` is the string it looks like, and values JSON cannot hold
  (``.inf``, ``.nan``, integers beyond 64 bits) are refused.

The document is built straight from the parser's event stream (libyaml's C parser when PyYAML
was built with it) in one pass that enforces every limit as it goes: no intermediate node graph
is built, and a limit is hit before the memory behind it is spent.

Errors raise ``shared.errors.Invalid`` (400) whose ``details.errors`` name each problem by its
document path (``spec.templates[0].container``) with the line and column in the message.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import yaml

from compiler.pipelines.podrules import Walk
from shared.errors import Invalid
from shared.validation import invalid_fields

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_ERRORS", "MAX_NODES", "parse_template_yaml"]

MAX_BYTES: Final = 512 * 1024
MAX_DEPTH: Final = 64
MAX_NODES: Final = 100_000
# Errors that do not stop parsing (duplicate keys, refused tags...) are collected up to this
# many, so one save shows the author most of what is wrong without an unbounded report.
MAX_ERRORS: Final = 50

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

_STR: Final = "tag:yaml.org,2002:str"
_INT: Final = "tag:yaml.org,2002:int"
_FLOAT: Final = "tag:yaml.org,2002:float"
_BOOL: Final = "tag:yaml.org,2002:bool"
_NULL: Final = "tag:yaml.org,2002:null"
_MERGE: Final = "tag:yaml.org,2002:merge"
_SEQ: Final = "tag:yaml.org,2002:seq"
_MAP: Final = "tag:yaml.org,2002:map"
_SCALAR_TAGS: Final = frozenset({_STR, _INT, _FLOAT, _BOOL, _NULL})

# Prefer libyaml's parser (C): the pure-Python one is several times slower on large documents.
_Parser: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _implicit_resolvers() -> dict[str, list[tuple[str, re.Pattern[str]]]]:
    """The safe loader's implicit resolvers (first character -> (tag, pattern)) for the types
    JSON has, plus the merge key (to refuse it). Timestamps, YAML's ``=`` value key and the
    ``!``/``&``/``*`` scalars are left out: they stay the strings they are written as."""
    kept = {_INT, _FLOAT, _BOOL, _NULL, _MERGE}
    resolvers = yaml.SafeLoader.yaml_implicit_resolvers
    if resolvers.get(None):
        raise ImportError("yaml.SafeLoader has wildcard implicit resolvers; yamldoc needs none")
    table: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
    for first, entries in resolvers.items():
        chosen = [(tag, pattern) for tag, pattern in entries if tag in kept]
        if chosen and first is not None:
            table[first] = chosen
    return table


_RESOLVERS: Final = _implicit_resolvers()
# PyYAML's own scalar constructors, so that ints, floats and booleans read exactly as
# yaml.safe_load reads them (underscores, 0x/0o/0b, sexagesimal, YAML 1.1 booleans).
_CONSTRUCTOR: Final = yaml.SafeLoader("")
_CONSTRUCTORS: Final[dict[str, Any]] = {
    _INT: _CONSTRUCTOR.construct_yaml_int,
    _FLOAT: _CONSTRUCTOR.construct_yaml_float,
    _BOOL: _CONSTRUCTOR.construct_yaml_bool,
    _NULL: _CONSTRUCTOR.construct_yaml_null,
}


class _Refused(Exception):
    """A problem that stops parsing; its message is already the user-facing sentence."""


class _Frame:
    """A collection being built: a mapping waiting for a key or a value, or a sequence."""

    __slots__ = ("container", "is_mapping", "key", "parent", "slot")

    def __init__(
        self, container: Any, is_mapping: bool, parent: _Frame | None, slot: object
    ) -> None:
        self.container = container
        self.is_mapping = is_mapping
        self.parent = parent
        self.slot = slot  # its key or index in the parent (None: the root), for paths
        # A mapping alternates: ``_NO_KEY`` while the next scalar is a key, else the key read.
        self.key: object = _NO_KEY


class _Sentinel:
    """Markers the builder uses while reading; never part of a returned document."""


_NO_KEY: Final = _Sentinel()
_REFUSED: Final = _Sentinel()  # a refused key or value: parsing goes on to report the rest
_MERGE_KEY: Final = _Sentinel()  # a plain ``<<``: refused as a key, the string "<<" as a value


def parse_template_yaml(text: str) -> dict[str, Any]:
    """The one YAML mapping in ``text`` as JSON-shaped data; ``Invalid`` names every problem."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate: not text any parser can read
        raise _invalid(
            [{"field": "$", "message": f"character {exc.start + 1} is not valid Unicode"}]
        ) from exc
    if size > MAX_BYTES:
        raise _invalid(
            [{"field": "$", "message": f"the document is {size} bytes; at most {MAX_BYTES}"}]
        )
    builder = _Builder()
    parser = None
    try:
        parser = _Parser(text)  # the pure-Python reader checks the characters here
        builder.read(parser.get_event)
    except _Refused as exc:
        builder.stop(str(exc))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        builder.stop(f"{_where(mark)}{exc.problem or exc.context or 'malformed YAML'}")
    except yaml.reader.ReaderError as exc:
        builder.stop(
            f"character {exc.position + 1}: #x{exc.character:04x} is not accepted ({exc.reason})"
        )
    finally:
        if parser is not None:
            parser.dispose()
    if builder.errors:
        raise _invalid(builder.errors)
    root = builder.root
    if type(root) is not dict:
        found = "an empty document" if root is None else _article(_kind(root))
        raise _invalid(
            [{"field": "$", "message": f"the document must be a mapping (an object), not {found}"}]
        )
    return root


class _Builder:
    """One pass over the event stream, building the document and enforcing every limit.

    ``read`` is the hot loop (a 200 KB template is some 25 000 events): the common cases, a
    quoted or unresolvable plain scalar and a collection without anchor or tag, are handled
    inline; anything unusual goes through a method, and paths are computed only on error."""

    def __init__(self) -> None:
        self.errors: list[dict[str, str]] = []
        self.root: object = None
        self.top: _Frame | None = None

    def read(self, get_event: Any) -> None:
        scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
        mapping_start, sequence_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
        mapping_end, sequence_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
        document_start, stream_end = yaml.DocumentStartEvent, yaml.StreamEndEvent
        resolvable = _RESOLVERS.keys()
        # Plain scalars that may not be strings repeat a lot ("true", "1", "250m"): resolve each
        # distinct one once. Only untagged, unanchored plain scalars go through it.
        resolved: dict[str, object] = {}
        nodes = depth = documents = 0
        top = self.top  # kept equal to self.top; a local is cheaper in this loop
        while True:
            event = get_event()
            kind = type(event)
            if kind is scalar_event:
                nodes += 1
                if nodes > MAX_NODES:
                    raise _Refused(f"{_where(event.start_mark)}more than {MAX_NODES} values")
                if event.anchor is not None:
                    self.anchor(event)
                value = event.value
                if event.tag is not None:
                    value = self.scalar(event)
                elif event.implicit[0] and (not value or value[0] in resolvable):
                    if value in resolved:
                        value = resolved[value]
                    else:
                        text = value
                        value = self.scalar(event)
                        if value is not _REFUSED:
                            resolved[text] = value
                if top is None:
                    self.root = value
                elif top.is_mapping:
                    key = top.key
                    if key is _NO_KEY:
                        if type(value) is str and value not in top.container:
                            top.key = value
                        else:
                            self.bad_key(top, value, event)
                    else:
                        if key is not _REFUSED:
                            top.container[key] = "<<" if value is _MERGE_KEY else value
                        top.key = _NO_KEY
                else:
                    top.container.append("<<" if value is _MERGE_KEY else value)
            elif kind is mapping_end or kind is sequence_end:
                assert top is not None  # the parser balances start and end events
                self.top = top = top.parent
                depth -= 1
            elif kind is mapping_start or kind is sequence_start:
                nodes += 1
                if nodes > MAX_NODES:
                    raise _Refused(f"{_where(event.start_mark)}more than {MAX_NODES} values")
                if depth >= MAX_DEPTH:
                    raise _Refused(f"{_where(event.start_mark)}nested more than {MAX_DEPTH} deep")
                if event.anchor is not None:
                    self.anchor(event)
                if event.tag is not None:
                    self.collection_tag(event, _MAP if kind is mapping_start else _SEQ)
                is_mapping = kind is mapping_start
                container: Any = {} if is_mapping else []
                self.top = top = _Frame(container, is_mapping, top, self.place(container, event))
                depth += 1
            elif kind is alias_event:
                nodes += 1
                self.error(f"{_where(event.start_mark)}aliases (*{event.anchor}) are not accepted")
                self.place(_REFUSED, event)
            elif kind is document_start:
                documents += 1
                if documents > 1:
                    raise _Refused(
                        f"{_where(event.start_mark)}only one YAML document is accepted, "
                        "found a second"
                    )
            elif kind is stream_end or event is None:
                return
            # StreamStart and DocumentEnd carry nothing to check.

    # --- the uncommon cases ----------------------------------------------------------------------
    def error(self, message: str) -> None:
        """Record a problem at the current path; parsing goes on to find the others."""
        if len(self.errors) >= MAX_ERRORS:
            raise _Refused(f"more than {MAX_ERRORS} problems; the rest are not reported")
        self.errors.append({"field": self.path(), "message": message})

    def stop(self, message: str) -> None:
        """Record the problem that ended parsing (always reported, whatever came before)."""
        self.errors.append({"field": self.path(), "message": message})

    def path(self) -> str:
        """The document path of the value being read (``spec.templates[0].name``)."""
        frames: list[_Frame] = []
        frame = self.top
        while frame is not None:
            frames.append(frame)
            frame = frame.parent
        path = ""
        for frame in reversed(frames):
            path = _step(path, frame.slot)
        top = self.top
        if top is not None:
            path = _step(path, top.key if top.is_mapping else len(top.container))
        return path or "$"

    def anchor(self, event: Any) -> None:
        self.error(f"{_where(event.start_mark)}anchors (&{event.anchor}) are not accepted")

    def collection_tag(self, event: Any, expected: str) -> None:
        if event.tag not in ("!", expected):
            self.error(f"{_where(event.start_mark)}the tag {event.tag} is not accepted")

    def scalar(self, event: Any) -> object:
        """A tagged scalar, or a plain one that may be something other than a string."""
        value: str = event.value
        tag: str | None = event.tag
        if tag is None or tag == "!":
            if not event.implicit[0]:
                return value  # explicitly non-specific (``! 12``): a string
            tag = _resolve(value)
        elif tag not in _SCALAR_TAGS:
            self.error(f"{_where(event.start_mark)}the tag {tag} is not accepted")
            return _REFUSED
        if tag == _STR:
            return value
        if tag == _MERGE:
            return _MERGE_KEY
        try:
            result = _CONSTRUCTORS[tag](yaml.ScalarNode(tag, value))
        except (ValueError, KeyError):
            self.error(f"{_where(event.start_mark)}{value!r} is not a valid {tag}")
            return _REFUSED
        if type(result) is float and not math.isfinite(result):
            self.error(f"{_where(event.start_mark)}{value} is not a JSON number")
            return _REFUSED
        if type(result) is int and not _INT64_MIN <= result <= _INT64_MAX:
            self.error(f"{_where(event.start_mark)}{value} does not fit in 64 bits")
            return _REFUSED
        return result

    def place(self, value: object, event: Any) -> object:
        """Put a new collection or a refused value where it belongs; its slot, for paths."""
        top = self.top
        if top is None:
            self.root = value
            return None
        if not top.is_mapping:
            top.container.append(value)  # refused values keep later indexes right
            return len(top.container) - 1
        key = top.key
        if key is _NO_KEY:
            self.bad_key(top, value, event)
            return _REFUSED
        if key is not _REFUSED:
            top.container[key] = value
        top.key = _NO_KEY
        return key

    def bad_key(self, frame: _Frame, value: object, event: Any) -> None:
        """Refuse a key that is not a new string: reported, and its value read but not kept."""
        where = _where(event.start_mark)
        if value is _MERGE_KEY:
            self.error(f"{where}the merge key << is not accepted")
        elif type(value) is dict or type(value) is list:
            self.error(f"{where}keys must be strings, not a {_kind(value)}")
        elif type(value) is str:
            frame.key = value  # so that the path names the duplicate
            self.error(f"{where}duplicate key {value!r}")
        elif value is not _REFUSED:
            self.error(f"{where}keys must be strings, not {_kind(value)} {event.value!r}")
        frame.key = _REFUSED


def _resolve(value: str) -> str:
    """The tag of a plain scalar, as PyYAML's safe resolver decides it (timestamps aside)."""
    for tag, pattern in _RESOLVERS.get(value[0] if value else "", ()):
        if pattern.match(value):
            return tag
    return _STR


def _step(path: str, slot: object) -> str:
    if isinstance(slot, int):
        return f"{path}[{slot}]"
    if isinstance(slot, str):
        return Walk.join(path, slot)
    return path  # the root, or a key that was refused


def _where(mark: Any) -> str:
    if mark is None:
        return ""
    return f"line {mark.line + 1}, column {mark.column + 1}: "


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "sequence"
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
        type(value), type(value).__name__
    )


def _article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _invalid(errors: list[dict[str, str]]) -> Invalid:
    return invalid_fields("the YAML document is invalid", errors)
