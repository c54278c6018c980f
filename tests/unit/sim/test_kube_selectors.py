"""Label and field selectors of the Kubernetes emulator."""

from __future__ import annotations

from typing import Any

import pytest

from sim.kube.selectors import (
    check_custom_resource_fields,
    parse_field_selector,
    parse_label_selector,
)
from sim.kube.types import ApiError

LABELS = {"app": "web", "tier": "front", "example.com/team": "ml"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app in (db, web)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("app notin (web,db)", False),
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("tier", True),
        ("missing", False),
        ("!missing", True),
        ("!tier", False),
        ("example.com/team=ml", True),
        ("app=web,tier in (front,back),!missing", True),
        ("app=web , tier=back", False),
        ("app=", False),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


def test_label_selector_on_an_object_without_labels() -> None:
    assert parse_label_selector("!a,b!=c").matches(None)
    assert not parse_label_selector("a").matches(None)


@pytest.mark.parametrize("selector", ["app in web", "app in ()", "=web", "a=b=c", "a b"])
def test_malformed_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as bad:
        parse_label_selector(selector)
    assert bad.value.status == 400


OBJ: dict[str, Any] = {
    "metadata": {"name": "wf", "namespace": "t1"},
    "status": {"phase": "Running", "finished": False, "progress": 3},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=wf", True),
        ("metadata.name==wf", True),
        ("metadata.name!=wf", False),
        ("metadata.namespace=t1,status.phase=Running", True),
        ("status.phase=Succeeded", False),
        ("status.phase!=Succeeded", True),
        ("status.finished=false", True),
        ("status.progress=3", True),
        ("status.missing=", True),
        ("status.missing!=", False),
        ("spec.nothing=x", False),
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    assert parse_field_selector(selector).matches(OBJ) is matches


@pytest.mark.parametrize("selector", ["metadata.name", "=x", "status..phase=x"])
def test_malformed_field_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as bad:
        parse_field_selector(selector)
    assert bad.value.status == 400


@pytest.mark.parametrize(
    ("selector", "namespaced", "refused"),
    [
        ("metadata.name=a", True, None),
        ("metadata.name=a", False, None),
        ("metadata.namespace=ns,metadata.name!=a", True, None),
        ("metadata.namespace=ns", False, "metadata.namespace"),
        ("status.phase=Running", True, "status.phase"),
        ("metadata.name=a,spec.entrypoint=main", True, "spec.entrypoint"),
        ("metadata.labels=x", True, "metadata.labels"),
    ],
)
def test_custom_resources_select_on_name_and_namespace_only(
    selector: str, namespaced: bool, refused: str | None
) -> None:
    parsed = parse_field_selector(selector)
    if refused is None:
        check_custom_resource_fields(parsed, namespaced=namespaced)
        return
    with pytest.raises(ApiError) as bad:
        check_custom_resource_fields(parsed, namespaced=namespaced)
    assert (bad.value.status, bad.value.reason) == (400, "BadRequest")
    assert bad.value.message == f"field label not supported: {refused}"
