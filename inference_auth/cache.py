"""What a replica knows about tokens, and how far it may trust it (docs/inference-auth.md).

Three things, all kept current by the NOTIFYs of channel ``inference_tokens``
(``inference_auth.token_listener``):

- the set of live lookup ids, loaded whole each time the LISTEN is in place and grown by every
  notification about a token (an insert notifies too, migration 0013): while it is trusted, a
  lookup id outside it is refused with no PostgreSQL or Redis round trip, once a proof of life
  sent after the request arrived shows that a token committed just before was not missed
  (``heard_since``);
- the entries, lookup id -> what a presented token is checked against, dropped on each
  notification about their token or deployment;
- lookup ids found unknown in PostgreSQL, remembered for ``negative_ttl`` (they matter only
  while the set is not trusted).

Trust needs proof of life: the listener pings its connection several times a second and
reports when each answered ping was sent (``alive``); PostgreSQL sends a notification before
the answer to a query that started after it was committed, so at that moment every change
committed earlier has been heard. The set and the entries are trusted for ``trust_for``
seconds from the latest such proof, and only while the connection is up and the set loaded
since it was (re)opened. Untrusted, a token is read through the pool and not cached; when
PostgreSQL cannot be read at all, entries keep answering for ``stale_for`` seconds from the
last proof (``stale``), and one read at a time is tried again every ``retry_reads_after``
seconds meanwhile (``start_read``), so that a PostgreSQL that does not answer keeps at most one
request waiting.

No I/O here: the clock values (monotonic seconds) come in as arguments.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from shared.db.inference_tokens import TokenRecord

_MAX_NEGATIVE: Final = 100_000
TRUST_FOR: Final = 0.5  # seconds from the latest proof of life during which the cache is trusted
RETRY_READS_AFTER: Final = 1.0


@dataclass(frozen=True, slots=True)
class Entry:
    """A token record flattened for the hot path (times as epoch seconds)."""

    token_id: int
    secret_hash: bytes
    host: str
    deployment: str  # tenant/model/environment
    deployment_id: int
    rate_limit: int | None
    token_rate_limit: int | None
    not_after: float  # epoch seconds from which the token is no longer valid (inf: never)

    @classmethod
    def of(cls, record: TokenRecord) -> Entry:
        ends = [moment.timestamp() for moment in (record.expires_at, record.revoked_at) if moment]
        deployment = record.deployment
        return cls(
            token_id=record.token_id,
            secret_hash=record.secret_hash,
            host=deployment.host,
            deployment=deployment.ref.name,
            deployment_id=deployment.id,
            rate_limit=deployment.rate_limit,
            token_rate_limit=deployment.token_rate_limit,
            not_after=min(ends, default=math.inf),
        )


class TokenCache:
    def __init__(
        self,
        *,
        stale_for: float,
        negative_ttl: float,
        trust_for: float = TRUST_FOR,
        retry_reads_after: float = RETRY_READS_AFTER,
        max_entries: int = 200_000,
    ) -> None:
        self._entries: dict[str, Entry] = {}
        self._negative: dict[str, float] = {}
        self._known: set[str] = set()
        # Ids notified since the set was last loaded, while it is not (the next load keeps them).
        self._heard_while_loading: set[str] | None = set()
        self._stale_for = stale_for
        self._trust_for = trust_for
        self._negative_ttl = negative_ttl
        self._retry_reads_after = retry_reads_after
        self._max_entries = max_entries
        self.listening = False  # the LISTEN connection is up
        self.loaded = False  # the set was loaded since the connection was (re)opened
        self.ever_loaded = False
        self._trusted_until = -math.inf  # monotonic
        self._proof_sent = -math.inf  # monotonic: when the latest answered ping was sent
        self._stale_until = -math.inf  # monotonic: the last proof of life plus stale_for
        self._reads_down_until = -math.inf  # monotonic: PostgreSQL failed a read; wait
        self._probing = False  # the one read trying PostgreSQL again is out
        # Bumped by every invalidation: a read from PostgreSQL that started before one may be
        # older than the notification and is not cached.
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def known_count(self) -> int:
        return len(self._known)

    # --- the check ------------------------------------------------------------------------
    def trusted(self, now: float) -> bool:
        """Whether what is cached is current: changes committed up to ``trust_for`` ago have
        been heard."""
        return now < self._trusted_until

    def get(self, lookup_id: str, now: float) -> Entry | None:
        """The cached entry while the cache is trusted, or while PostgreSQL cannot be read and
        the entry is not older than ``stale_for`` (the hot path: no I/O either way)."""
        if now < self._trusted_until:
            return self._entries.get(lookup_id)
        if (self._probing or now < self._reads_down_until) and now < self._stale_until:
            return self._entries.get(lookup_id)
        return None

    def trust_left(self, now: float) -> float:
        """Seconds the cache stays trusted without a new proof of life (0: not trusted)."""
        return max(0.0, self._trusted_until - now)

    def heard_since(self, moment: float) -> bool:
        """Whether every change committed before ``moment`` has been heard (an answered ping
        sent at or after it)."""
        return self._proof_sent >= moment

    def known(self, lookup_id: str) -> bool:
        """Whether ``lookup_id`` may be a live token's (meaningful while ``trusted``)."""
        return lookup_id in self._known

    def stale(self, lookup_id: str, now: float) -> Entry | None:
        """The entry as last heard, while it is not older than ``stale_for``: what answers
        when PostgreSQL cannot be read."""
        if now < self._stale_until:
            return self._entries.get(lookup_id)
        return None

    def start_read(self, now: float) -> bool:
        """Whether to read PostgreSQL now: always while it answers; once a read failed, one
        read (the probe) each ``retry_reads_after`` seconds and none while it is out, so a
        PostgreSQL that does not answer keeps one request waiting, not all of them. The
        caller reports how the read ended (``read_failed``, ``read_succeeded`` or
        ``read_abandoned``)."""
        if self._reads_down_until == -math.inf:
            return True
        if self._probing or now < self._reads_down_until:
            return False
        self._probing = True
        return True

    def read_failed(self, now: float) -> bool:
        """A read from PostgreSQL failed; True when it is news (PostgreSQL was up)."""
        news = self._reads_down_until == -math.inf
        self._probing = False
        self._reads_down_until = now + self._retry_reads_after
        return news

    def read_succeeded(self) -> bool:
        """A read from PostgreSQL answered; True when it is news (PostgreSQL was down)."""
        news = self._reads_down_until != -math.inf
        self._probing = False
        self._reads_down_until = -math.inf
        return news

    def read_abandoned(self) -> None:
        """A read ended without an answer either way (cancelled): the next may probe."""
        self._probing = False

    def put(self, lookup_id: str, entry: Entry, *, generation: int, now: float) -> None:
        """Cache a read that started at ``generation``, unless something changed since or the
        cache is not trusted (a change may not have been heard: the read is used once)."""
        if generation != self.generation or now >= self._trusted_until:
            return
        if len(self._entries) >= self._max_entries:
            self._entries.clear()  # bounded memory; the next requests re-read
        self._entries[lookup_id] = entry

    def known_unknown(self, lookup_id: str, now: float) -> bool:
        deadline = self._negative.get(lookup_id)
        if deadline is None:
            return False
        if now < deadline:
            return True
        del self._negative[lookup_id]
        return False

    def remember_unknown(self, lookup_id: str, now: float) -> None:
        if len(self._negative) >= _MAX_NEGATIVE:
            self._negative.clear()
        self._negative[lookup_id] = now + self._negative_ttl

    # --- the listener ---------------------------------------------------------------------
    def token_changed(self, lookup_id: str) -> None:
        """A token was issued, changed or deleted: it may be live, its entry is not current."""
        self.generation += 1
        self._entries.pop(lookup_id, None)
        self._negative.pop(lookup_id, None)
        self._known.add(lookup_id)
        if self._heard_while_loading is not None:
            self._heard_while_loading.add(lookup_id)

    def deployment_changed(self, deployment_id: int) -> None:
        self.generation += 1
        for lookup_id in [k for k, e in self._entries.items() if e.deployment_id == deployment_id]:
            del self._entries[lookup_id]

    def connected(self) -> None:
        """The LISTEN is (again) in place; notifications sent before are lost, so nothing is
        trusted until the set is loaded (``load``). Entries stay for ``stale``."""
        self.generation += 1
        self.listening = True
        self.loaded = False
        self._trusted_until = self._proof_sent = -math.inf
        if self._heard_while_loading is None:
            self._heard_while_loading = set()

    def load(self, lookup_ids: Iterable[str], *, sent_at: float) -> None:
        """The live lookup ids, read on the LISTEN connection by a query sent at ``sent_at``
        after the LISTEN was in place: what was missed is forgotten, the set is current."""
        if not self.listening or self._heard_while_loading is None:
            return  # not connected, or loaded already
        self.generation += 1
        self._known = set(lookup_ids) | self._heard_while_loading
        self._heard_while_loading = None
        self._entries.clear()
        self._negative.clear()
        self._reads_down_until = -math.inf  # PostgreSQL answered: read again at once
        self._probing = False
        self.loaded = self.ever_loaded = True
        self.alive(sent_at)

    def reset(self) -> None:
        """Something unknown changed (a notification this release cannot read): forget every
        entry and trust nothing until the set is loaded again (``load``)."""
        self.connected()
        self._entries.clear()
        self._stale_until = -math.inf

    def alive(self, sent_at: float) -> None:
        """A query on the LISTEN connection sent at ``sent_at`` was answered: every change
        committed before then has been heard."""
        if not (self.listening and self.loaded):
            return
        self._proof_sent = max(self._proof_sent, sent_at)
        self._trusted_until = max(self._trusted_until, sent_at + self._trust_for)
        self._stale_until = max(self._stale_until, sent_at + self._stale_for)

    def disconnected(self) -> None:
        """The LISTEN connection is lost (or given up): trust ends now."""
        self.listening = False
        self.loaded = False
        if self._heard_while_loading is None:
            self._heard_while_loading = set()
        self._trusted_until = self._proof_sent = -math.inf
