"""OpenWolf-style activation expressions, parsed safely and rendered as Argo ``depends``.

Purely computational, no side effects. An activation is a boolean combination of other steps'
outcomes, e.g. ``extract.succeeded and (clean.succeeded or clean.skipped)``. It is parsed by a
small recursive-descent parser (never ``eval``) into an immutable tree, whose ``depends``
rendering Argo's DAG understands: ``extract.Succeeded && (clean.Succeeded || clean.Skipped)``.

Grammar (``and``/``&&``, ``or``/``||``, ``not``/``!``; ``not`` binds tightest, then ``and``)::

    expr    := and ( ("or" | "||") and )*
    and     := unary ( ("and" | "&&") unary )*
    unary   := ("not" | "!") unary | primary
    primary := "(" expr ")" | STEP "." OUTCOME

Outcomes: succeeded, failed, errored, skipped, omitted, daemoned, any_succeeded, all_failed,
and completed (succeeded or failed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "OUTCOMES",
    "And",
    "ExpressionError",
    "Node",
    "Not",
    "Or",
    "Outcome",
    "parse",
    "references",
    "render_depends",
]

MAX_LENGTH: Final = 4096
MAX_DEPTH: Final = 64
# Our outcome -> Argo's task result in a ``depends`` expression.
OUTCOMES: Final = {
    "succeeded": "Succeeded",
    "failed": "Failed",
    "errored": "Errored",
    "skipped": "Skipped",
    "omitted": "Omitted",
    "daemoned": "Daemoned",
    "any_succeeded": "AnySucceeded",
    "all_failed": "AllFailed",
    "completed": None,  # rendered as (step.Succeeded || step.Failed)
}
_TOKEN: Final = re.compile(
    r"\s*(?:(?P<op>&&|\|\||!|\(|\))|(?P<ref>[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.[a-z_]+)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*))",
    re.ASCII,
)
_WORDS: Final = {"and": "&&", "or": "||", "not": "!"}


class ExpressionError(ValueError):
    """An activation that does not parse; ``position`` is the offset where it went wrong."""

    def __init__(self, message: str, *, position: int) -> None:
        super().__init__(f"{message} (at character {position + 1})")
        self.position = position


@dataclass(frozen=True, slots=True)
class Outcome:
    step: str
    outcome: str


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class And:
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Or:
    left: Node
    right: Node


Node = Outcome | Not | And | Or


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, value, position): kind is "op" (operators and parentheses) or "ref"."""
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip() == "":
                return
            start = position + len(text[position:]) - len(text[position:].lstrip())
            raise ExpressionError(f"unexpected {text[start]!r}", position=start)
        start = match.start(match.lastgroup or 0)
        if match.group("op"):
            yield "op", match.group("op"), start
        elif match.group("ref"):
            yield "ref", match.group("ref"), start
        else:
            word = match.group("word")
            if word not in _WORDS:
                raise ExpressionError(
                    f"{word!r} is not an operator; write <step>.<outcome>, and, or, not",
                    position=start,
                )
            yield "op", _WORDS[word], start
        position = match.end()


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = list(_tokens(text))
        self.index = 0
        self.end = len(text)

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self, value: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "op" and token[1] == value:
            self.index += 1
            return True
        return False

    def expression(self, depth: int) -> Node:
        if depth > MAX_DEPTH:
            token = self.peek()
            raise ExpressionError("nested too deeply", position=token[2] if token else self.end)
        node = self.conjunction(depth)
        while self.take("||"):
            node = Or(node, self.conjunction(depth))
        return node

    def conjunction(self, depth: int) -> Node:
        node = self.unary(depth)
        while self.take("&&"):
            node = And(node, self.unary(depth))
        return node

    def unary(self, depth: int) -> Node:
        if self.take("!"):
            if depth > MAX_DEPTH:
                raise ExpressionError("nested too deeply", position=self.end)
            return Not(self.unary(depth + 1))
        return self.primary(depth)

    def primary(self, depth: int) -> Node:
        token = self.peek()
        if token is None:
            raise ExpressionError("expected <step>.<outcome> or '('", position=self.end)
        kind, value, position = token
        if kind == "op" and value == "(":
            self.index += 1
            node = self.expression(depth + 1)
            if not self.take(")"):
                after = self.peek()
                raise ExpressionError("expected ')'", position=after[2] if after else self.end)
            return node
        if kind == "ref":
            self.index += 1
            step, _, outcome = value.partition(".")
            if outcome not in OUTCOMES:
                raise ExpressionError(
                    f"unknown outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}",
                    position=position + len(step) + 1,
                )
            return Outcome(step, outcome)
        raise ExpressionError(f"expected <step>.<outcome>, found {value!r}", position=position)


def parse(text: str) -> Node:
    """Parse an activation expression; ``ExpressionError`` says what is wrong and where."""
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"longer than {MAX_LENGTH} characters", position=MAX_LENGTH)
    parser = _Parser(text)
    node = parser.expression(0)
    leftover = parser.peek()
    if leftover is not None:
        raise ExpressionError(f"unexpected {leftover[1]!r}", position=leftover[2])
    return node


def references(node: Node) -> set[str]:
    """The steps an activation names."""
    match node:
        case Outcome(step=step):
            return {step}
        case Not(operand=operand):
            return references(operand)
        case And(left=left, right=right) | Or(left=left, right=right):
            return references(left) | references(right)
    raise TypeError(node)  # pragma: no cover - Node is closed


_PRECEDENCE: Final = {Or: 1, And: 2, Not: 3, Outcome: 4}


def render_depends(node: Node) -> str:
    """Argo ``depends`` text, with only the parentheses the precedence needs."""

    def wrap(child: Node, parent: int) -> str:
        text = render_depends(child)
        return f"({text})" if _PRECEDENCE[type(child)] < parent else text

    match node:
        case Outcome(step=step, outcome="completed"):
            return f"({step}.Succeeded || {step}.Failed)"
        case Outcome(step=step, outcome=outcome):
            return f"{step}.{OUTCOMES[outcome]}"
        case Not(operand=operand):
            return f"!{wrap(operand, 4)}"
        case And(left=left, right=right):
            return f"{wrap(left, 2)} && {wrap(right, 2)}"
        case Or(left=left, right=right):
            return f"{wrap(left, 1)} || {wrap(right, 1)}"
    raise TypeError(node)  # pragma: no cover - Node is closed
