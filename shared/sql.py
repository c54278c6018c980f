"""Pieces of SQL text every repository builds the same way. Purely computational."""

from __future__ import annotations


def escape_like(text: str) -> str:
    """``text`` as a literal inside a LIKE or ILIKE pattern (backslash, PostgreSQL's default
    escape character, escapes ``%``, ``_`` and itself)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def contains_pattern(text: str) -> str:
    """The (I)LIKE pattern matching any value that contains ``text`` literally."""
    return f"%{escape_like(text)}%"
