"""How a refused field is named in ``Invalid.details.errors``. Purely computational."""

from __future__ import annotations

from collections.abc import Sequence


def field_path(location: Sequence[int | str]) -> str:
    """A pydantic error location as a field path: ``steps[2].resources.limits.cpu``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "spec"
