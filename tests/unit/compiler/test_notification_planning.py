"""compiler.notifications.planning: which deliveries a finished run makes, PagerDuty's above
all: a trigger per failure whatever ``on`` a version recorded, and a resolve with the same dedup
key when a run whose failure was told succeeds (a run retried in place)."""

from __future__ import annotations

from typing import Any

import pytest

from compiler.notifications.planning import plan
from compiler.notifications.rendering import (
    MAX_SUMMARY,
    dedup_key,
    pagerduty_event,
    pagerduty_resolve,
)
from shared.pipelines import PagerDutyChannel, SlackChannel
from shared.runs import RunPhase
from tests.unit.compiler.test_notification_rendering import LINK, run

UI = "https://ui.example"
FAILURES = (RunPhase.FAILED, RunPhase.ERROR)


def pager(on: Any = "failure") -> PagerDutyChannel:
    return PagerDutyChannel.model_construct(
        name="pager", type="pagerduty", secret="pd", key="routing_key", on=on, severity="error"
    )


@pytest.mark.parametrize("notified", [frozenset(), frozenset({"pager"}), frozenset({"other"})])
@pytest.mark.parametrize("on", ["failure", "success", "always"])
@pytest.mark.parametrize("phase", list(RunPhase))
def test_pagerduty_triggers_on_failures_and_resolves_a_told_failure_on_success(
    phase: RunPhase, on: Any, notified: frozenset[str]
) -> None:
    """``on`` other than failure comes only from versions saved before saves refused it."""
    planned = plan(run(phase), [pager(on)], ui_url=UI, notified=notified)
    if phase in FAILURES:
        expected = [("notify", "trigger")]
    elif phase is RunPhase.SUCCEEDED and "pager" in notified:
        expected = [("resolve", "resolve")]
    else:
        expected = []
    assert [(p.kind, p.message["event_action"]) for p in planned] == expected
    assert all(
        (p.channel, p.type, p.secret, p.key) == ("pager", "pagerduty", "pd", "routing_key")
        for p in planned
    )


@pytest.mark.parametrize("notified", [frozenset(), frozenset({"ops"})])
@pytest.mark.parametrize("phase", list(RunPhase))
def test_slack_is_never_resolved_and_told_as_its_condition_says(
    phase: RunPhase, notified: frozenset[str]
) -> None:
    channel = SlackChannel(name="ops", type="slack", secret="hook", on="always")
    planned = plan(run(phase), [channel], ui_url=UI, notified=notified)
    assert [p.kind for p in planned] == (["notify"] if phase.finished else [])


def test_the_resolve_carries_the_triggers_dedup_key_and_states_the_phase_it_finished_with() -> None:
    failed, succeeded = run(RunPhase.FAILED), run(RunPhase.SUCCEEDED)
    (trigger,) = plan(failed, [pager()], ui_url=UI)
    (resolve,) = plan(succeeded, [pager()], ui_url=UI, notified=frozenset({"pager"}))
    assert trigger.message == pagerduty_event(failed, link=LINK, severity="error")
    assert resolve.message == pagerduty_resolve(succeeded, link=LINK)
    assert resolve.message["dedup_key"] == trigger.message["dedup_key"] == dedup_key(failed.uid)
    assert "routing_key" not in resolve.message
    payload = resolve.message["payload"]
    assert payload["summary"] == (
        "Pipeline nightly load (v3) run p-1-v3-abc succeeded after 2m 05s, retried in place: "
        "resolved (tenant acme)"
    )
    assert payload["custom_details"]["phase"] == "Succeeded"
    assert payload["severity"] == "info"
    assert resolve.message["client_url"] == LINK


@pytest.mark.parametrize(
    ("phase", "verb"), [(RunPhase.FAILED, "failed"), (RunPhase.ERROR, "errored")]
)
def test_a_trigger_states_the_phase_the_run_finished_with(phase: RunPhase, verb: str) -> None:
    (trigger,) = plan(run(phase), [pager()], ui_url=None)
    payload = trigger.message["payload"]
    assert f"run p-1-v3-abc {verb} after 2m 05s" in payload["summary"]
    assert payload["custom_details"]["phase"] == phase.value


def test_a_resolve_summary_stays_in_pagerduty_limits() -> None:
    long = run(RunPhase.SUCCEEDED, pipeline_name="p" * 5000, tenant="t" * 300)
    (resolve,) = plan(long, [pager()], ui_url=None, notified=frozenset({"pager"}))
    assert len(resolve.message["payload"]["summary"]) <= MAX_SUMMARY
    assert "client_url" not in resolve.message
