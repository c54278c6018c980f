"""Merge patch (RFC 7386) and JSON patch (RFC 6902) of the Kubernetes emulator."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.kube.patching import json_patch, merge_patch, patch_media
from sim.kube.types import ApiError

# RFC 7386, appendix A.
MERGE_CASES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), MERGE_CASES)
def test_merge_patch_follows_rfc_7386(target: Any, patch: Any, expected: Any) -> None:
    assert merge_patch(target, patch) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=10,
)


@given(target=json_values, patch=json_values)
def test_merge_patch_never_mutates_its_target(target: Any, patch: Any) -> None:
    before = copy.deepcopy(target)
    merge_patch(target, patch)
    assert target == before


DOC = {"metadata": {"name": "wf"}, "spec": {"args": ["a", "b"], "x": 1}}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/spec/y", "value": 2}], {"args": ["a", "b"], "x": 1, "y": 2}),
        ([{"op": "add", "path": "/spec/args/1", "value": "z"}], {"args": ["a", "z", "b"], "x": 1}),
        ([{"op": "add", "path": "/spec/args/-", "value": "z"}], {"args": ["a", "b", "z"], "x": 1}),
        ([{"op": "remove", "path": "/spec/args/0"}], {"args": ["b"], "x": 1}),
        ([{"op": "replace", "path": "/spec/x", "value": 5}], {"args": ["a", "b"], "x": 5}),
        ([{"op": "move", "from": "/spec/x", "path": "/spec/y"}], {"args": ["a", "b"], "y": 1}),
        (
            [{"op": "copy", "from": "/spec/args/0", "path": "/spec/first"}],
            {"args": ["a", "b"], "x": 1, "first": "a"},
        ),
        (
            [{"op": "test", "path": "/spec/x", "value": 1}, {"op": "remove", "path": "/spec/x"}],
            {"args": ["a", "b"]},
        ),
    ],
)
def test_json_patch_operations(ops: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(DOC)
    assert json_patch(DOC, ops)["spec"] == expected
    assert before == DOC, "the input document is left alone"


def test_json_patch_escapes_pointer_tokens() -> None:
    doc = {"metadata": {"labels": {"app.kubernetes.io/name": "x", "a~b": "y"}}}
    ops = [
        {"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1name"},
        {"op": "replace", "path": "/metadata/labels/a~0b", "value": "z"},
    ]
    assert json_patch(doc, ops) == {"metadata": {"labels": {"a~b": "z"}}}


@pytest.mark.parametrize(
    ("ops", "status"),
    [
        ({"spec": {"x": 2}}, 400),  # a dict sent as JSON patch: the kubernetes-asyncio default
        ([{"op": "frobnicate", "path": "/spec"}], 400),
        ([{"op": "add", "path": "/spec/y"}], 400),
        ([{"op": "test", "path": "/spec/x", "value": 2}], 422),
        ([{"op": "remove", "path": "/spec/missing"}], 422),
        ([{"op": "replace", "path": "/spec/args/7", "value": 1}], 422),
        ([{"op": "add", "path": "/nothing/here", "value": 1}], 422),
        ([{"op": "move", "from": "/spec", "path": "/spec/inner"}], 422),
        ([{"op": "add", "path": "spec", "value": 1}], 422),
    ],
)
def test_json_patch_refusals(ops: Any, status: int) -> None:
    with pytest.raises(ApiError) as refused:
        json_patch(DOC, ops)
    assert refused.value.status == status


@pytest.mark.parametrize(
    ("content_type", "custom", "accepted"),
    [
        ("application/merge-patch+json", True, True),
        ("application/json-patch+json; charset=utf-8", True, True),
        ("application/strategic-merge-patch+json", False, True),
        ("application/strategic-merge-patch+json", True, False),
        ("application/apply-patch+yaml", False, False),
        ("application/json", False, False),
    ],
)
def test_patch_media_types(content_type: str, custom: bool, accepted: bool) -> None:
    if accepted:
        assert patch_media(content_type, custom=custom) == content_type.split(";")[0]
        return
    with pytest.raises(ApiError) as refused:
        patch_media(content_type, custom=custom)
    assert (refused.value.status, refused.value.reason) == (415, "UnsupportedMediaType")
    listed = refused.value.message.rpartition("accepted media types include: ")[2]
    assert ("application/strategic-merge-patch+json" in listed) is not custom
