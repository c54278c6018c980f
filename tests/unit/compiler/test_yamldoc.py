"""pipelines.yamldoc: one tenant YAML document parsed into JSON-shaped data, hard limits."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from _pipelines import wide_dag
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.pipelines import yamldoc
from compiler.pipelines.compile import StepLimits, compile_wizard
from compiler.pipelines.yamldoc import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_ERRORS,
    MAX_NODES,
    parse_template_yaml,
)
from shared.errors import Invalid

BENIGN = sorted((Path(__file__).parent / "benign_corpus").glob("*.yaml"))


def errors(text: str) -> list[dict[str, str]]:
    with pytest.raises(Invalid) as caught:
        parse_template_yaml(text)
    assert caught.value.status == 400
    found: list[dict[str, str]] = caught.value.details["errors"]
    assert found, "an Invalid without details names nothing for the author to fix"
    return found


def refused(text: str) -> tuple[str, str]:
    """The only error's field and message."""
    (error,) = errors(text)
    return error["field"], error["message"]


@pytest.mark.parametrize("path", BENIGN, ids=lambda path: path.name)
def test_benign_templates_parse_as_safe_load_parses_them(path: Path) -> None:
    text = path.read_text()
    assert parse_template_yaml(text) == yaml.safe_load(text)


def test_a_compiled_template_dumped_to_yaml_parses_back_unchanged() -> None:
    document = compile_wizard(
        wide_dag(20),
        tenant="acme",
        pipeline_id="p1",
        version=1,
        kind="data",
        limits=StepLimits(max_cpu="4", max_memory="8Gi"),
    )
    assert parse_template_yaml(yaml.safe_dump(document)) == document


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Timestamps stay as written: a parameter value "2024-01-01" is not a date.
        ("day: 2024-01-01\n", {"day": "2024-01-01"}),
        ("at: 2024-01-01T10:00:00Z\n", {"at": "2024-01-01T10:00:00Z"}),
        ("at: 2001-12-14 21:59:43.10 -5\n", {"at": "2001-12-14 21:59:43.10 -5"}),
        # Everything else resolves as yaml.safe_load resolves it (YAML 1.1).
        ("a: [1, -2, 0x1f, 0o17, 012, 1_000, 1:20]\n", {"a": [1, -2, 31, "0o17", 10, 1000, 80]}),
        ("a: [1.5, -0.25, 1e3, 6.8523015e+5]\n", {"a": [1.5, -0.25, "1e3", 685230.15]}),
        ("a: [true, yes, on, false, no, off, True]\n", {"a": [True] * 3 + [False] * 3 + [True]}),
        ("a: [~, null, Null, '']\nb:\n", {"a": [None, None, None, ""], "b": None}),
        ("a: ['1', \"yes\", '2024-01-01']\n", {"a": ["1", "yes", "2024-01-01"]}),
        # Core tags are plain JSON types.
        (
            "a: !!str 12\nb: !!int '12'\nc: !!float '1.5'\nd: !!bool 'yes'\ne: !!null ''\n",
            {"a": "12", "b": 12, "c": 1.5, "d": True, "e": None},
        ),
        ("a: !!seq [1]\nb: !!map {c: 1}\n", {"a": [1], "b": {"c": 1}}),
        # YAML's value key and a merge key written as a value are just strings.
        ("a: =\nb: [<<]\n", {"a": "=", "b": ["<<"]}),
        ('"<<": 1\n', {"<<": 1}),
        ("---\na: 1\n...\n", {"a": 1}),
        ("{a: {b: [c, {d: e}]}}", {"a": {"b": ["c", {"d": "e"}]}}),
        ("a: |\n  line one\n  line two\n", {"a": "line one\nline two\n"}),
    ],
)
def test_scalars_resolve_to_json_types(text: str, expected: dict[str, Any]) -> None:
    assert parse_template_yaml(text) == expected


