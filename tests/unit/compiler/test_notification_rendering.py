"""compiler.notifications.rendering and planning: what a finished run's Slack message and
PagerDuty event say, which channels get one, and that nothing a tenant writes can break out of
Slack's markup."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.notifications.planning import (
    UnreadableChannels,
    channels_of,
    matches,
    plan,
    webhook_url_problem,
    with_failed_step,
)
from compiler.notifications.rendering import (
    MAX_SUMMARY,
    FailedStep,
    FinishedRun,
    dedup_key,
    failed_steps,
    format_duration,
    pagerduty_event,
    run_link,
    slack_escape,
    slack_message,
    with_routing_key,
)
from shared.pipelines import PagerDutyChannel, SlackChannel
from shared.runs import RunPhase

FINISHED = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
LINK = "https://ui.example/workflows/host-1/kubeopera-data-acme/p-1-v3-abc"
SLACK = SlackChannel(name="ops", type="slack", secret="hook", on="always")
PAGER = PagerDutyChannel(name="pager", type="pagerduty", secret="pd", severity="critical")


def run(phase: RunPhase = RunPhase.FAILED, **fields: Any) -> FinishedRun:
    values: dict[str, Any] = {
        "cluster_id": "host-1",
        "namespace": "kubeopera-data-acme",
        "name": "p-1-v3-abc",
        "uid": "7f0c2f5e-1111-2222-3333-444455556666",
        "tenant": "acme",
        "phase": phase,
        "pipeline_id": "p1",
        "pipeline_name": "nightly load",
        "pipeline_version": 3,
        "started_at": FINISHED - timedelta(seconds=125),
        "finished_at": FINISHED,
        "duration_seconds": 125.0,
        "message": "child 'load' failed",
        "failed_step": FailedStep("load", "Error (exit code 1)")
        if phase is not RunPhase.SUCCEEDED
        else None,
        "failed_steps": 1 if phase is not RunPhase.SUCCEEDED else 0,
    }
    values.update(fields)
    return FinishedRun(**values)


def all_text(message: dict[str, Any]) -> str:
    """Every string Slack renders: the text and each block's texts."""
    texts = [message["text"]]
    for block in message["blocks"]:
        if "text" in block:
            texts.append(block["text"]["text"])
        texts.extend(field["text"] for field in block.get("fields", ()))
        texts.extend(element["text"] for element in block.get("elements", ()))
    return "\n".join(texts)


# --- Slack -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "emoji", "verb"),
    [
        (RunPhase.FAILED, ":x:", "failed"),
        (RunPhase.ERROR, ":warning:", "errored"),
        (RunPhase.SUCCEEDED, ":white_check_mark:", "succeeded"),
    ],
)
def test_a_slack_message_names_pipeline_run_phase_duration_step_and_link(
    phase: RunPhase, emoji: str, verb: str
) -> None:
    message = slack_message(run(phase), link=LINK)
    text = message["text"]
    assert text.startswith(emoji)
    assert f"*<{LINK}|nightly load>*" in text
    assert "(v3)" in text
    assert "`p-1-v3-abc`" in text
    assert f"*{verb}* after 2m 05s" in text
    assert text.endswith(f"<{LINK}|open the run>")
    rendered = all_text(message)
    assert f"*Phase*\n{phase.value}" in rendered
    assert "*Tenant*\nacme" in rendered
    assert "*Run*\n`kubeopera-data-acme/p-1-v3-abc`" in rendered
    assert "cluster host-1 · finished 2026-03-01T12:00:05Z" in rendered
    if phase is RunPhase.SUCCEEDED:
        assert "Failed step" not in rendered
        assert "```" not in rendered
    else:
        assert " at step `load`" in text
        assert "*Failed step*\n`load`" in rendered
        assert "```Error (exit code 1)```" in rendered


