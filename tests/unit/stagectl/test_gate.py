"""stagectl.gate: the gate's verdict never raises, is deterministic, and decides thresholds and
the comparison with production exactly, boundaries included."""

from __future__ import annotations

import json
import math
import operator
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stagectl.gate import Verdict, evaluate, metrics_of

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}


def gate(
    *thresholds: tuple[str, str, float], compare: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "thresholds": [{"metric": m, "op": op, "value": v} for m, op, v in thresholds],
        "compare_to_production": compare,
    }


AUC = gate(("auc", ">=", 0.8))

# --- any JSON -------------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["auc", "loss", "metrics", "x", ""]), children, max_size=4
        )
    ),
    max_leaves=20,
)
metric_names = st.sampled_from(["auc", "loss", "metrics", "x"])
finite = st.one_of(st.integers(-(10**30), 10**30), st.floats(allow_nan=False, allow_infinity=False))
gates = st.builds(
    lambda thresholds, compare: {"thresholds": thresholds, "compare_to_production": compare},
    st.lists(
        st.fixed_dictionaries(
            {"metric": metric_names, "op": st.sampled_from(list(OPS)), "value": finite}
        ),
        min_size=1,
        max_size=5,
    ),
    st.none()
    | st.fixed_dictionaries(
        {
            "metric": metric_names,
            "max_regression": st.floats(0, 1e6),
            "higher_is_better": st.booleans(),
        }
    ),
)


@settings(max_examples=500)
@given(json_values, gates, st.none() | json_values)
@example({"auc": float("nan")}, AUC, None)
@example({"auc": float("inf")}, AUC, {"auc": float("-inf")})
@example({"metrics": "auc"}, AUC, None)
@example({"auc": 10**4000}, gate(("auc", "<", 1e308)), {"auc": -(10**4000)})
def test_any_json_scorecard_gives_a_deterministic_verdict_and_never_raises(
    scorecard: object, config: dict[str, Any], production: object
) -> None:
    verdict = evaluate(scorecard, config, production)
    assert isinstance(verdict, Verdict)
    assert all(isinstance(reason, str) and reason for reason in verdict.reasons)
    assert evaluate(scorecard, config, production) == verdict
    outputs = verdict.outputs()
    assert outputs["verdict"] == ("passed" if verdict.passed else "failed")
    assert json.loads(outputs["reasons"]) == verdict.reasons
    if not verdict.passed:
        assert verdict.reasons  # a failure always says why


@settings(max_examples=300)
@given(json_values, json_values)
def test_any_json_gate_configuration_never_raises(gate_config: object, scorecard: object) -> None:
    verdict = evaluate(scorecard, gate_config, None)
    assert verdict.passed in (True, False)


@settings(max_examples=200)
@given(st.text(max_size=40))
def test_any_text_parsed_as_json_never_raises(text: str) -> None:
    try:
        scorecard = json.loads(text)
    except ValueError:
        return
    evaluate(scorecard, AUC, scorecard)


# --- thresholds, exactly ----------------------------------------------------------------------
@settings(max_examples=1000)
@given(finite, st.sampled_from(list(OPS)), finite)
def test_a_threshold_holds_exactly_when_its_comparison_holds_on_the_exact_values(
    value: float, op: str, threshold: float
) -> None:
    verdict = evaluate({"m": value}, gate(("m", op, threshold)), None)
    # The gate stores the threshold as a float, as JSON parsing gave it.
    assert verdict.passed is OPS[op](Fraction(value), Fraction(float(threshold)))
    assert verdict.passed is (verdict.reasons == [])


@settings(max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
def test_at_the_boundary_and_one_float_either_side(threshold: float) -> None:
    below, above = math.nextafter(threshold, -math.inf), math.nextafter(threshold, math.inf)
    expected = {
        ">=": (False, True, True),
        ">": (False, False, True),
        "<=": (True, True, False),
        "<": (True, False, False),
        "==": (False, True, False),
    }
    for op, outcomes in expected.items():
        got = tuple(
            evaluate({"m": value}, gate(("m", op, threshold)), None).passed
            for value in (below, threshold, above)
        )
        assert got == outcomes, op


def test_an_integer_and_a_float_of_the_same_value_are_equal_and_huge_ones_compare_exactly() -> None:
    assert evaluate({"m": 1}, gate(("m", "==", 1.0)), None).passed
    # 2**53 + 1 is not a float: it is above the float 2**53, exactly.
    assert evaluate({"m": 2**53 + 1}, gate(("m", ">", float(2**53))), None).passed
    assert not evaluate({"m": 2**53 + 1}, gate(("m", "==", float(2**53))), None).passed


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        (None, "null"),
        ("0.9", "a string"),
        (True, "a boolean"),
        (False, "a boolean"),
        ([0.9], "an array"),
        ({"v": 0.9}, "an object"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
    ],
)
def test_a_metric_that_is_not_a_finite_number_fails_naming_it(value: object, wrong: str) -> None:
    verdict = evaluate({"auc": value}, AUC, None)
    assert not verdict.passed
    assert verdict.reasons[0].startswith("auc ")
    assert wrong in verdict.reasons[0]