def test_timestamps_come_back_as_the_string_written() -> None:
    parsed = parse_template_yaml("day: 2024-01-01\n")
    assert type(parsed["day"]) is str
    assert yaml.safe_load("day: 2024-01-01\n")["day"] != "2024-01-01"  # what we avoid


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        # Anchors and aliases: billion laughs, and a value read in one place, applied in another.
        ("a: &x 1\n", "a", "line 1, column 4: anchors (&x) are not accepted"),
        ("a: [x, *y]\n", "a[1]", "line 1, column 8: aliases (*y) are not accepted"),
        ("a: &big [x]\n", "a", "line 1, column 4: anchors (&big) are not accepted"),
        ("<<: {a: 1}\n", "$", "line 1, column 1: the merge key << is not accepted"),
        # Tags beyond JSON's types.
        (
            "a: !!python/object/apply:os.system [ls]\n",
            "a",
            "line 1, column 4: the tag tag:yaml.org,2002:python/object/apply:os.system "
            "is not accepted",
        ),
        (
            "a: !!python/name:os.system ''\n",
            "a",
            "line 1, column 4: the tag tag:yaml.org,2002:python/name:os.system is not accepted",
        ),
        ("a: !custom x\n", "a", "line 1, column 4: the tag !custom is not accepted"),
        (
            "a: !!binary aGk=\n",
            "a",
            "line 1, column 4: the tag tag:yaml.org,2002:binary is not accepted",
        ),
        ("a: !!set {x}\n", "a", "line 1, column 4: the tag tag:yaml.org,2002:set is not accepted"),
        (
            "a: !!omap [x: 1]\n",
            "a",
            "line 1, column 4: the tag tag:yaml.org,2002:omap is not accepted",
        ),
        (
            "a: !!timestamp 2024-01-01\n",
            "a",
            "line 1, column 4: the tag tag:yaml.org,2002:timestamp is not accepted",
        ),
        ("a: !!str [x]\n", "a", "line 1, column 4: the tag tag:yaml.org,2002:str is not accepted"),
        ("a: !!int x\n", "a", "line 1, column 4: 'x' is not a valid tag:yaml.org,2002:int"),
        # Values JSON cannot hold.
        ("a: .inf\n", "a", "line 1, column 4: .inf is not a JSON number"),
        ("a: [1, -.inf]\n", "a[1]", "line 1, column 8: -.inf is not a JSON number"),
        ("a: .NaN\n", "a", "line 1, column 4: .NaN is not a JSON number"),
        ("a: 1.0e+999\n", "a", "line 1, column 4: 1.0e+999 is not a JSON number"),
        (
            "a: 9223372036854775808\n",
            "a",
            "line 1, column 4: 9223372036854775808 does not fit in 64 bits",
        ),
        # Keys must be strings: Kubernetes field names are.
        ("1: a\n", "$", "line 1, column 1: keys must be strings, not integer '1'"),
        ("on: push\n", "$", "line 1, column 1: keys must be strings, not boolean 'on'"),
        ("a:\n  ~: 1\n", "a", "line 2, column 3: keys must be strings, not null '~'"),
        ("a: {1.5: x}\n", "a", "line 1, column 5: keys must be strings, not number '1.5'"),
        ("? [a, b]\n: c\n", "$", "line 1, column 3: keys must be strings, not a sequence"),
        ("? {a: b}\n: c\n", "$", "line 1, column 3: keys must be strings, not a mapping"),
        # Duplicate keys: PyYAML keeps the last silently, hiding the first from a reviewer.
        ("a: 1\nb: 2\na: 3\n", "a", "line 3, column 1: duplicate key 'a'"),
        (
            "spec:\n  templates:\n    - name: x\n      container: {image: a, image: b}\n",
            "spec.templates[0].container.image",
            "line 4, column 29: duplicate key 'image'",
        ),
        (
            "metadata:\n  labels:\n    app.kubernetes.io/name: a\n    app.kubernetes.io/name: b\n",
            'metadata.labels["app.kubernetes.io/name"]',
            "line 4, column 5: duplicate key 'app.kubernetes.io/name'",
        ),
        ("a: {x: 1, 'x': 2}\n", "a.x", "line 1, column 11: duplicate key 'x'"),
        # More than one document, or none that is a mapping.
        (
            "a: 1\n---\nb: 2\n",
            "$",
            "line 2, column 1: only one YAML document is accepted, found a second",
        ),
        ("---\n---\n", "$", "line 2, column 1: only one YAML document is accepted, found a second"),
        ("", "$", "the document must be a mapping (an object), not an empty document"),
        (
            "# only a comment\n",
            "$",
            "the document must be a mapping (an object), not an empty document",
        ),
        ("- a\n- b\n", "$", "the document must be a mapping (an object), not a sequence"),
        ("just text\n", "$", "the document must be a mapping (an object), not a string"),
        ("42\n", "$", "the document must be a mapping (an object), not an integer"),
        # Malformed YAML, located.
        ("a: b: c\n", "$", "line 1, column 5: mapping values are not allowed in this context"),
        ("a: [1, 2\n", "a[2]", "line 2, column 1: did not find expected ',' or ']'"),
        (
            "spec:\n  templates:\n    - name: a\n   bad: indent\n",
            "spec",
            "line 4, column 4: did not find expected key",
        ),
        ("a: 'open\n", "a", "line 2, column 1: found unexpected end of stream"),
        (
            "a: b\n\tc: d\n",
            "a",
            "line 2, column 1: found a tab character that violates indentation",
        ),
        ("a: \ud800\n", "$", "character 4 is not valid Unicode"),
        (
            "a: \x00\n",
            "$",
            "character 4: #x0000 is not accepted (control characters are not allowed)",
        ),
    ],
)
def test_hostile_or_malformed_documents_are_refused_with_their_path(
    text: str, field: str, message: str
) -> None:
    assert refused(text) == (field, message)


