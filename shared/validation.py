"""How a refused field is named in ``Invalid.details.errors``, and the one ``Invalid`` that
names them. Purely computational."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from shared.errors import Invalid

SHOWN: Final = 5  # refused fields the message names; details.errors holds every one


def field_path(location: Sequence[int | str]) -> str:
    """A pydantic error location as a field path: ``steps[2].resources.limits.cpu``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "spec"


def invalid_fields(what: str, errors: Sequence[Mapping[str, str]], **details: Any) -> Invalid:
    """``Invalid`` for refused fields (each ``{"field", "message"}``): the message is ``<what>:
    <field>: <message>; ...`` naming the first few (and how many more), ``details.errors``
    every one, beside any other ``details``."""
    summary = "; ".join(f"{error['field']}: {error['message']}" for error in errors[:SHOWN])
    more = f" (and {len(errors) - SHOWN} more)" if len(errors) > SHOWN else ""
    return Invalid(f"{what}: {summary}{more}", details={**details, "errors": list(errors)})
