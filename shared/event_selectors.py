"""Where a webhook trigger finds a pipeline parameter's value in an event: our selector
language, and the Argo Events ``dataKey`` each selector becomes. Purely computational.

Argo Events hands a sensor a webhook's event as ``{"header": {...}, "body": ..., "metadata":
{...}}`` (``header`` maps each canonical header name to the list of its values) and resolves a
trigger parameter's ``dataKey`` with gjson (github.com/tidwall/gjson), a path language with
wildcards, queries (``#(...)``), modifiers (``@reverse``), pipes and multipaths. A tenant writes
a small subset whose meaning is plain (docs/pipeline-spec.md, "Triggers"):

- ``body``: the whole body, as JSON text;
- ``body.<segment>[.<segment>...]``: an object's key, or an array's index when the segment is a
  number (``body.items.0.id``); segments are letters, digits, ``_`` and ``-``, at most
  ``MAX_DEPTH`` of them;
- ``header.<Name>``: the first value of an HTTP header, the name matched case-insensitively
  (Go canonicalises names on the way in, and so does ``data_key``). ``Authorization`` is
  refused: Argo Events masks it before any sensor sees it.

Everything gjson would read as an operator (``* ? # @ | ! = < > % ( ) \\``, an empty segment)
is outside the language, so a selector means the same here, in gjson and in the simulator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

MAX_LENGTH: Final = 256
MAX_DEPTH: Final = 16
_SEGMENT: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
_HEADER: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
_MASKED_HEADERS: Final = frozenset({"Authorization"})

Source = Literal["body", "header"]


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed selector: where in the event (``body`` or ``header``) and the path there."""

    source: Source
    path: tuple[str, ...]

    @property
    def data_key(self) -> str:
        """The gjson path Argo Events resolves over the event's data."""
        if self.source == "header":
            # Each header is a list of values: the first one.
            return f"header.{self.path[0]}.0"
        return ".".join(("body", *self.path))


def canonical_header(name: str) -> str:
    """Go's ``textproto.CanonicalMIMEHeaderKey`` for a name of letters, digits and hyphens:
    ``x-request-id`` -> ``X-Request-Id``."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def parse_selector(text: str) -> Selector:
    """The selector ``text`` names; ValueError with a sentence saying what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError("a selector is body, body.<path> or header.<Name>")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"a selector has at most {MAX_LENGTH} characters")
    source, _, rest = text.partition(".")
    if source == "body":
        if text == "body":
            return Selector("body", ())
        segments = rest.split(".")
        if len(segments) > MAX_DEPTH:
            raise ValueError(f"a body path has at most {MAX_DEPTH} segments")
        for segment in segments:
            if not _SEGMENT.fullmatch(segment):
                raise ValueError(
                    f"body path segment {segment!r}: letters, digits, '_' and '-' only "
                    "(a number is an array index)"
                )
        return Selector("body", tuple(segments))
    if source == "header":
        if not _HEADER.fullmatch(rest):
            raise ValueError("header.<Name>: a header name is letters, digits and '-'")
        name = canonical_header(rest)
        if name in _MASKED_HEADERS:
            raise ValueError(f"header {name} never reaches a sensor (Argo Events masks it)")
        return Selector("header", (name,))
    raise ValueError("a selector starts with body or header (e.g. body.file.name, header.X-Id)")
