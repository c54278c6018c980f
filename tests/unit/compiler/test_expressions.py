"""pipelines.expressions: activation expressions parsed without eval, rendered as depends."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.pipelines.expressions import (
    And,
    ExpressionError,
    Not,
    Or,
    Outcome,
    parse,
    references,
    render_depends,
)


@pytest.mark.parametrize(
    ("text", "depends"),
    [
        ("extract.succeeded", "extract.Succeeded"),
        (
            "extract.succeeded and (clean.succeeded or clean.skipped)",
            "extract.Succeeded && (clean.Succeeded || clean.Skipped)",
        ),
        ("a.failed or b.errored and c.omitted", "a.Failed || b.Errored && c.Omitted"),
        ("(a.failed or b.errored) and c.omitted", "(a.Failed || b.Errored) && c.Omitted"),
        ("not a.succeeded", "!a.Succeeded"),
        ("!(a.succeeded || b-2.daemoned)", "!(a.Succeeded || b-2.Daemoned)"),
        ("a.completed && not b.skipped", "(a.Succeeded || a.Failed) && !b.Skipped"),
        ("fan.any_succeeded or fan.all_failed", "fan.AnySucceeded || fan.AllFailed"),
        ("  ((a.succeeded))  ", "a.Succeeded"),
        ("not not a.failed", "!(!a.Failed)"),  # parenthesised: plain for any evaluator
    ],
)
def test_activation_renders_as_argo_depends(text: str, depends: str) -> None:
    assert render_depends(parse(text)) == depends


def test_and_binds_tighter_than_or() -> None:
    tree = parse("a.succeeded or b.succeeded and c.succeeded")
    assert tree == Or(
        Outcome("a", "succeeded"), And(Outcome("b", "succeeded"), Outcome("c", "succeeded"))
    )
    assert parse("not a.failed and b.failed") == And(
        Not(Outcome("a", "failed")), Outcome("b", "failed")
    )


def test_references_are_the_named_steps() -> None:
    assert references(parse("a.succeeded and (b.failed or not c.skipped)")) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("", "expected <step>.<outcome>", 0),
        ("a.succeeded and", "expected <step>.<outcome>", 15),
        ("a.finished", "unknown outcome 'finished'", 2),
        ("a.succeeded b.failed", "unexpected 'b.failed'", 12),
        ("(a.succeeded", "expected ')'", 12),
        ("a.succeeded)", "unexpected ')'", 11),
        ("__import__('os').system('x')", "is not an operator", 0),
        ("a.succeeded; rm -rf /", "unexpected ';'", 11),
        ("a.succeeded == 1", "unexpected '='", 12),
        ("xor.failed or a", "is not an operator", 14),
    ],
)
def test_bad_activation_says_what_and_where(text: str, message: str, position: int) -> None:
    with pytest.raises(
        ExpressionError, match=message.replace("(", r"\(").replace(")", r"\)")
    ) as err:
        parse(text)
    assert err.value.position == position


def test_depth_and_length_are_bounded() -> None:
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse("(" * 200 + "a.failed" + ")" * 200)
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse("not " * 200 + "a.failed")
    with pytest.raises(ExpressionError, match="longer than"):
        parse("a.failed or " * 1000 + "a.failed")


_names = st.sampled_from(["a", "b", "load-2", "x9"])
_outcomes = st.sampled_from(["succeeded", "failed", "skipped", "errored", "completed"])
_trees = st.recursive(
    st.builds(Outcome, _names, _outcomes),
    lambda children: st.one_of(
        st.builds(Not, children),
        st.builds(And, children, children),
        st.builds(Or, children, children),
    ),
    max_leaves=12,
)


def _words(node: object) -> str:
    match node:
        case Outcome(step=step, outcome=outcome):
            return f"{step}.{outcome}"
        case Not(operand=operand):
            return f"not ({_words(operand)})"
        case And(left=left, right=right):
            return f"({_words(left)}) and ({_words(right)})"
        case Or(left=left, right=right):
            return f"({_words(left)}) or ({_words(right)})"
    raise AssertionError(node)


@given(_trees)
def test_parse_inverts_printing(tree: object) -> None:
    assert parse(_words(tree)) == tree
    assert references(parse(_words(tree))) <= {"a", "b", "load-2", "x9"}


@given(st.text(max_size=60))
def test_arbitrary_text_parses_or_raises_expression_error(text: str) -> None:
    with contextlib.suppress(ExpressionError):
        parse(text)
