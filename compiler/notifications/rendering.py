"""What a finished run's notification says: the Slack message and the PagerDuty event.

Purely computational, no side effects. The sender renders each delivery once, when it enqueues
it (``compiler.notifications.planning``), from the run as the change that finished it found
it; the secret parts (the webhook URL, the routing key) are never part of what is rendered
here: the routing key is added to the event only when it is sent.

Everything a tenant controls (pipeline and step names, messages Argo copied from their
containers) is escaped for Slack's mrkdwn (``&``, ``<``, ``>``), so a run cannot ping
``<!channel>`` or hide a link in a message, and cut to Slack's and PagerDuty's field limits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

from shared.runs import RunPhase

# Slack: a section's text ≤ 3000 characters, a field's ≤ 2000; PagerDuty: summary ≤ 1024.
MAX_MESSAGE: Final = 500
MAX_NAME: Final = 200
MAX_SUMMARY: Final = 1024
DEDUP_PREFIX: Final = "wm-"
_RETRY_ATTEMPT: Final = re.compile(r"\(\d+\)$")
_FAILED: Final = frozenset({"Failed", "Error"})
_EMOJI: Final = {
    RunPhase.SUCCEEDED: ":white_check_mark:",
    RunPhase.FAILED: ":x:",
    RunPhase.ERROR: ":warning:",
}
_VERB: Final = {
    RunPhase.SUCCEEDED: "succeeded",
    RunPhase.FAILED: "failed",
    RunPhase.ERROR: "errored",
}


@dataclass(frozen=True, slots=True)
class FailedStep:
    """The step a failed run failed at: the earliest failed leaf of its graph."""

    name: str
    message: str | None


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A finished run of a pipeline, as the notification tells it."""

    cluster_id: str
    namespace: str
    name: str
    uid: str
    tenant: str
    phase: RunPhase
    pipeline_id: str
    pipeline_name: str
    pipeline_version: int
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None
    message: str | None
    failed_step: FailedStep | None = None
    failed_steps: int = 0  # how many steps failed in all


