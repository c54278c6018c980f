"""The check's read path over a store that counts its reads (no PostgreSQL, no Redis): what is
answered from memory, what is read through, what is served stale. Trust is set through the
cache as the listener sets it (a load and its proof of life), with a trust window long enough
for the test and none at all once the LISTEN connection is lost."""

from __future__ import annotations

import asyncio
import time

from inference_auth.cache import TokenCache
from inference_auth.check import Checker
from shared.db.inference_tokens import Deployment, TokenRecord
from shared.errors import DependencyDown
from shared.inference_tokens import new_token, token_hash

HOST = "churn-production.acme.models.example.com"
DEPLOYMENT = Deployment(1, "acme", "churn", "production", HOST, None, None)


class Store:
    """The tokens PostgreSQL holds; counts the reads; can be taken away."""

    def __init__(self) -> None:
        self.records: dict[str, TokenRecord] = {}
        self.reads = 0
        self.away = False
        self.hanging: asyncio.Event | None = None
        self.hung = asyncio.Event()

    def issue(self) -> tuple[str, str]:
        token, lookup_id, secret = new_token()
        self.records[lookup_id] = TokenRecord(
            token_id=len(self.records) + 1,
            lookup_id=lookup_id,
            secret_hash=token_hash(lookup_id, secret),
            deployment=DEPLOYMENT,
            expires_at=None,
            revoked_at=None,
        )
        return token, lookup_id

    async def lookup(self, lookup_id: str) -> TokenRecord | None:
        self.reads += 1
        if self.hanging is not None:  # PostgreSQL does not answer until the test says so
            self.hung.set()
            await self.hanging.wait()
        if self.away:
            raise DependencyDown("PostgreSQL does not answer")
        return self.records.get(lookup_id)


def _service(store: Store) -> tuple[TokenCache, Checker]:
    cache = TokenCache(stale_for=3600.0, negative_ttl=30.0, trust_for=3600.0)
    cache.connected()
    cache.load(list(store.records), sent_at=time.monotonic())
    return cache, Checker(store=store, cache=cache, guard=None)


async def _status(checker: Checker, token: str) -> int:
    return (
        await checker.check(f"Bearer {token}", deployment="acme/churn/production", host=HOST)
    ).status


async def test_a_guess_is_refused_from_memory_while_trusted() -> None:
    store = Store()
    token, _ = store.issue()
    _, checker = _service(store)
    for _ in range(100):
        assert await _status(checker, new_token()[0]) == 401
    assert store.reads == 0
    assert await _status(checker, token) == 200
    assert await _status(checker, token) == 200
    assert store.reads == 1  # read once, then cached


async def test_a_token_issued_later_is_known_through_its_notification() -> None:
    store = Store()
    cache, checker = _service(store)
    token, lookup_id = store.issue()
    cache.token_changed(lookup_id)  # what the insert's NOTIFY does
    assert await _status(checker, token) == 200


async def test_untrusted_every_token_is_read_through_and_not_cached() -> None:
    store = Store()
    known, _ = store.issue()
    cache, checker = _service(store)
    assert await _status(checker, known) == 200
    cache.disconnected()
    issued_meanwhile, lookup_id = store.issue()  # its notification is never heard
    assert await _status(checker, issued_meanwhile) == 200
    reads = store.reads
    assert await _status(checker, known) == 200
    assert await _status(checker, known) == 200
    assert store.reads == reads + 2  # a revocation meanwhile would be seen
    del store.records[lookup_id]
    assert await _status(checker, issued_meanwhile) == 401


async def test_postgresql_away_cached_tokens_answer_stale_others_are_refused() -> None:
    store = Store()
    known, _ = store.issue()
    unseen, _ = store.issue()
    cache, checker = _service(store)
    assert await _status(checker, known) == 200
    cache.disconnected()
    store.away = True
    reads = store.reads
    assert await _status(checker, known) == 200  # stale
    assert await _status(checker, unseen) == 401  # never seen: fail closed
    assert await _status(checker, known) == 200
    assert store.reads == reads + 1  # one failed read; then none until the retry is due
    store.away = False
    cache.connected()
    cache.load(list(store.records), sent_at=time.monotonic())
    assert await _status(checker, unseen) == 200


async def test_stale_entries_end_with_stale_for() -> None:
    store = Store()
    known, _ = store.issue()
    cache = TokenCache(stale_for=0.0, negative_ttl=30.0, trust_for=3600.0)
    cache.connected()
    cache.load(list(store.records), sent_at=time.monotonic())
    checker = Checker(store=store, cache=cache, guard=None)
    assert await _status(checker, known) == 200
    cache.disconnected()
    store.away = True
    assert await _status(checker, known) == 401


async def test_an_unknown_id_waits_for_proof_that_nothing_was_missed() -> None:
    """A token committed just before its first request may not be heard yet: the check waits
    for the listener's next proof of life (``heard``) before refusing it from memory."""
    store = Store()
    cache = TokenCache(stale_for=3600.0, negative_ttl=30.0, trust_for=3600.0)
    cache.connected()
    cache.load([], sent_at=time.monotonic())
    token, lookup_id = store.issue()  # committed; its notification still on the way
    asked: list[float] = []

    async def heard(since: float) -> bool:
        asked.append(since)
        cache.token_changed(lookup_id)  # the notification arrives before the next ping's answer
        cache.alive(time.monotonic())
        return True

    checker = Checker(store=store, cache=cache, guard=None, heard=heard)
    assert await _status(checker, token) == 200
    assert await _status(checker, new_token()[0]) == 401
    assert len(asked) == 2
    assert store.reads == 1  # the new token's; the guess cost no read


async def test_an_unknown_id_is_read_through_when_trust_ends_while_waiting() -> None:
    store = Store()
    cache = TokenCache(stale_for=3600.0, negative_ttl=30.0, trust_for=3600.0)
    cache.connected()
    cache.load([], sent_at=time.monotonic())
    token, _ = store.issue()

    async def heard(since: float) -> bool:
        return False  # the LISTEN connection went quiet

    checker = Checker(store=store, cache=cache, guard=None, heard=heard)
    assert await _status(checker, token) == 200
    assert store.reads == 1


async def test_postgresql_not_answering_keeps_one_read_waiting_not_every_request() -> None:
    store = Store()
    first, _ = store.issue()
    second, _ = store.issue()
    cache = TokenCache(stale_for=3600.0, negative_ttl=30.0, trust_for=3600.0, retry_reads_after=0)
    cache.connected()
    cache.load(list(store.records), sent_at=time.monotonic())
    checker = Checker(store=store, cache=cache, guard=None)
    assert await _status(checker, first) == 200
    assert await _status(checker, second) == 200
    cache.disconnected()
    store.away = True
    assert await _status(checker, first) == 200  # the read failed: stale
    store.hanging = asyncio.Event()
    probe = asyncio.create_task(_status(checker, first))  # the one read trying again
    await store.hung.wait()
    async with asyncio.timeout(5):  # a wait on the hung PostgreSQL would never end
        assert await _status(checker, second) == 200  # from the cache
        assert await _status(checker, first) == 200
    assert store.reads == 4  # no other read while the probe is out
    store.hanging.set()
    assert await probe == 200