def test_a_missing_metric_fails_naming_it_and_every_threshold_is_reported() -> None:
    verdict = evaluate({"auc": 0.5}, gate(("auc", ">=", 0.8), ("f1", ">", 0.1)), None)
    assert not verdict.passed
    assert verdict.reasons == ["auc is 0.5, not >= 0.8", "f1 is missing in the scorecard"]


@pytest.mark.parametrize("scorecard", [[], "auc", 0.9, None, True])
def test_a_scorecard_that_is_not_an_object_fails(scorecard: object) -> None:
    verdict = evaluate(scorecard, AUC, None)
    assert not verdict.passed
    assert "not a JSON object" in verdict.reasons[0]


def test_the_metrics_member_holds_the_metrics_when_it_is_an_object() -> None:
    assert metrics_of({"metrics": {"auc": 1}, "dataset": "x"}) == {"auc": 1}
    assert metrics_of({"metrics": 3, "auc": 1}) == {"metrics": 3, "auc": 1}
    assert evaluate({"metrics": {"auc": 0.9}, "model": "churn"}, AUC, None).passed
    assert not evaluate({"metrics": {"loss": 0.9}, "auc": 0.9}, AUC, None).passed


def test_an_invalid_gate_configuration_fails_rather_than_raising() -> None:
    verdict = evaluate({"auc": 1}, {"thresholds": []}, None)
    assert not verdict.passed
    assert "configuration is invalid" in verdict.reasons[0]


# --- the comparison with production ----------------------------------------------------------
def compared(higher_is_better: bool = True, max_regression: float = 0.05) -> dict[str, Any]:
    return gate(
        ("ok", "==", 1),
        compare={
            "metric": "auc",
            "max_regression": max_regression,
            "higher_is_better": higher_is_better,
        },
    )


def test_without_a_production_version_the_comparison_is_skipped_and_noted() -> None:
    verdict = evaluate({"auc": 0.5, "ok": 1}, compared(), None)
    assert verdict.passed
    assert verdict.reasons == ["no version is in production: the comparison of auc was skipped"]


def test_a_production_scorecard_without_the_metric_skips_the_comparison_and_notes_it() -> None:
    verdict = evaluate({"auc": 0.5, "ok": 1}, compared(), {"loss": 1})
    assert verdict.passed
    assert "production version's scorecard" in verdict.reasons[0]
    assert evaluate({"auc": 0.5, "ok": 1}, compared(), "junk").passed


def test_the_new_scorecard_without_the_compared_metric_fails() -> None:
    config = gate(("loss", "<", 1), compare={"metric": "auc", "max_regression": 0})
    verdict = evaluate({"loss": 0.1}, config, {"auc": 0.9})
    assert not verdict.passed
    assert verdict.reasons[0].startswith("auc is missing")


@settings(max_examples=1000)
@given(finite, finite, st.floats(0, 1e300), st.booleans())
@example(0.7, 0.75, 0.05, True)  # exactly the allowed regression, as the binary values give it
@example(0.3, 0.1, 0.2, False)
def test_a_regression_fails_exactly_when_it_exceeds_the_allowed_one(
    new: float, old: float, allowed: float, higher_is_better: bool
) -> None:
    verdict = evaluate(
        {"auc": new, "ok": 1}, compared(higher_is_better, allowed), {"metrics": {"auc": old}}
    )
    regression = Fraction(old) - Fraction(new)
    if not higher_is_better:
        regression = -regression
    assert verdict.passed is (regression <= Fraction(allowed))
    if not verdict.passed:
        assert verdict.reasons[0].startswith("auc regressed by ")


def test_the_boundary_of_the_allowed_regression_passes() -> None:
    def passed(new: float, old: float, higher_is_better: bool, allowed: float) -> bool:
        config = compared(higher_is_better, allowed)
        return evaluate({"auc": new, "ok": 1}, config, {"auc": old}).passed

    assert passed(0.5, 0.75, True, 0.25)
    assert not passed(0.5, 0.75, True, 0.125)
    assert passed(1, 1, False, 0.0)
    assert passed(1.25, 1, False, 0.25)
    assert not passed(1.5, 1, False, 0.25)
