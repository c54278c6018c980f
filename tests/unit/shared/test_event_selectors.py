"""The trigger selector language: what it accepts, what each selector becomes for Argo Events,
and that nothing gjson would read as an operator gets through; and the body's triggers."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import Invalid
from shared.event_selectors import MAX_DEPTH, Selector, canonical_header, parse_selector
from shared.pipelines import MAX_TRIGGER_PARAMETERS, MAX_TRIGGERS, parse_body


@pytest.mark.parametrize(
    ("text", "selector", "data_key"),
    [
        ("body", Selector("body", ()), "body"),
        ("body.a", Selector("body", ("a",)), "body.a"),
        ("body.object.key", Selector("body", ("object", "key")), "body.object.key"),
        ("body.items.0.id", Selector("body", ("items", "0", "id")), "body.items.0.id"),
        ("body.a_b-c.D9", Selector("body", ("a_b-c", "D9")), "body.a_b-c.D9"),
        ("header.x-request-id", Selector("header", ("X-Request-Id",)), "header.X-Request-Id.0"),
        ("header.X-SIZE", Selector("header", ("X-Size",)), "header.X-Size.0"),
        ("header.etag", Selector("header", ("Etag",)), "header.Etag.0"),
    ],
)
def test_each_selector_and_its_data_key(text: str, selector: Selector, data_key: str) -> None:
    assert parse_selector(text) == selector
    assert selector.data_key == data_key


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "a selector is"),
        ("metadata.x", "starts with body or header"),
        ("context.id", "starts with body or header"),
        ("Body.a", "starts with body or header"),
        ("body.", "segment ''"),
        ("body..a", "segment ''"),
        ("body.a.", "segment ''"),
        ("body.*", "segment '*'"),
        ("body.a*", "segment 'a*'"),
        ("body.items.#", "segment '#'"),
        ("body.items.#.id", "segment '#'"),
        ("body.items.#(id==1)", "segment"),
        ("body.@reverse", "segment '@reverse'"),
        ("body.a|b", "segment 'a|b'"),
        ("body.a\\.b", "segment"),
        ("body.a?", "segment 'a?'"),
        ("body.a b", "segment 'a b'"),
        ("body.[a,b]", "segment"),
        ("body.{a,b}", "segment"),
        ("body.a!", "segment"),
        ("header.", "header name"),
        ("header.-x", "header name"),
        ("header.X_Y", "header name"),
        ("header.a.b", "header name"),
        ("header.Authorization", "masks"),
        ("header.authorization", "masks"),
        ("body." + ".".join(["a"] * (MAX_DEPTH + 1)), "at most 16 segments"),
        ("body." + "a" * 300, "at most 256 characters"),
    ],
)
def test_what_is_refused_says_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_selector(text)


def test_headers_are_canonicalised_as_go_does() -> None:
    assert canonical_header("content-type") == "Content-Type"
    assert canonical_header("X-GITHUB-EVENT") == "X-Github-Event"
    assert canonical_header("a") == "A"


_GJSON_OPERATORS = set("*?#@|!=<>%()[]{}\\ ,")


@given(st.text(max_size=300))
def test_any_accepted_selector_is_a_plain_path(text: str) -> None:
    try:
        selector = parse_selector(text)
    except ValueError:
        return
    key = selector.data_key
    assert not set(key) & _GJSON_OPERATORS
    assert ".." not in key
    assert not key.endswith(".")
    assert len(key) <= 260
    assert key.split(".")[0] in ("body", "header")


def body(*triggers: Any) -> dict[str, Any]:
    return {
        "name": "n",
        "definition": {"type": "yaml", "template": "x"},
        "triggers": list(triggers),
    }


def errors(data: object) -> list[tuple[str, str]]:
    with pytest.raises(Invalid) as refused:
        parse_body(data)
    return [(e["field"], e["message"]) for e in refused.value.details["errors"]]


def test_a_body_with_webhook_triggers_is_accepted_and_recorded_in_its_settings() -> None:
    trigger = {"name": "on-upload", "type": "webhook", "parameters": {"day": "body.day"}}
    parsed = parse_body(body(trigger))
    assert parsed.settings()["triggers"] == [trigger]
    assert parse_body(body()).settings()["triggers"] == []
    no_triggers = {"name": "n", "definition": {"type": "yaml", "template": "x"}}
    assert parse_body(no_triggers).settings()["triggers"] is None


@pytest.mark.parametrize(
    ("triggers", "field", "message"),
    [
        ([{"name": "a", "type": "webhook", "parameters": {"x": "body.*"}}], "triggers[0]"
         ".parameters.x", "segment '*'"),
        ([{"name": "a", "type": "cron"}], "triggers[0].type", "'webhook'"),
        ([{"name": "A", "type": "webhook"}], "triggers[0].name", "pattern"),
        ([{"name": "a" * 41, "type": "webhook"}], "triggers[0].name", "pattern"),
        ([{"name": "a-", "type": "webhook"}], "triggers[0].name", "pattern"),
        ([{"name": "a", "type": "webhook", "extra": 1}], "triggers[0].extra", "not permitted"),
        ([{"name": "a", "type": "webhook", "parameters": {"x y": "body"}}], "triggers[0]"
         ".parameters.x y.[key]", "pattern"),
        ([{"name": "a", "type": "webhook"}, {"name": "a", "type": "webhook"}], "triggers",
         "unique: a"),
        ([{"name": f"t{i}", "type": "webhook"} for i in range(MAX_TRIGGERS + 1)], "triggers",
         "at most 10"),
        ([{"name": "a", "type": "webhook",
           "parameters": {f"p{i}": "body" for i in range(MAX_TRIGGER_PARAMETERS + 1)}}],
         "triggers[0].parameters", "at most 32"),
        ("webhook", "triggers", "valid list"),
    ],
)  # fmt: skip
def test_malformed_triggers_name_the_field(triggers: Any, field: str, message: str) -> None:
    found = errors({**body(), "triggers": triggers})
    assert any(f == field and message in m for f, m in found), found
