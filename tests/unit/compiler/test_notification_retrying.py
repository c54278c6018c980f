"""compiler.notifications.retrying: what each answer (or its absence) does to a delivery."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.notifications.planning import ChannelType
from compiler.notifications.retrying import (
    BACKOFF_CAP,
    MAX_AGE,
    MAX_ATTEMPTS,
    MAX_RETRY_AFTER,
    SECRET_RETRY,
    Outcome,
    after_answer,
    after_fault,
    after_no_answer,
    after_secret_unreadable,
    backoff,
    retry_after,
    shown_body,
)


def answer(
    status: int,
    body: str = "",
    header: str | None = None,
    channel: ChannelType = "pagerduty",
    **kw: float,
) -> Outcome:
    values = {"attempts": 1, "age": 0.0, "jitter": 0.5, **kw}
    return after_answer(
        channel,
        status=status,
        body=body,
        retry_after_header=header,
        attempts=int(values["attempts"]),
        age=values["age"],
        jitter=values["jitter"],
    )


@pytest.mark.parametrize("channel", ["slack", "pagerduty"])
@pytest.mark.parametrize("status", [200, 201, 202, 204])
def test_any_2xx_is_sent(status: int, channel: ChannelType) -> None:
    assert answer(status, "ok", channel=channel) == Outcome("sent")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, "invalid_payload"),
        (403, "action_prohibited"),
        (404, "channel_not_found"),
        (410, "channel_is_archived"),
        (301, ""),
        (401, '{"status":"unauthorized"}'),
    ],
)
def test_other_answers_fail_for_good_with_status_and_body(status: int, body: str) -> None:
    outcome = answer(status, body)
    assert outcome.state == "failed"
    assert outcome.error == (f"HTTP {status}: {body}" if body else f"HTTP {status}")


@pytest.mark.parametrize(
    ("status", "body"), [(429, "rate_limited"), (500, "rollup_error"), (503, "")]
)
def test_429_and_5xx_are_tried_again_after_a_backoff(status: int, body: str) -> None:
    outcome = answer(status, body, attempts=3, jitter=0.0)
    assert outcome.state == "pending"
    assert outcome.retry_in == backoff(3, 0.0) == 4.0
    assert outcome.error is not None
    assert outcome.error.startswith(f"HTTP {status}")


@pytest.mark.parametrize(
    ("status", "body"),
    [(500, "rollup_error"), (502, "Bad Gateway"), (503, ""), (504, "upstream timed out")],
)
def test_a_slack_5xx_is_unconfirmed_since_a_proxy_may_answer_it_after_slack_posted(
    status: int, body: str
) -> None:
    outcome = answer(status, body, channel="slack", attempts=1)
    assert outcome.state == "unconfirmed"
    assert outcome.retry_in == 0.0
    assert outcome.error is not None
    assert outcome.error.startswith(f"HTTP {status}")
    assert outcome.error.endswith("is not sent again (Slack has no idempotency key)")


def test_a_slack_429_was_not_processed_and_is_tried_again_after_retry_after() -> None:
    outcome = answer(429, "rate_limited", "7", channel="slack", jitter=0.0)
    assert (outcome.state, outcome.retry_in) == ("pending", 7.0)


@pytest.mark.parametrize("status", [400, 403, 404, 410, 301])
def test_other_slack_answers_fail_for_good(status: int) -> None:
    assert answer(status, "x", channel="slack").state == "failed"


def test_retry_after_is_honoured_as_a_floor() -> None:
    assert answer(429, header="30", attempts=1, jitter=1.0).retry_in == 30.0
    assert answer(429, header="1", attempts=6, jitter=1.0).retry_in == backoff(6, 1.0)
    assert answer(503, header="120").retry_in == 120.0
    assert answer(429, header="soon").retry_in == backoff(1, 0.5)
    assert answer(429, header="99999").retry_in == MAX_RETRY_AFTER


def test_tries_stop_at_the_attempt_limit_or_the_age_limit() -> None:
    assert answer(500, attempts=MAX_ATTEMPTS - 1).state == "pending"
    last = answer(500, "rollup_error", attempts=MAX_ATTEMPTS)
    assert last == Outcome(
        "failed", f"gave up after {MAX_ATTEMPTS} attempts: HTTP 500: rollup_error"
    )
    old = answer(429, attempts=2, age=MAX_AGE - 1.0)
    assert old.state == "failed"
    assert old.error == "gave up after 24h: HTTP 429"
    assert answer(429, attempts=2, age=MAX_AGE - 100.0, jitter=0.0).state == "pending"


@pytest.mark.parametrize(
    ("channel", "reached", "state"),
    [
        ("slack", False, "pending"),
        ("slack", True, "unconfirmed"),
        ("pagerduty", False, "pending"),
        ("pagerduty", True, "pending"),
    ],
)
def test_no_answer_resends_unless_a_slack_message_may_have_been_posted(
    channel: str, reached: bool, state: str
) -> None:
    outcome = after_no_answer(
        channel,  # type: ignore[arg-type]
        reached=reached,
        error="no answer (ServerDisconnectedError)",
        attempts=1,
        age=0.0,
        jitter=0.5,
    )
    assert outcome.state == state
    assert outcome.error is not None
    assert outcome.error.startswith("no answer (ServerDisconnectedError)")
    if state == "unconfirmed":
        assert "not sent again" in outcome.error


def test_no_answer_gives_up_like_any_retry() -> None:
    outcome = after_no_answer(
        "pagerduty", reached=True, error="no answer", attempts=MAX_ATTEMPTS, age=0.0, jitter=0.5
    )
    assert outcome.state == "failed"


def test_an_unreadable_secret_waits_at_least_its_own_delay_and_counts_no_attempt() -> None:
    outcome = after_secret_unreadable(attempts=0, age=0.0, jitter=0.0)
    assert outcome.state == "pending"
    assert outcome.retry_in == SECRET_RETRY
    assert after_secret_unreadable(attempts=0, age=MAX_AGE, jitter=0.0).state == "failed"


def test_a_fault_of_ours_before_any_request_waits_and_counts_no_attempt() -> None:
    outcome = after_fault(
        "the delivery could not be prepared (KeyError)", attempts=2, age=0.0, jitter=0.0
    )
    assert outcome == Outcome(
        "pending", "the delivery could not be prepared (KeyError)", SECRET_RETRY
    )
    assert after_fault("x", attempts=0, age=MAX_AGE, jitter=0.0).state == "failed"


@pytest.mark.parametrize(
    ("attempt", "jitter", "delay"),
    [(0, 0.0, 1.0), (1, 0.0, 1.0), (1, 1.0, 2.0), (2, 1.0, 4.0), (5, 1.0, 32.0), (40, 1.0, 600.0)],
)
def test_backoff_doubles_from_two_seconds_to_ten_minutes(
    attempt: int, jitter: float, delay: float
) -> None:
    assert backoff(attempt, jitter) == delay


@given(attempt=st.integers(min_value=-5, max_value=10_000), jitter=st.floats(-1, 2))
def test_backoff_stays_between_half_and_all_of_its_step_and_never_exceeds_the_cap(
    attempt: int, jitter: float
) -> None:
    delay = backoff(attempt, jitter)
    assert BACKOFF_CAP / 2 >= delay / 2 > 0
    assert delay <= BACKOFF_CAP
    assert backoff(attempt + 1, 1.0) >= backoff(attempt, 1.0)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("30", 30.0),
        (" 1.5 ", 1.5),
        ("-3", None),
        ("nan", None),
        ("inf", None),
        ("Wed, 21 Oct 2026 07:28:00 GMT", None),
        ("7200", MAX_RETRY_AFTER),
    ],
)
def test_retry_after_is_read_in_seconds(header: str | None, seconds: float | None) -> None:
    assert retry_after(header) == seconds


@given(st.text(max_size=1000))
def test_a_shown_body_is_printable_and_short(body: str) -> None:
    shown = shown_body(body)
    assert len(shown) <= 200
    assert shown.isprintable()
