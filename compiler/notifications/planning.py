"""Which channels a finished run tells, and what each delivery carries.

Purely computational, no side effects. The sender calls ``plan`` for every run change it reads
that finished a run of a pipeline (the version the run was started from: its settings hold the
channels, ``shared.pipelines.Notifications``) and inserts what it returns, once per run,
channel and kind, in the transaction that moves its cursor past the change.

- Slack: a message when the run's phase meets the channel's ``on``.
- PagerDuty pages on failures only: a ``trigger`` when the run ended ``Failed`` or ``Error``
  (whatever ``on`` a version saved before that rule recorded), and a ``resolve`` with the same
  dedup key when a run whose failure was told (the channel is in ``notified``) succeeds,
  which a run does when it is retried in place (the same uid: Failed, Running, Succeeded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import TypeAdapter, ValidationError

from compiler.notifications.rendering import (
    FinishedRun,
    failed_steps,
    pagerduty_event,
    pagerduty_resolve,
    run_link,
    slack_message,
)
from shared.pipelines import Notifications, NotifyOn, PagerDutyChannel, SlackChannel
from shared.runs import RunPhase

ChannelType = Literal["slack", "pagerduty"]
DeliveryKind = Literal["notify", "resolve"]
_CHANNELS: Final = TypeAdapter(Notifications)


@dataclass(frozen=True, slots=True)
class PlannedDelivery:
    """One message for one channel: where its secret is and what it says."""

    channel: str
    type: ChannelType
    secret: str
    key: str
    message: dict[str, Any]
    kind: DeliveryKind = "notify"


class UnreadableChannels(ValueError):
    """A version's recorded channels no longer parse (never expected: they were validated when
    the version was saved); the run's notifications are skipped and the reason logged."""


def matches(on: NotifyOn, phase: RunPhase) -> bool:
    """Whether a channel set to ``on`` is told of a run that finished in ``phase``."""
    if not phase.finished:
        return False
    if on == "always":
        return True
    return (phase is RunPhase.SUCCEEDED) == (on == "success")


def channels_of(settings: Mapping[str, Any]) -> list[SlackChannel | PagerDutyChannel]:
    """The channels a version recorded (``pipeline_versions.settings["notifications"]``)."""
    recorded = settings.get("notifications")
    if not recorded:
        return []
    try:
        return list(_CHANNELS.validate_python(recorded))
    except ValidationError as exc:
        raise UnreadableChannels(
            f"{exc.error_count()} problem(s) in the recorded channels"
        ) from exc


def with_failed_step(run: FinishedRun, graph: Mapping[str, Any]) -> FinishedRun:
    """``run`` naming the step it failed at, read from its graph (a failed run only)."""
    if run.phase is RunPhase.SUCCEEDED:
        return run
    steps = failed_steps(graph, workflow=run.name)
    if not steps:
        return run
    return replace(run, failed_step=steps[0], failed_steps=len(steps))


def plan(
    run: FinishedRun,
    channels: list[SlackChannel | PagerDutyChannel],
    *,
    ui_url: str | None,
    notified: frozenset[str] = frozenset(),
) -> list[PlannedDelivery]:
    """The deliveries of ``run``: one per channel whose condition its phase meets, and a
    resolve for each PagerDuty channel in ``notified`` (told of the run's failure) when it
    succeeded."""
    link = run_link(ui_url, cluster_id=run.cluster_id, namespace=run.namespace, name=run.name)
    planned = []
    for channel in channels:
        kind: DeliveryKind = "notify"
        if isinstance(channel, SlackChannel):
            if not matches(channel.on, run.phase):
                continue
            message = slack_message(run, link=link)
        elif matches("failure", run.phase):
            message = pagerduty_event(run, link=link, severity=channel.severity)
        elif run.phase is RunPhase.SUCCEEDED and channel.name in notified:
            kind = "resolve"
            message = pagerduty_resolve(run, link=link)
        else:
            continue
        planned.append(
            PlannedDelivery(channel.name, channel.type, channel.secret, channel.key, message, kind)
        )
    return planned


def webhook_url_problem(url: str, allowed_prefixes: Sequence[str]) -> str | None:
    """Why a Slack webhook URL read from a tenant's secret may not be posted to (None: it may).

    The URL is the tenant's: without this a tenant could make the compiler POST into the
    cluster's own network. Only URLs under SLACK_WEBHOOK_URL_PREFIXES (Slack's own host by
    default) are used; the reason never repeats the URL, which is a credential.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return "the webhook URL in the channel's secret is not an http(s) URL"
    if parts.username or parts.password:
        return "the webhook URL in the channel's secret carries credentials"
    if not any(url.strip().startswith(prefix) for prefix in allowed_prefixes if prefix):
        return (
            "the webhook URL in the channel's secret is not a Slack webhook "
            "(it must start with one of SLACK_WEBHOOK_URL_PREFIXES)"
        )
    return None
