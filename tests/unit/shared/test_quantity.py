"""shared.quantity: Kubernetes quantities parsed exactly, as the API server reads them."""

from __future__ import annotations

from decimal import Context, Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import quantity
from shared.quantity import BINARY_SUFFIXES, DECIMAL_SUFFIXES, cpu_millis, memory_bytes, parse

SUFFIXES = {
    "": Decimal(1),
    **{suffix: Decimal(factor) for suffix, factor in BINARY_SUFFIXES.items()},
    **{suffix: Decimal(1).scaleb(power) for suffix, power in DECIMAL_SUFFIXES.items()},
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", "0"),
        ("2", "2"),
        ("500m", "0.5"),
        ("0.5", "0.5"),
        ("1.5", "1.5"),
        ("5.", "5"),
        (".5", "0.5"),
        ("+1", "1"),
        ("-1", "-1"),
        ("100n", "0.0000001"),
        ("250u", "0.00025"),
        ("1k", "1000"),
        ("1.5k", "1500"),
        ("1M", "1000000"),
        ("1G", "1000000000"),
        ("1T", "1e12"),
        ("1P", "1e15"),
        ("1E", "1e18"),  # a lone E is the exa suffix, not an exponent
        ("1Ki", "1024"),
        ("1Mi", "1048576"),
        ("512Mi", str(512 * 2**20)),
        ("1.5Gi", str(3 * 2**29)),
        ("1Ti", str(2**40)),
        ("1Pi", str(2**50)),
        ("1Ei", str(2**60)),
        ("1e3", "1000"),
        ("1E3", "1000"),
        ("2e+3", "2000"),
        ("25e-1", "2.5"),
        ("0.1e1", "1"),
        ("1e0", "1"),
        ("123456789012345678901234567890Ei", str(123456789012345678901234567890 * 2**60)),
    ],
)
def test_quantities_read_as_the_api_server_reads_them(text: str, value: str) -> None:
    assert parse(text) == Decimal(value)


@pytest.mark.parametrize(
    ("number", "value"),
    [(2, "2"), (0, "0"), (0.5, "0.5"), (0.1, "0.1"), (1e3, "1000"), (1e-05, "0.00001")],
)
def test_json_numbers_are_quantities(number: float, value: str) -> None:
    assert parse(number) == Decimal(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        " ",
        " 1",
        "1 ",
        "1 Gi",
        ".",
        "+",
        "-",
        "1.2.3",
        "1..2",
        "1Gb",
        "1GB",
        "1K",  # upper-case K is not a suffix
        "1ki",
        "1Zi",
        "1Z",
        "1mi",
        "1e",
        "1e+",
        "1e1.5",
        "1ee3",
        "1e3Gi",
        "1Gie3",
        "e3",
        "Gi",
        "0x10",
        "1_000",
        "\uff11",  # a full-width digit: \d would take it, the API server would not
        "٣",
        "∞",
        "NaN",
        "inf",
        "1e1001",  # beyond the exponent bound
        "1" * 65,  # beyond the length bound
        "{{inputs.parameters.cpu}}",
        True,
        False,
        None,
        float("nan"),
        float("inf"),
        -float("inf"),
        10**64,
        ["1"],
        {"cpu": "1"},
        b"1",
    ],
)
def test_anything_else_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="quantit"):
        parse(value)
    assert quantity.parse_or_none(value) is None


@pytest.mark.parametrize(
    ("value", "millis"),
    [("500m", 500), ("2", 2000), ("0.5", 500), (1, 1000), ("0.0001", 1), ("1e-9", 1), ("0", 0)],
)
def test_cpu_in_millicores_rounded_up_as_kubernetes_does(value: object, millis: int) -> None:
    assert cpu_millis(value) == millis


@pytest.mark.parametrize(
    ("value", "size"),
    [("512Mi", 512 * 2**20), ("2Gi", 2 * 2**30), ("1G", 10**9), ("100", 100), ("1e3", 1000)],
)
def test_memory_in_bytes(value: object, size: int) -> None:
    assert memory_bytes(value) == size


@pytest.mark.parametrize("value", ["-1", "-500m", "lots", "", "1Gb", None, True])
def test_amounts_are_non_negative_quantities(value: object) -> None:
    with pytest.raises(ValueError, match="CPU quantity"):
        cpu_millis(value)
    with pytest.raises(ValueError, match="memory quantity"):
        memory_bytes(value)


def test_the_largest_accepted_values_are_exact() -> None:
    assert memory_bytes("9" * 62 + "Ei") == int("9" * 62) * 2**60
    assert cpu_millis("9" * 58 + "e1000") == int("9" * 58) * 10**1003
    assert cpu_millis("1e-1000") == 1
    assert parse("0." + "0" * 60 + "1") == Decimal(1).scaleb(-61)


# --- properties ---------------------------------------------------------------------------------

_WIDE = Context(prec=200)  # the expected values, computed without the default 28-digit rounding


def _times(number: Decimal | int, factor: Decimal) -> Decimal:
    return _WIDE.multiply(Decimal(number), factor)


_decimals = st.decimals(
    min_value=Decimal("-1e30"), max_value=Decimal("1e30"), allow_nan=False, allow_infinity=False
).filter(lambda value: len(format(value, "f")) <= quantity.MAX_LENGTH - 2)


@given(st.integers(min_value=-(10**20), max_value=10**20), st.sampled_from(sorted(SUFFIXES)))
def test_an_integer_with_any_suffix_is_that_many_units(number: int, suffix: str) -> None:
    assert parse(f"{number}{suffix}") == _times(number, SUFFIXES[suffix])


@given(_decimals, st.sampled_from(sorted(SUFFIXES)))
def test_a_decimal_with_any_suffix_is_exact(number: Decimal, suffix: str) -> None:
    assert parse(f"{format(number, 'f')}{suffix}") == _times(number, SUFFIXES[suffix])


@given(_decimals)
def test_plain_and_scientific_forms_round_trip(number: Decimal) -> None:
    mantissa, exponent = f"{number:e}".split("e")
    assert parse(format(number, "f")) == number
    assert parse(f"{mantissa}e{int(exponent)}") == number


@given(st.integers(min_value=0, max_value=10**18), st.integers(min_value=-30, max_value=30))
def test_an_exponent_shifts_the_decimal_point(number: int, power: int) -> None:
    assert parse(f"{number}e{power}") == Decimal(number).scaleb(power)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
def test_a_float_is_the_number_its_shortest_text_names(number: float) -> None:
    assert parse(number) == Decimal(repr(number))
    assert float(parse(number)) == number


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(["", "m", "k", "Ki", "Mi"]))
def test_millicores_are_the_value_times_a_thousand_rounded_up(number: int, suffix: str) -> None:
    value = parse(f"{number}{suffix}")
    millis = cpu_millis(f"{number}{suffix}")
    assert millis - 1 < _times(value, Decimal(1000)) <= millis


@given(st.text(max_size=20))
def test_arbitrary_text_is_a_quantity_or_a_value_error(text: str) -> None:
    try:
        value = parse(text)
    except ValueError:
        return
    assert value.is_finite()
    assert text.strip() == text
    assert text != ""
