"""pipelines.definitions: a notification channel must name one of the tenant's data secrets, as a
template's Secret reference must (400 naming each channel's field)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from compiler.pipelines.compile import StepLimits
from compiler.pipelines.definitions import Target, render
from shared.errors import Invalid
from shared.pipelines import parse_body

TARGET = Target(
    tenant="acme",
    pipeline_id="abc123",
    version=1,
    kind="data",
    limits=StepLimits(max_cpu="4", max_memory="8Gi"),
    artifact_bucket="artifacts",
)
TEMPLATE = sorted((Path(__file__).parent / "benign_corpus").glob("*.yaml"))[0].read_text()
CHANNELS = [
    {"name": "ops", "type": "slack", "secret": "slack-hook"},
    {"name": "pager", "type": "pagerduty", "secret": "pagerduty"},
]


def saved(secrets: frozenset[str]) -> object:
    data = {
        "name": "nightly",
        "definition": {"type": "yaml", "template": TEMPLATE},
        "notifications": CHANNELS,
    }
    return render(parse_body(data), dataclasses.replace(TARGET, data_secrets=secrets))


def test_channels_naming_the_tenants_data_secrets_are_accepted() -> None:
    saved(frozenset({"slack-hook", "pagerduty", "other"}))


@pytest.mark.parametrize(
    ("secrets", "fields"),
    [
        (frozenset(), ["notifications[0].secret", "notifications[1].secret"]),
        (frozenset({"slack-hook"}), ["notifications[1].secret"]),
    ],
)
def test_a_channel_naming_anything_else_is_a_400_naming_its_field(
    secrets: frozenset[str], fields: list[str]
) -> None:
    with pytest.raises(Invalid) as refused:
        saved(secrets)
    assert [error["field"] for error in refused.value.details["errors"]] == fields
