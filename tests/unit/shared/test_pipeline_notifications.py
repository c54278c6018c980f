"""shared.pipelines: a pipeline's notification channels, as both the apiserver and the
compiler parse them, and what a version records of them."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import Invalid
from shared.pipelines import MAX_CHANNELS, parse_body

YAML = {"type": "yaml", "template": "kind: WorkflowTemplate"}


def body(notifications: Any) -> dict[str, Any]:
    return {"name": "nightly", "definition": YAML, "notifications": notifications}


def refusal(notifications: Any) -> list[dict[str, str]]:
    with pytest.raises(Invalid) as refused:
        parse_body(body(notifications))
    errors: list[dict[str, str]] = refused.value.details["errors"]
    return errors


def test_channels_are_recorded_with_their_defaults_and_never_a_value() -> None:
    parsed = parse_body(
        body(
            [
                {"name": "ops-slack", "type": "slack", "secret": "slack-hook"},
                {"name": "pager", "type": "pagerduty", "secret": "pd"},
                {
                    "name": "wins",
                    "type": "slack",
                    "secret": "hook",
                    "key": "webhook",
                    "on": "success",
                },
            ]
        )
    )
    assert parsed.settings()["notifications"] == [
        {
            "name": "ops-slack",
            "type": "slack",
            "secret": "slack-hook",
            "key": "url",
            "on": "failure",
        },
        {
            "name": "pager",
            "type": "pagerduty",
            "secret": "pd",
            "key": "routing_key",
            "on": "failure",
            "severity": "error",
        },
        {"name": "wins", "type": "slack", "secret": "hook", "key": "webhook", "on": "success"},
    ]


def test_no_channels_is_an_empty_list() -> None:
    assert parse_body({"name": "n", "definition": YAML}).settings()["notifications"] == []
    assert parse_body(body([])).notifications == []
    assert parse_body(body(None)).notifications == []


@pytest.mark.parametrize(
    ("channel", "field"),
    [
        ({"name": "a", "type": "teams", "secret": "s"}, "notifications[0]"),
        ({"name": "a", "type": "slack"}, "notifications[0].slack.secret"),
        (
            {"name": "a", "type": "slack", "secret": "s", "severity": "error"},
            "notifications[0].slack.severity",
        ),
        (
            {"name": "a", "type": "slack", "secret": "s", "on": "sometimes"},
            "notifications[0].slack.on",
        ),
        (
            {"name": "a", "type": "slack", "secret": "s", "url": "https://x"},
            "notifications[0].slack.url",
        ),
        (
            {"name": "a", "type": "pagerduty", "secret": "s", "severity": "high"},
            "notifications[0].pagerduty.severity",
        ),
        ({"name": "Ops Slack", "type": "slack", "secret": "s"}, "notifications[0].slack.name"),
        ({"name": "a", "type": "slack", "secret": "Not_A_Name"}, "notifications[0].slack.secret"),
        (
            {"name": "a", "type": "slack", "secret": "kubeopera-artifacts"},
            "notifications[0].slack.secret",
        ),
        ({"name": "a", "type": "slack", "secret": "s", "key": "a/b"}, "notifications[0].slack.key"),
    ],
)
def test_a_malformed_channel_is_refused_naming_its_field(
    channel: dict[str, Any], field: str
) -> None:
    assert [error["field"] for error in refusal([channel])] == [field]


def test_channel_names_are_unique_and_their_number_bounded() -> None:
    twice = [{"name": "ops", "type": "slack", "secret": "a"}] * 2
    assert "unique" in refusal(twice)[0]["message"]
    many = [{"name": f"c{i}", "type": "slack", "secret": "a"} for i in range(MAX_CHANNELS + 1)]
    assert refusal(many)[0]["field"] == "notifications"
    assert refusal({"name": "ops"})[0]["field"] == "notifications"


@pytest.mark.parametrize("on", ["success", "always"])
def test_a_pagerduty_channel_told_of_successes_is_refused_naming_its_on(on: str) -> None:
    """An incident per successful run pages people for nothing."""
    errors = refusal(
        [
            {"name": "ops", "type": "slack", "secret": "hook", "on": on},
            {"name": "pager", "type": "pagerduty", "secret": "pd", "on": on},
            {"name": "pager2", "type": "pagerduty", "secret": "pd"},
        ]
    )
    assert [error["field"] for error in errors] == ["notifications[1].on"]
    assert "failures only" in errors[0]["message"]
    explicit = {"name": "pager", "type": "pagerduty", "secret": "pd", "on": "failure"}
    assert parse_body(body([explicit])).notifications[0].on == "failure"
