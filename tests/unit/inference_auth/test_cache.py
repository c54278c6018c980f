"""The token cache's trust, freshness and fallbacks, on an injected clock (monotonic seconds
passed in): what answers, what is refused from memory, what must be read, what is served stale."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from inference_auth.cache import Entry, TokenCache
from shared.db.inference_tokens import Deployment, TokenRecord

TRUST = 0.5
STALE = 300.0
RETRY = 1.0


def _entry(token_id: int = 1, deployment_id: int = 7) -> Entry:
    deployment = Deployment(
        id=deployment_id,
        tenant="acme",
        model="churn",
        environment="production",
        host="churn-production.acme.models.example.com",
        rate_limit=None,
        token_rate_limit=None,
    )
    record = TokenRecord(
        token_id=token_id,
        lookup_id="a" * 16,
        secret_hash=b"h" * 32,
        deployment=deployment,
        expires_at=None,
        revoked_at=None,
    )
    return Entry.of(record)


def _cache() -> TokenCache:
    return TokenCache(stale_for=STALE, negative_ttl=30.0, trust_for=TRUST, retry_reads_after=RETRY)


def _listening(ids: tuple[str, ...] = ("live",), *, at: float = 100.0) -> TokenCache:
    cache = _cache()
    cache.connected()
    cache.load(ids, sent_at=at)
    return cache


def test_nothing_is_trusted_before_the_set_is_loaded() -> None:
    cache = _cache()
    assert not cache.trusted(0.0)
    cache.connected()
    cache.alive(0.0)  # a ping before the load proves nothing
    assert not cache.trusted(0.1)
    assert not cache.ever_loaded
    cache.load(["live"], sent_at=0.2)
    assert cache.trusted(0.3)
    assert cache.ever_loaded
    assert cache.known("live")
    assert not cache.known("guess")


def test_trust_lasts_trust_for_from_the_latest_proof_of_life() -> None:
    cache = _listening(at=100.0)
    assert cache.trust_left(100.1) == pytest.approx(TRUST - 0.1)
    assert cache.trust_left(101.0) == 0
    assert cache.trusted(100.0 + TRUST - 0.001)
    assert not cache.trusted(100.0 + TRUST)
    cache.alive(100.4)
    assert cache.trusted(100.4 + TRUST - 0.001)
    cache.alive(100.1)  # an older proof answered late does not shorten it
    assert cache.trusted(100.4 + TRUST - 0.001)
    assert not cache.trusted(100.4 + TRUST)


def test_a_cached_entry_answers_only_while_trusted() -> None:
    cache = _listening(at=100.0)
    entry = _entry()
    cache.put("live", entry, generation=cache.generation, now=100.1)
    assert cache.get("live", 100.2) is entry
    assert cache.get("live", 100.0 + TRUST) is None  # the LISTEN went quiet: read through
    cache.alive(101.0)
    assert cache.get("live", 101.1) is entry  # proof again: everything before was heard


def test_a_read_is_not_cached_when_untrusted_or_raced_by_a_change() -> None:
    cache = _listening(at=100.0)
    started = cache.generation
    cache.token_changed("other")
    cache.put("live", _entry(), generation=started, now=100.1)
    assert cache.get("live", 100.1) is None
    cache.put("live", _entry(), generation=cache.generation, now=100.0 + TRUST)
    cache.alive(100.6)
    assert cache.get("live", 100.7) is None


def test_new_tokens_join_the_set_also_while_loading() -> None:
    cache = _cache()
    cache.connected()
    cache.token_changed("issued-during-load")  # notified after LISTEN, before the load read
    cache.load(["old"], sent_at=1.0)
    assert cache.known("old")
    assert cache.known("issued-during-load")
    cache.token_changed("issued-later")
    assert cache.known("issued-later")


def test_a_token_heard_before_the_reconnection_is_kept_by_the_next_load() -> None:
    cache = _listening(at=1.0)
    cache.disconnected()
    cache.token_changed("heard-on-the-way-down")
    cache.connected()
    cache.load(["old"], sent_at=2.0)
    assert cache.known("heard-on-the-way-down")
    cache.disconnected()
    cache.connected()
    cache.load(["old"], sent_at=3.0)
    assert not cache.known("heard-on-the-way-down")  # not live: only kept until one load


def test_changes_drop_entries_and_negatives() -> None:
    cache = _listening(("a", "b"), at=10.0)
    cache.put("a", _entry(1, deployment_id=7), generation=cache.generation, now=10.0)
    cache.put("b", _entry(2, deployment_id=8), generation=cache.generation, now=10.0)
    cache.remember_unknown("c", 10.0)
    cache.token_changed("c")
    assert not cache.known_unknown("c", 10.1)
    cache.deployment_changed(7)
    assert cache.get("a", 10.1) is None
    assert cache.get("b", 10.1) is not None
    cache.token_changed("b")
    assert cache.get("b", 10.1) is None


def test_stale_entries_answer_for_stale_for_from_the_last_proof() -> None:
    cache = _listening(at=100.0)
    entry = _entry()
    cache.put("live", entry, generation=cache.generation, now=100.0)
    cache.disconnected()
    assert not cache.trusted(100.1)
    assert cache.stale("live", 100.0 + STALE - 0.001) is entry
    assert cache.stale("live", 100.0 + STALE) is None
    assert cache.stale("never", 101.0) is None


def test_while_reads_fail_the_stale_entry_answers_from_memory_then_one_read_probes() -> None:
    cache = _listening(at=100.0)
    entry = _entry()
    cache.put("live", entry, generation=cache.generation, now=100.0)
    cache.disconnected()
    assert cache.get("live", 101.0) is None  # untrusted, PostgreSQL not known away: read
    assert cache.start_read(101.0)
    assert cache.start_read(101.0)  # while PostgreSQL answers, every read may go
    assert cache.read_failed(101.0) is True  # news: log it once
    assert cache.read_failed(101.5) is False
    assert not cache.start_read(102.0)
    assert cache.get("live", 102.0) is entry  # the hot path serves it meanwhile
    assert cache.get("live", 101.5 + RETRY) is None  # time to try PostgreSQL again
    assert cache.start_read(101.5 + RETRY)  # the probe
    assert not cache.start_read(101.5 + RETRY)  # one at a time: the others are served stale
    assert cache.get("live", 101.5 + RETRY) is entry
    assert cache.read_succeeded() is True
    assert cache.read_succeeded() is False
    assert cache.start_read(102.6)
    assert cache.start_read(102.6)
    assert cache.get("live", 102.6) is None  # read through again


def test_a_probe_that_fails_or_is_abandoned_lets_another_try() -> None:
    cache = _listening(at=100.0)
    cache.disconnected()
    cache.read_failed(101.0)
    assert cache.start_read(101.0 + RETRY)
    cache.read_failed(101.0 + RETRY)
    assert not cache.start_read(101.5 + RETRY)
    assert cache.start_read(101.0 + 2 * RETRY)
    cache.read_abandoned()
    assert cache.start_read(101.0 + 2 * RETRY)


def test_a_load_ends_the_wait_for_reads() -> None:
    cache = _listening(at=100.0)
    cache.disconnected()
    cache.read_failed(101.0)
    assert cache.start_read(101.0 + RETRY)  # a probe out when the listener reconnects
    cache.connected()
    cache.load(["live"], sent_at=101.2)
    assert cache.start_read(101.3)
    assert cache.start_read(101.3)


def test_reads_failing_never_serve_past_stale_for() -> None:
    cache = _listening(at=100.0)
    cache.put("live", _entry(), generation=cache.generation, now=100.0)
    cache.disconnected()
    now = 100.0 + STALE + 1
    cache.read_failed(now)
    assert cache.get("live", now + 0.1) is None
    assert cache.stale("live", now + 0.1) is None


def test_reconnecting_keeps_stale_entries_until_the_set_is_loaded_again() -> None:
    cache = _listening(at=100.0)
    entry = _entry()
    cache.put("live", entry, generation=cache.generation, now=100.0)
    cache.disconnected()
    cache.connected()
    assert not cache.trusted(100.2)
    assert cache.stale("live", 100.2) is entry  # PostgreSQL away meanwhile: still answers
    cache.load(["live"], sent_at=200.0)  # what changed meanwhile is unknown: forgotten
    assert cache.trusted(200.1)
    assert cache.get("live", 200.1) is None
    assert cache.stale("live", 200.1) is None


def test_the_set_is_replaced_by_each_load() -> None:
    cache = _listening(("revoked-meanwhile", "kept"), at=1.0)
    cache.disconnected()
    cache.connected()
    cache.load(["kept"], sent_at=2.0)
    assert cache.known("kept")
    assert not cache.known("revoked-meanwhile")
    assert cache.known_count == 1


def test_a_load_without_a_connection_is_ignored() -> None:
    cache = _cache()
    cache.load(["x"], sent_at=1.0)
    assert not cache.trusted(1.1)
    assert not cache.known("x")
    cache.connected()
    cache.disconnected()
    cache.load(["x"], sent_at=1.0)  # the connection was lost while loading
    assert not cache.trusted(1.1)
    cache.alive(1.2)
    assert not cache.trusted(1.3)


def test_an_unreadable_notification_forgets_everything_until_loaded_again() -> None:
    cache = _listening(at=100.0)
    cache.put("live", _entry(), generation=cache.generation, now=100.0)
    cache.reset()
    assert not cache.trusted(100.1)
    assert not cache.loaded
    assert cache.stale("live", 100.1) is None
    cache.alive(100.2)
    assert not cache.trusted(100.3)
    cache.load(["live"], sent_at=100.4)
    assert cache.trusted(100.5)


def test_negative_memory_expires() -> None:
    cache = TokenCache(stale_for=STALE, negative_ttl=30.0)
    cache.remember_unknown("guess", 10.0)
    assert cache.known_unknown("guess", 39.9)
    assert not cache.known_unknown("guess", 40.0)
    assert not cache.known_unknown("guess", 10.0)  # forgotten once expired


def test_the_entries_are_bounded() -> None:
    cache = TokenCache(stale_for=STALE, negative_ttl=1.0, trust_for=TRUST, max_entries=2)
    cache.connected()
    cache.load(["a", "b", "c"], sent_at=0.0)
    for lookup_id in ("a", "b", "c"):
        cache.put(lookup_id, _entry(), generation=cache.generation, now=0.1)
    assert len(cache) == 1  # full: cleared, then the newest kept


@pytest.mark.parametrize(
    ("expires", "revoked", "not_after"),
    [
        (None, None, math.inf),
        (datetime(2030, 1, 1, tzinfo=UTC), None, datetime(2030, 1, 1, tzinfo=UTC).timestamp()),
        (
            datetime(2030, 1, 1, tzinfo=UTC),
            datetime(2029, 1, 1, tzinfo=UTC),
            datetime(2029, 1, 1, tzinfo=UTC).timestamp(),
        ),
    ],
)
def test_an_entry_ends_at_its_first_end(
    expires: datetime | None, revoked: datetime | None, not_after: float
) -> None:
    entry = _entry()
    record = TokenRecord(
        token_id=1,
        lookup_id="a" * 16,
        secret_hash=b"h" * 32,
        deployment=Deployment(1, "acme", "churn", "production", "h", None, None),
        expires_at=expires,
        revoked_at=revoked,
    )
    assert Entry.of(record).not_after == not_after
    assert entry.not_after == math.inf


def test_heard_since_needs_a_proof_sent_at_or_after_the_moment() -> None:
    cache = _listening(at=100.0)
    assert cache.heard_since(100.0)
    assert not cache.heard_since(100.05)
    cache.alive(100.1)
    assert cache.heard_since(100.05)
    cache.disconnected()  # a proof of the lost connection says nothing about the next
    assert not cache.heard_since(100.05)
    cache.connected()
    cache.alive(100.2)  # before the load: ignored
    assert not cache.heard_since(100.05)
    cache.load([], sent_at=100.3)
    assert cache.heard_since(100.3)