def test_a_slack_message_without_ui_url_has_no_link_and_counts_other_failed_steps() -> None:
    message = slack_message(run(failed_steps=3, duration_seconds=None), link=None)
    assert "<" not in message["text"]
    assert "*nightly load*" in message["text"]
    assert "after unknown" in message["text"]
    assert "`load` (and 2 more)" in all_text(message)


def test_a_run_without_a_step_message_quotes_the_runs_own_message() -> None:
    message = slack_message(run(failed_step=FailedStep("load", None)), link=None)
    assert "```child 'load' failed```" in all_text(message)
    bare = slack_message(run(failed_step=None, failed_steps=0, message=None), link=None)
    assert "```" not in all_text(bare)
    assert "at step" not in bare["text"]


_LINK_MARKUP = re.compile(r"<https://ui\.example/[^<>|]*\|[^<>]*>")
# Text a tenant writes, leaning on what means something to Slack.
_HOSTILE = st.sampled_from(list("<>&|`*_~!@#\n")) | st.characters()


@given(
    pipeline=st.text(_HOSTILE, max_size=300),
    name=st.text(_HOSTILE, max_size=80),
    step=st.text(_HOSTILE, max_size=80),
    message=st.text(_HOSTILE, max_size=6000),
    tenant=st.text(_HOSTILE, min_size=1, max_size=20),
)
def test_nothing_a_tenant_writes_becomes_slack_markup_and_fields_stay_in_limits(
    pipeline: str, name: str, step: str, message: str, tenant: str
) -> None:
    finished = run(
        pipeline_name=pipeline,
        name=name,
        tenant=tenant,
        failed_step=FailedStep(step, message),
        message=message,
    )
    slack = slack_message(finished, link=LINK)
    rendered = _LINK_MARKUP.sub("", all_text(slack))
    assert "<" not in rendered
    assert ">" not in rendered
    assert len(slack["text"]) <= 3000
    for block in slack["blocks"]:
        if "text" in block:
            assert len(block["text"]["text"]) <= 3000
        for field in block.get("fields", ()):
            assert len(field["text"]) <= 2000
    json.dumps(slack)  # a body the sender can post as it is


def test_slack_escaping_is_the_three_characters_slack_names() -> None:
    assert slack_escape("<!channel> & <http://x|y>") == "&lt;!channel&gt; &amp; &lt;http://x|y&gt;"


# --- PagerDuty -------------------------------------------------------------------------------


def test_a_pagerduty_event_is_a_trigger_with_the_runs_dedup_key_and_no_routing_key() -> None:
    event = pagerduty_event(run(), link=LINK, severity="critical")
    assert "routing_key" not in event
    assert event["event_action"] == "trigger"
    assert event["dedup_key"] == "wm-7f0c2f5e-1111-2222-3333-444455556666"
    payload = event["payload"]
    assert payload["summary"] == (
        "Pipeline nightly load (v3) run p-1-v3-abc failed after 2m 05s at step load (tenant acme)"
    )
    assert payload["source"] == "host-1/kubeopera-data-acme"
    assert payload["severity"] == "critical"
    assert payload["timestamp"] == "2026-03-01T12:00:05Z"
    assert payload["component"] == "nightly load"
    assert payload["group"] == "acme"
    assert payload["custom_details"] == {
        "pipeline": "nightly load",
        "pipeline_id": "p1",
        "version": 3,
        "run": "p-1-v3-abc",
        "namespace": "kubeopera-data-acme",
        "cluster": "host-1",
        "phase": "Failed",
        "duration": "2m 05s",
        "failed_step": "load",
        "failed_steps": 1,
        "message": "Error (exit code 1)",
    }
    assert event["links"] == [{"href": LINK, "text": "The run in workflow-manager"}]
    assert event["client_url"] == LINK
    sent = with_routing_key(event, "R0UTING")
    assert sent["routing_key"] == "R0UTING"
    assert {k: v for k, v in sent.items() if k != "routing_key"} == event


