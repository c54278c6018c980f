"""Defensive readers of Kubernetes JSON, shared by ``watcher.normalise`` and ``watcher.graph``.

Purely computational, no side effects: no I/O, no clock, no logging. A field of the wrong type
reads as absent (``as_mapping``, ``as_sequence``: ``shared.argo_status``'s, the one reader of
Argo's workflows, re-exported here; ``text``); text is made storable in PostgreSQL
(``clean``: no NUL characters, no lone surrogates) and bounded (``trim``); RFC 3339 timestamps
are read (``parse_timestamp``) and written back in UTC (``timestamp_text``). These run on every
watch event, many times per node: the common case, a clean ASCII string, costs no extra call.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Final

from shared.argo_status import ARRAY_TYPES, EMPTY, as_mapping, as_sequence, is_mapping

__all__ = [
    "ARRAY_TYPES",
    "EMPTY",
    "TRUNCATION_MARKER",
    "as_mapping",
    "as_sequence",
    "clean",
    "is_mapping",
    "parse_timestamp",
    "scalar_text",
    "text",
    "timestamp_text",
    "trim",
]

TRUNCATION_MARKER: Final = "…[truncated]"
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})?", re.ASCII
)
_WHOLE_SECONDS_UTC: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", re.ASCII)


def parse_timestamp(value: object) -> datetime | None:
    """An RFC 3339 timestamp ('Z' or an offset) as an aware UTC datetime; anything else None."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    iso = value.replace("z", "Z").replace("t", "T")
    if iso.endswith("Z"):
        iso = iso[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        # Kubernetes always writes an offset; a bare time is read as UTC rather than dropped.
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before the first datetime in UTC
        return None


def timestamp_text(value: object) -> str | None:
    """An RFC 3339 timestamp written back in UTC with 'Z'; anything else None."""
    if type(value) is str and _WHOLE_SECONDS_UTC.fullmatch(value) and value[11:13] < "24":
        # The form Kubernetes writes is already the one we write: keep it once it is known to
        # be a real date and time, sparing a format (datetime.isoformat is slow). An hour of 24
        # takes the long way, in case a Python reads it as the next day's midnight.
        try:
            datetime.fromisoformat(value)
        except ValueError:
            return None
        return value
    parsed = parse_timestamp(value)
    return parsed.isoformat().replace("+00:00", "Z") if parsed is not None else None


def text(value: object) -> str | None:
    """A non-empty string made storable, else None."""
    if type(value) is str and value.isascii() and "\x00" not in value:
        return value or None  # the common case, with nothing to clean
    return (clean(value) or None) if isinstance(value, str) else None


def clean(value: str) -> str:
    """value storable in PostgreSQL: no NUL characters, no lone surrogates."""
    if value.isascii():
        return value.replace("\x00", "") if "\x00" in value else value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", errors="replace").decode("utf-8")
    return value.replace("\x00", "")


def scalar_text(value: object) -> str | None:
    """Argo's AnyString: a string, or a number or boolean written without quotes."""
    if type(value) is str and value.isascii() and "\x00" not in value:
        return value  # the common case, with nothing to clean
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        try:
            return json.dumps(value)
        except ValueError:  # an int beyond Python's conversion limit
            return None
    return None


def trim(value: str, limit: int) -> str:
    """value cut to at most limit UTF-8 bytes, marked when cut."""
    if len(value) * 4 <= limit:
        return value
    encoded = value.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return value
    kept = encoded[: max(0, limit - len(TRUNCATION_MARKER.encode()))]
    return kept.decode("utf-8", errors="ignore") + TRUNCATION_MARKER