def test_every_problem_is_reported_not_only_the_first() -> None:
    found = errors("a: &x 1\nb: *x\nb: 2\nc: !!binary aGk=\n")
    assert [error["field"] for error in found] == ["a", "b", "b", "c"]
    assert "duplicate key 'b'" in found[2]["message"]


def test_the_message_summarises_the_first_errors_with_their_paths() -> None:
    with pytest.raises(Invalid) as caught:
        parse_template_yaml("a: 1\na: 2\n")
    assert caught.value.message == (
        "the YAML document is invalid: a: line 2, column 1: duplicate key 'a'"
    )


def test_the_report_is_capped() -> None:
    text = "".join(f"k{index}: *x\n" for index in range(MAX_ERRORS + 10))
    found = errors(text)
    assert len(found) == MAX_ERRORS + 1
    assert found[-1]["message"] == f"more than {MAX_ERRORS} problems; the rest are not reported"


def test_the_size_is_capped_in_bytes() -> None:
    line = "a: " + "x" * 1000 + "\n"
    fits = "k: |\n" + "  " + "y" * (MAX_BYTES - 100) + "\n"
    assert parse_template_yaml(fits)["k"].startswith("yyy")
    text = "".join(line.replace("a:", f"k{index}:") for index in range(MAX_BYTES // 1000 + 1))
    field, message = refused(text)
    assert field == "$"
    assert message == f"the document is {len(text.encode())} bytes; at most {MAX_BYTES}"
    # Multi-byte characters count as the bytes they are.
    wide = "k: " + "é" * (MAX_BYTES // 2) + "\n"
    assert len(wide) < MAX_BYTES < len(wide.encode())
    assert refused(wide)[1].startswith("the document is ")


@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{a: ", "}")])
def test_nesting_deeper_than_the_limit_is_refused(opening: str, closing: str) -> None:
    inside = "x" if opening == "[" else "b"
    fits = "a: " + opening * (MAX_DEPTH - 1) + inside + closing * (MAX_DEPTH - 1)
    assert parse_template_yaml(fits)["a"] is not None
    too_deep = "a: " + opening * MAX_DEPTH + inside + closing * MAX_DEPTH
    assert refused(too_deep)[1].endswith(f"nested more than {MAX_DEPTH} deep")


def test_a_deep_bomb_is_refused_without_exhausting_the_stack() -> None:
    assert (
        refused("a: " + "[" * 200_000)[1]
        == f"line 1, column {4 + MAX_DEPTH - 1}: nested more than {MAX_DEPTH} deep"
    )


def test_the_number_of_values_is_capped() -> None:
    # The root mapping, its key "a" and the sequence count too.
    fits = "a: [" + ",".join(["1"] * (MAX_NODES - 3)) + "]\n"
    assert len(parse_template_yaml(fits)["a"]) == MAX_NODES - 3
    too_many = "a: [" + ",".join(["1"] * MAX_NODES) + "]\n"
    assert refused(too_many)[1].endswith(f"more than {MAX_NODES} values")


def test_a_billion_laughs_is_refused_without_expanding() -> None:
    """Ten levels of ten aliases would be 10**9 strings; each anchor and alias is one error."""
    lines = ['lol0: &l0 "lol"']
    lines += [f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    found = errors("\n".join(lines) + "\n")
    assert found[0] == {
        "field": "lol0",
        "message": "line 1, column 7: anchors (&l0) are not accepted",
    }
    assert found[1] == {
        "field": "lol1",
        "message": "line 2, column 7: anchors (&l1) are not accepted",
    }
    assert found[2]["field"] == "lol1[0]"
    assert len(found) == MAX_ERRORS + 1  # 9 anchors and 90 aliases, capped


@pytest.mark.parametrize("path", BENIGN, ids=lambda path: path.name)
def test_the_parsed_document_is_a_fresh_json_shaped_value(path: Path) -> None:
    first = parse_template_yaml(path.read_text())
    second = parse_template_yaml(path.read_text())
    assert first == second
    assert first is not second

    def shaped(value: object) -> bool:
        if isinstance(value, dict):
            return all(isinstance(key, str) and shaped(item) for key, item in value.items())
        if isinstance(value, list):
            return all(shaped(item) for item in value)
        return value is None or isinstance(value, str | int | float | bool)

    assert shaped(first)


@pytest.mark.parametrize("path", BENIGN, ids=lambda path: path.name)
def test_the_pure_python_parser_reads_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libyaml, PyYAML's own parser is used: same documents, same refusals."""
    text = path.read_text()
    expected = parse_template_yaml(text)
    monkeypatch.setattr(yamldoc, "_Parser", yaml.SafeLoader)
    assert parse_template_yaml(text) == expected
    for hostile in ("a: &x 1\n", "a: 1\na: 2\n", "a: !!binary aGk=\n", "a: [1\n", "a: \x00\n"):
        assert errors(hostile)


# --- open-ended input ----------------------------------------------------------------------------
# Printable text: YAML itself reads some control characters (NEL, line and paragraph separators)
# as line breaks, which safe_dump writes raw; that is YAML's behaviour, not the parser's.
_TEXT = st.characters(exclude_categories=["Cs", "Cc", "Zl", "Zp"], include_characters="\n\t")
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(_TEXT, max_size=20)
)
_KEYS = st.text(_TEXT, max_size=12)
_DOCUMENTS = st.dictionaries(
    _KEYS,
    st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
        max_leaves=25,
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(document=_DOCUMENTS, flow=st.booleans())
def test_json_like_documents_round_trip_through_safe_dump(
    document: dict[str, Any], flow: bool
) -> None:
    text = yaml.safe_dump(document, default_flow_style=flow, allow_unicode=flow)
    assert parse_template_yaml(text) == document


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text_is_parsed_or_refused_as_invalid(text: str) -> None:
    """Whatever arrives, the answer is a mapping or ``Invalid``: never another exception."""
    parsed: object = None
    found: list[dict[str, str]] = []
    try:
        parsed = parse_template_yaml(text)
    except Invalid as exc:
        found = exc.details["errors"]
    assert isinstance(parsed, dict) != bool(found)


def test_floats_keep_their_value() -> None:
    parsed = parse_template_yaml("a: [0.1, -0.0, 1.0e+300]\n")
    assert parsed["a"][0] == 0.1
    assert math.copysign(1, parsed["a"][1]) == -1
    assert parsed["a"][2] == 1e300


def test_a_200_kb_template_parses_exactly() -> None:
    """The size the limits are set for; its timing is measured outside the tests (no wall-clock
    assertions here), about 25 ms against 100 ms for yaml.load with the C safe loader."""
    document = compile_wizard(
        wide_dag(190),
        tenant="acme",
        pipeline_id="p1",
        version=1,
        kind="data",
        limits=StepLimits(max_cpu="4", max_memory="8Gi"),
    )
    text = yaml.safe_dump(document, sort_keys=False)
    assert 180_000 < len(text) < MAX_BYTES
    assert parse_template_yaml(text) == document
