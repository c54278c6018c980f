"""The gate stage's decision: a scorecard against a release's thresholds and, when asked, against
the production version's scorecard. Purely computational: no I/O, no clock.

``evaluate`` never raises, whatever it is given: a scorecard is whatever JSON a tenant's step
wrote (``eval_scorecard.json``), so a missing metric, a string, a boolean, NaN or an infinity
where a number belongs, or a scorecard that is not an object, is a failed verdict with a reason
naming the metric, never an exception (a stage controller that crashed on a tenant's file would
leave the run waiting forever).

The scorecard format (docs/pipeline-spec.md, "The scorecard"): a JSON object of metric name to
number, ``{"auc": 0.91, "latency_ms": 12}``; or an object whose ``metrics`` member is such an
object, ``{"metrics": {"auc": 0.91}, "dataset": "2026-01"}`` (the other members are ignored),
which is how evaluation tools often write theirs. Numbers are compared exactly as the binary
values JSON parsing gave (``fractions.Fraction``): no rounding decides a boundary, and no number
is too large to compare.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Final

from pydantic import ValidationError

from shared.pipelines import Comparison, Gate
from shared.stages import REASONS, VERDICT, VERDICT_FAILED, VERDICT_PASSED

_OPERATORS: Final[Mapping[str, Callable[[Fraction, Fraction], bool]]] = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}
METRICS_MEMBER: Final = "metrics"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the version passed, and why: every check that failed, in the gate's order, and
    notes (a comparison skipped) that did not decide it."""

    passed: bool
    reasons: list[str] = field(default_factory=list)

    def outputs(self) -> dict[str, str]:
        """The gate node's output parameters (``shared.stages``): verdict and reasons (JSON)."""
        return {
            VERDICT: VERDICT_PASSED if self.passed else VERDICT_FAILED,
            REASONS: json.dumps(self.reasons),
        }


def _shown(value: Fraction | float) -> str:
    """A number in a reason: as Python prints it when it is of a usual size, in scientific
    notation when not (an integer of thousands of digits is neither printed nor a float)."""
    if isinstance(value, float):
        return repr(value)
    exact = Fraction(value)
    if abs(exact) < 10**15:
        return str(exact.numerator) if exact.denominator == 1 else repr(float(exact))
    return format(Decimal(exact.numerator) / Decimal(exact.denominator), ".6e")


def metrics_of(scorecard: object) -> Mapping[str, object] | None:
    """The metrics of a scorecard (see the module docstring); None when it has none."""
    if not isinstance(scorecard, Mapping):
        return None
    nested = scorecard.get(METRICS_MEMBER)
    return nested if isinstance(nested, Mapping) else scorecard


def _number(metrics: Mapping[str, object], metric: str) -> tuple[Fraction | None, str]:
    """The metric's value exactly, or None and what is wrong with it."""
    if metric not in metrics:
        return None, "is missing"
    value = metrics[metric]
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "a boolean" if isinstance(value, bool) else f"not a number ({_kind(value)})"
        return None, f"is {kind}"
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"is not a finite number ({value!r})"
    return Fraction(value), ""


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def evaluate(scorecard: object, gate: object, production_scorecard: object | None) -> Verdict:
    """The gate's verdict on ``scorecard`` (see the module docstring).

    ``gate`` is a release's ``gate`` as stored with the version (``shared.pipelines.Gate`` as
    JSON); ``production_scorecard`` the production version's scorecard, None when no version is
    in production. Each threshold ``{metric, op, value}`` passes when ``metric op value`` holds
    exactly. ``compare_to_production`` fails when the regression, ``production - new`` (or
    ``new - production`` when lower is better), exceeds ``max_regression``; without a production
    version it is skipped, and a production scorecard without a finite value of the metric
    skips it too (the new scorecard is what is being judged).
    """
    try:
        config = Gate.model_validate(gate)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "gate"
        return Verdict(False, [f"the gate's configuration is invalid at {where}: {first['msg']}"])
    metrics = metrics_of(scorecard)
    if metrics is None:
        return Verdict(False, [f"the scorecard is not a JSON object ({_kind(scorecard)})"])
    reasons: list[str] = []
    passed = True
    for threshold in config.thresholds:
        value, wrong = _number(metrics, threshold.metric)
        if value is None:
            passed = False
            reasons.append(f"{threshold.metric} {wrong} in the scorecard")
            continue
        if not _OPERATORS[threshold.op](value, Fraction(threshold.value)):
            passed = False
            reasons.append(
                f"{threshold.metric} is {_shown(value)}, "
                f"not {threshold.op} {_shown(threshold.value)}"
            )
    if config.compare_to_production is not None:
        ok, reason = _compare(metrics, config.compare_to_production, production_scorecard)
        passed = passed and ok
        if reason:
            reasons.append(reason)
    return Verdict(passed, reasons)


def _compare(
    metrics: Mapping[str, object], comparison: Comparison, production_scorecard: object | None
) -> tuple[bool, str]:
    """Whether the metric regressed from production by more than allowed, and why not when
    the comparison was skipped."""
    metric = comparison.metric
    new, wrong = _number(metrics, metric)
    if new is None:
        return False, f"{metric} {wrong} in the scorecard, so it cannot be compared to production"
    if production_scorecard is None:
        return True, f"no version is in production: the comparison of {metric} was skipped"
    production_metrics = metrics_of(production_scorecard)
    if production_metrics is None:
        return True, (
            "the production version's scorecard is not a JSON object: "
            f"the comparison of {metric} was skipped"
        )
    old, wrong = _number(production_metrics, metric)
    if old is None:
        return True, (
            f"{metric} {wrong} in the production version's scorecard: the comparison was skipped"
        )
    regression = old - new if comparison.higher_is_better else new - old
    limit = Fraction(comparison.max_regression)
    if regression > limit:
        return False, (
            f"{metric} regressed by {_shown(regression)} from production's {_shown(old)} "
            f"(at most {_shown(comparison.max_regression)} allowed)"
        )
    return True, ""