def test_a_pagerduty_event_without_link_or_finish_time_leaves_them_out() -> None:
    event = pagerduty_event(
        run(RunPhase.SUCCEEDED, finished_at=None, message=None), link=None, severity="info"
    )
    assert "links" not in event
    assert "client_url" not in event
    assert "timestamp" not in event["payload"]
    assert "failed_step" not in event["payload"]["custom_details"]
    assert "message" not in event["payload"]["custom_details"]


@given(pipeline=st.text(max_size=3000), step=st.text(max_size=3000), uid=st.text(max_size=400))
def test_pagerduty_limits_hold_for_any_names(pipeline: str, step: str, uid: str) -> None:
    event = pagerduty_event(
        run(pipeline_name=pipeline, uid=uid, failed_step=FailedStep(step, None)),
        link=None,
        severity="error",
    )
    assert len(event["payload"]["summary"]) <= MAX_SUMMARY
    assert len(event["dedup_key"]) <= 255
    assert event["dedup_key"] == dedup_key(uid)
    json.dumps(event)


# --- the failed step, durations, links ------------------------------------------------------


def node(node_id: str, phase: str, **fields: Any) -> dict[str, Any]:
    return {"id": node_id, "name": node_id, "type": "Pod", "phase": phase, **fields}


def test_the_failed_step_is_the_earliest_failed_leaf_and_retry_suffixes_are_dropped() -> None:
    graph = {
        "nodes": [
            node("wf", "Failed", type="DAG", children=["a", "b", "r"]),
            node("a", "Succeeded", finishedAt="2026-03-01T12:00:01Z"),
            node("b", "Failed", displayName="load", finishedAt="2026-03-01T12:00:04Z", message="x"),
            node("r", "Failed", type="Retry", children=["r0", "r1"]),
            node("r0", "Failed", displayName="extract(0)", finishedAt="2026-03-01T12:00:02Z"),
            node("r1", "Error", displayName="extract(1)", finishedAt="2026-03-01T12:00:03Z"),
        ]
    }
    steps = failed_steps(graph, workflow="wf")
    assert [s.name for s in steps] == ["extract", "extract", "load"]
    assert steps[2].message == "x"


def test_a_truncated_graph_without_failed_leaves_names_a_failed_node_but_not_the_root() -> None:
    graph = {
        "nodes": [
            node("wf", "Failed", type="DAG", children=["t"]),
            node("t", "Failed", type="TaskGroup", displayName="stage", children=["gone"]),
        ]
    }
    assert failed_steps(graph, workflow="wf") == [FailedStep("stage", None)]
    assert failed_steps({"nodes": [node("wf", "Failed")]}, workflow="wf") == [
        FailedStep("wf", None)
    ]  # a one-pod workflow: the root is the step
    assert failed_steps({}, workflow="wf") == []
    assert failed_steps({"nodes": None}, workflow="wf") == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(
    nodes=st.lists(
        st.dictionaries(
            st.sampled_from(
                ["id", "name", "displayName", "phase", "children", "finishedAt", "message", "type"]
            ),
            _JSON | st.sampled_from(["Failed", "Error"]),
            max_size=8,
        ),
        max_size=10,
    )
)
def test_failed_steps_never_fail_on_a_hostile_graph(nodes: list[dict[str, Any]]) -> None:
    for step in failed_steps({"nodes": nodes}, workflow="wf"):
        assert isinstance(step.name, str)
        assert len(step.name) <= 200


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "unknown"),
        (-1.0, "unknown"),
        (float("nan"), "unknown"),
        (float("inf"), "unknown"),
        (0.0, "0s"),
        (0.4, "0s"),
        (45.0, "45s"),
        (59.6, "1m 00s"),
        (125.0, "2m 05s"),
        (3600.0, "1h 00m"),
        (3725.0, "1h 02m"),
        (90061.0, "1d 1h"),
    ],
)
def test_durations_read_like_a_person_writes_them(seconds: float | None, shown: str) -> None:
    assert format_duration(seconds) == shown


