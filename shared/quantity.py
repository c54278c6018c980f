"""Kubernetes resource quantities ("500m", "2", "1.5Gi", "1e3"), the one parser of the project.

Purely computational, no side effects. The grammar is apimachinery's ``resource.Quantity``::

    quantity  ::= [+-] number [suffix]
    number    ::= digits | digits "." [digits] | "." digits
    suffix    ::= binary | decimal | exponent
    binary    ::= Ki | Mi | Gi | Ti | Pi | Ei                  (powers of 1024)
    decimal   ::= n | u | m | k | M | G | T | P | E            (powers of 1000)
    exponent  ::= ("e" | "E") [+-] digits                      ("1e3" is 1000; "1E" is an exa)

Values are exact (``Decimal``), never floats, so that a request can be compared with a limit
without rounding deciding the answer. Like the API server, nothing else is accepted: no
whitespace, no ``KB``, no upper-case ``K``. A JSON number (a YAML ``cpu: 2`` or ``cpu: 0.5``)
is a quantity too, as the API server reads it; a boolean is not.

Hostile input stays cheap: the text is at most ``MAX_LENGTH`` characters and the exponent at
most ``MAX_EXPONENT`` in size, so no value needs more than a few hundred digits.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Context, Decimal, InvalidOperation
from typing import Final

MAX_LENGTH: Final = 64
MAX_EXPONENT: Final = 1000
_QUANTITY: Final = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?",
    re.ASCII,
)
BINARY_SUFFIXES: Final = {
    f"{prefix}i": 1024 ** (index + 1) for index, prefix in enumerate("KMGTPE")
}
DECIMAL_SUFFIXES: Final = {
    "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
# No value has more than MAX_LENGTH digits; times 2**60 (19 digits) and 1000 it still fits in
# 128, so nothing is ever rounded (the default context keeps 28 digits).
_EXACT: Final = Context(prec=128, Emax=4 * MAX_EXPONENT, Emin=-4 * MAX_EXPONENT)


def parse(value: object) -> Decimal:
    """The exact value of a quantity, in its base unit (cores, bytes, devices); ValueError when
    ``value`` is not one."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if abs(value) >= 10**MAX_LENGTH:
            raise ValueError("the number is too large for a quantity")
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a quantity")
        value = repr(value)  # the shortest text that reads back as this float: 0.1 is "0.1"
    if not isinstance(value, str):
        raise ValueError(f"a quantity is a string or a number, not {type(value).__name__}")
    if len(value) > MAX_LENGTH:
        raise ValueError(f"a quantity has at most {MAX_LENGTH} characters")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a quantity such as 500m, 2, 512Mi or 1e3")
    number = Decimal(match["number"])
    exponent, suffix = match["exponent"], match["suffix"]
    if exponent is not None:
        power = int(exponent)
        if abs(power) > MAX_EXPONENT:
            raise ValueError(f"{value!r}: a quantity's exponent is at most ±{MAX_EXPONENT}")
        return _EXACT.scaleb(number, power)
    if suffix in BINARY_SUFFIXES:
        return _EXACT.multiply(number, Decimal(BINARY_SUFFIXES[suffix]))
    if suffix is not None:
        return _EXACT.scaleb(number, DECIMAL_SUFFIXES[suffix])
    return number


def parse_or_none(value: object) -> Decimal | None:
    """``parse``, or None for anything that is not a quantity."""
    try:
        return parse(value)
    except (ValueError, InvalidOperation):
        return None


def _ceiling(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING, context=_EXACT))


def _amount(value: object, what: str, example: str) -> Decimal:
    amount = parse_or_none(value)
    if amount is None or amount < 0:
        raise ValueError(f"{value!r} is not a {what} quantity such as {example}")
    return amount


def cpu_millis(value: object) -> int:
    """A CPU amount in millicores, rounded up as the API server rounds it ("0.0001" is 1m);
    ValueError for anything but a non-negative quantity."""
    return _ceiling(_EXACT.scaleb(_amount(value, "CPU", "500m or 2"), 3))


def memory_bytes(value: object) -> int:
    """A memory amount in bytes, rounded up; ValueError for anything but a non-negative
    quantity."""
    return _ceiling(_amount(value, "memory", "512Mi or 2Gi"))
