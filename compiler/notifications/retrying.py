"""What happens to a delivery after each attempt: sent, tried again later, or given up.

Purely computational, no side effects (jitter comes in as a number, the clock as an age). The
rules (docs/operations.md, "Run notifications"):

- 2xx: sent. 429: tried again after an exponential backoff with jitter, never sooner than
  the answer's ``Retry-After`` (seconds): a 429 is a refusal to process the request, by
  Slack or by a proxy before it. A 5xx: PagerDuty is tried again like a 429; Slack is
  ``unconfirmed`` (a proxy's 502/504 may come after Slack posted the message). Any other
  answer (400 ``invalid_payload``, 403, 404 ``channel_not_found``, 410
  ``channel_is_archived``, a redirect): failed for good.
- A request that certainly never reached the receiver (connection refused, DNS, TLS, connect
  timeout: no byte of it was sent) is tried again, for either channel type.
- A request that may have reached it with no answer back (a timeout or a reset after it was
  written, or a sender that stopped meanwhile): PagerDuty is tried again (the run's dedup key
  makes a repeat harmless); Slack is ``unconfirmed`` and never sent again, since Slack has no
  idempotency key and a second message is what we promise never to post.
- Tries stop after ``MAX_ATTEMPTS`` requests or when the next would start more than ``MAX_AGE``
  after the delivery was enqueued: failed, with the last reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from compiler.notifications.planning import ChannelType

MAX_ATTEMPTS: Final = 10
MAX_AGE: Final = 24 * 3600.0
BACKOFF_BASE: Final = 2.0
BACKOFF_CAP: Final = 600.0
MAX_RETRY_AFTER: Final = 3600.0
MAX_BODY_SHOWN: Final = 200
SECRET_RETRY: Final = 30.0

SLACK_UNCONFIRMED: Final = (
    "the message may have been posted and is not sent again (Slack has no idempotency key)"
)

State = Literal["sent", "pending", "failed", "unconfirmed"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """The delivery's next state; ``retry_in`` seconds until the next try when pending."""

    state: State
    error: str | None = None
    retry_in: float = 0.0


def backoff(attempt: int, jitter: float) -> float:
    """Seconds before try ``attempt + 1`` after ``attempt`` tries: 2, 4, 8 … capped at 600,
    each scaled by ``0.5 + jitter / 2`` (``jitter`` in [0, 1]) so that many deliveries failing
    together do not come back together."""
    exponent = min(max(attempt, 1) - 1, 32)
    delay = min(BACKOFF_CAP, BACKOFF_BASE * 2.0**exponent)
    return delay * (0.5 + min(max(jitter, 0.0), 1.0) / 2)


def retry_after(header: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (Slack and PagerDuty send seconds), at most an hour;
    None when absent or not a number of seconds."""
    if header is None:
        return None
    try:
        seconds = float(header.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER)


def shown_body(body: str) -> str:
    """A receiver's answer as kept in ``last_error``: printable, at most 200 characters."""
    text = "".join(ch if ch.isprintable() else " " for ch in body).strip()
    return text if len(text) <= MAX_BODY_SHOWN else text[: MAX_BODY_SHOWN - 1] + "…"


def _again(
    error: str, *, attempts: int, age: float, jitter: float, at_least: float | None = None
) -> Outcome:
    delay = max(backoff(attempts, jitter), at_least or 0.0)
    if attempts >= MAX_ATTEMPTS:
        return Outcome("failed", f"gave up after {attempts} attempts: {error}")
    if age + delay > MAX_AGE:
        return Outcome("failed", f"gave up after {format_age(MAX_AGE)}: {error}")
    return Outcome("pending", error, delay)


def after_answer(
    channel: ChannelType,
    *,
    status: int,
    body: str,
    retry_after_header: str | None,
    attempts: int,
    age: float,
    jitter: float,
) -> Outcome:
    """The outcome of an attempt the receiver answered (``attempts`` counts it)."""
    if 200 <= status < 300:
        return Outcome("sent")
    error = f"HTTP {status}"
    shown = shown_body(body)
    if shown:
        error += f": {shown}"
    if status >= 500 and channel == "slack":
        return Outcome("unconfirmed", f"{error}; {SLACK_UNCONFIRMED}")
    if status == 429 or status >= 500:
        wait = retry_after(retry_after_header)
        return _again(error, attempts=attempts, age=age, jitter=jitter, at_least=wait)
    return Outcome("failed", error)


def after_no_answer(
    channel: ChannelType,
    *,
    reached: bool,
    error: str,
    attempts: int,
    age: float,
    jitter: float,
) -> Outcome:
    """The outcome of an attempt that got no answer. ``reached``: the request may have
    arrived (it was written, or the sender stopped while it was in flight)."""
    if reached and channel == "slack":
        return Outcome("unconfirmed", f"{error}; {SLACK_UNCONFIRMED}")
    return _again(error, attempts=attempts, age=age, jitter=jitter)


def after_secret_unreadable(*, attempts: int, age: float, jitter: float) -> Outcome:
    """The channel's secret could not be read for now (the Kubernetes API did not answer):
    tried again after at least ``SECRET_RETRY`` seconds, no attempt counted."""
    return _again(
        "the channel's secret could not be read (Kubernetes API unavailable)",
        attempts=attempts,
        age=age,
        jitter=jitter,
        at_least=SECRET_RETRY,
    )


def after_fault(error: str, *, attempts: int, age: float, jitter: float) -> Outcome:
    """An error of ours before any request (nothing was sent): tried again after at least
    ``SECRET_RETRY`` seconds, no attempt counted, so that a fault that repeats is neither
    tried in a loop nor forever."""
    return _again(error, attempts=attempts, age=age, jitter=jitter, at_least=SECRET_RETRY)


def format_age(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:g}h" if hours >= 1 else f"{seconds:g}s"