def test_the_run_link_is_the_api_path_under_public_ui_url_with_segments_quoted() -> None:
    assert run_link(None, cluster_id="c", namespace="n", name="r") is None
    assert run_link("", cluster_id="c", namespace="n", name="r") is None
    assert (
        run_link("https://ui.example/wm/", cluster_id="host-1:a", namespace="ns", name="r/x")
        == "https://ui.example/wm/workflows/host-1%3Aa/ns/r%2Fx"
    )


# --- planning --------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", list(RunPhase))
@pytest.mark.parametrize("on", ["failure", "success", "always"])
def test_which_phases_each_condition_matches(on: Any, phase: RunPhase) -> None:
    expected = {
        "failure": {RunPhase.FAILED, RunPhase.ERROR},
        "success": {RunPhase.SUCCEEDED},
        "always": {RunPhase.FAILED, RunPhase.ERROR, RunPhase.SUCCEEDED},
    }[on]
    assert matches(on, phase) is (phase in expected)


def test_a_plan_has_one_delivery_per_matching_channel_rendered_for_its_type() -> None:
    success_only = SlackChannel(name="wins", type="slack", secret="hook", key="u", on="success")
    planned = plan(run(), [SLACK, PAGER, success_only], ui_url="https://ui.example")
    assert [(p.channel, p.type, p.secret, p.key) for p in planned] == [
        ("ops", "slack", "hook", "url"),
        ("pager", "pagerduty", "pd", "routing_key"),
    ]
    assert planned[0].message == slack_message(run(), link=LINK)
    assert planned[1].message == pagerduty_event(run(), link=LINK, severity="critical")
    succeeded = plan(run(RunPhase.SUCCEEDED), [SLACK, PAGER, success_only], ui_url=None)
    assert [p.channel for p in succeeded] == ["ops", "wins"]


def test_recorded_channels_are_read_back_and_unreadable_ones_are_reported() -> None:
    recorded = {"notifications": [SLACK.model_dump(), PAGER.model_dump()]}
    assert channels_of(recorded) == [SLACK, PAGER]
    assert channels_of({}) == []
    assert channels_of({"notifications": None}) == []
    with pytest.raises(UnreadableChannels):
        channels_of({"notifications": [{"name": "x", "type": "teams"}]})


def test_the_failed_step_is_read_from_the_graph_of_failed_runs_only() -> None:
    graph = {"nodes": [node("wf", "Failed", type="DAG", children=["b"]), node("b", "Failed")]}
    bare = replace(run(), failed_step=None, failed_steps=0)
    assert with_failed_step(bare, graph).failed_step == FailedStep("b", None)
    assert with_failed_step(bare, {}).failed_step is None
    succeeded = run(RunPhase.SUCCEEDED)
    assert with_failed_step(succeeded, graph) is succeeded


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.slack.com/services/T0/B0/x", True),
        ("  https://hooks.slack.com/services/T0/B0/x\n", True),
        ("https://hooks.slack.com.evil.example/services/x", False),
        ("https://evil.example/https://hooks.slack.com/", False),
        ("http://hooks.slack.com/services/x", False),
        ("https://user:pw@hooks.slack.com/services/x", False),
        ("ftp://hooks.slack.com/services/x", False),
        ("hooks.slack.com/services/x", False),
        ("http://10.0.0.1:2746/api/v1/workflows", False),
        ("", False),
    ],
)
def test_only_webhooks_under_the_allowed_prefixes_are_posted_to(url: str, allowed: bool) -> None:
    problem = webhook_url_problem(url, ["https://hooks.slack.com/"])
    assert (problem is None) is allowed
    if problem is not None:
        assert "slack.com" not in problem  # the reason never repeats the URL
        assert "10.0.0.1" not in problem