def cut(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def failed_steps(graph: Mapping[str, Any], *, workflow: str) -> list[FailedStep]:
    """The failed steps of a run graph (docs/normalisation.md, "The graph"), earliest first.

    A step is a failed leaf (a node without children: a pod, a suspend, a retry's attempt);
    when the graph kept no failed leaf (a truncated graph), any failed node but the root. A
    retry attempt's ``(N)`` suffix is dropped, so the step reads as the wizard names it.
    """
    nodes = [node for node in graph.get("nodes") or () if isinstance(node, Mapping)]
    failed = [node for node in nodes if str(node.get("phase")) in _FAILED]
    leaves = [node for node in failed if not node.get("children")]
    chosen = leaves or [
        node for node in failed if workflow not in (node.get("id"), node.get("name"))
    ]
    chosen.sort(key=lambda node: (str(node.get("finishedAt") or "~"), str(node.get("id") or "")))
    steps = []
    for node in chosen:
        label = node.get("displayName") or node.get("name") or node.get("id")
        name = _RETRY_ATTEMPT.sub("", str(label or "?")) or str(label)
        message = node.get("message")
        steps.append(FailedStep(cut(name, MAX_NAME), str(message) if message else None))
    return steps


def format_duration(seconds: float | None) -> str:
    """``45s``, ``2m 05s``, ``1h 02m``, ``3d 4h``; ``unknown`` without a duration."""
    if seconds is None or not 0 <= seconds < 1e12:
        return "unknown"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def run_link(ui_url: str | None, *, cluster_id: str, namespace: str, name: str) -> str | None:
    """The run's page in the UI: ``<PUBLIC_UI_URL>/workflows/<cluster>/<namespace>/<name>``
    (the API's path for the same run); None when PUBLIC_UI_URL is unset."""
    if not ui_url:
        return None
    parts = "/".join(quote(part, safe="") for part in (cluster_id, namespace, name))
    return f"{ui_url.rstrip('/')}/workflows/{parts}"


def slack_escape(text: str) -> str:
    """Text safe in Slack's mrkdwn: the three control characters escaped as Slack asks, so a
    tenant's text can neither mention ``<!channel>`` nor make a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    return "`" + slack_escape(text.replace("`", "'")) + "`"


def _headline(run: FinishedRun) -> str:
    return (
        f"Pipeline {run.pipeline_name} (v{run.pipeline_version}) run {run.name} "
        f"{_VERB[run.phase]} after {format_duration(run.duration_seconds)}"
    )


def _step_message(run: FinishedRun) -> str | None:
    text = (run.failed_step.message if run.failed_step else None) or run.message
    return cut(text, MAX_MESSAGE) if text else None


def slack_message(run: FinishedRun, *, link: str | None) -> dict[str, Any]:
    """The body posted to the channel's incoming webhook: ``text`` (the notification and the
    fallback) and ``blocks``."""
    pipeline = slack_escape(cut(run.pipeline_name, MAX_NAME))
    title = f"*<{slack_escape(link)}|{pipeline}>*" if link else f"*{pipeline}*"
    headline = (
        f"{_EMOJI[run.phase]} Pipeline {title} (v{run.pipeline_version}) run {_code(run.name)} "
        f"*{_VERB[run.phase]}* after {format_duration(run.duration_seconds)}"
    )
    step = run.failed_step
    text = headline
    if step is not None:
        text += f" at step {_code(step.name)}"
    fields = [
        f"*Phase*\n{run.phase.value}",
        f"*Duration*\n{format_duration(run.duration_seconds)}",
        f"*Tenant*\n{slack_escape(run.tenant)}",
        f"*Run*\n{_code(run.namespace + '/' + run.name)}",
    ]
    if step is not None:
        more = f" (and {run.failed_steps - 1} more)" if run.failed_steps > 1 else ""
        fields.append(f"*Failed step*\n{_code(step.name)}{more}")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, 3000)}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
    ]
    message = _step_message(run)
    if message and run.phase is not RunPhase.SUCCEEDED:
        quoted = slack_escape(message.replace("```", "'''"))
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{quoted}```"}})
    context = f"cluster {slack_escape(run.cluster_id)}"
    if run.finished_at is not None:
        context += f" · finished {_timestamp(run.finished_at)}"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
    if link:
        text += f" · <{slack_escape(link)}|open the run>"
    return {"text": cut(text, 3000), "blocks": blocks}


def dedup_key(run_uid: str) -> str:
    """PagerDuty's dedup key for a run: the same on every resend, so a resend is appended to
    the incident it opened instead of opening another."""
    return (DEDUP_PREFIX + run_uid)[:255]


def _details(run: FinishedRun) -> dict[str, Any]:
    return {
        "pipeline": run.pipeline_name,
        "pipeline_id": run.pipeline_id,
        "version": run.pipeline_version,
        "run": run.name,
        "namespace": run.namespace,
        "cluster": run.cluster_id,
        "phase": run.phase.value,
        "duration": format_duration(run.duration_seconds),
    }


def pagerduty_event(run: FinishedRun, *, link: str | None, severity: str) -> dict[str, Any]:
    """The Events API v2 ``trigger`` for the run, without ``routing_key`` (added when sent)."""
    summary = _headline(run)
    if run.failed_step is not None:
        summary += f" at step {run.failed_step.name}"
    summary += f" (tenant {run.tenant})"
    details = _details(run)
    if run.failed_step is not None:
        details["failed_step"] = run.failed_step.name
        details["failed_steps"] = run.failed_steps
    message = _step_message(run)
    if message:
        details["message"] = message
    payload: dict[str, Any] = {
        "summary": cut(summary, MAX_SUMMARY),
        "source": f"{run.cluster_id}/{run.namespace}",
        "severity": severity,
        "component": cut(run.pipeline_name, MAX_NAME),
        "group": run.tenant,
        "class": "pipeline run",
        "custom_details": details,
    }
    if run.finished_at is not None:
        payload["timestamp"] = _timestamp(run.finished_at)
    event: dict[str, Any] = {
        "event_action": "trigger",
        "dedup_key": dedup_key(run.uid),
        "payload": payload,
        "client": "workflow-manager",
    }
    if link:
        event["client_url"] = link
        event["links"] = [{"href": link, "text": "The run in workflow-manager"}]
    return event


def pagerduty_resolve(run: FinishedRun, *, link: str | None) -> dict[str, Any]:
    """The Events API v2 ``resolve`` of the incident the run's failure opened (the same dedup
    key), sent when the run, retried in place, succeeded. PagerDuty needs only the action and
    the key; the payload states the phase the run finished with for the incident's log."""
    summary = f"{_headline(run)}, retried in place: resolved (tenant {run.tenant})"
    event: dict[str, Any] = {
        "event_action": "resolve",
        "dedup_key": dedup_key(run.uid),
        "payload": {
            "summary": cut(summary, MAX_SUMMARY),
            "source": f"{run.cluster_id}/{run.namespace}",
            "severity": "info",
            "component": cut(run.pipeline_name, MAX_NAME),
            "group": run.tenant,
            "class": "pipeline run",
            "custom_details": _details(run),
        },
        "client": "workflow-manager",
    }
    if run.finished_at is not None:
        event["payload"]["timestamp"] = _timestamp(run.finished_at)
    if link:
        event["client_url"] = link
    return event


def with_routing_key(event: Mapping[str, Any], routing_key: str) -> dict[str, Any]:
    """The event as sent: the channel's routing key first, read from its secret at send time."""
    return {"routing_key": routing_key, **event}


def _timestamp(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
