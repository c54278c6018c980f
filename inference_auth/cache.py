"""The in-process token cache: lookup id -> what a presented token is checked against.

Entries are dropped on the NOTIFYs of channel ``inference_tokens`` (``inference_auth.listener``)
and all at once when the LISTEN connection comes back (what changed meanwhile is unknown).
While that connection is down, entries keep answering for ``stale_for`` seconds from the loss
(PostgreSQL briefly away: tokens already verified keep working), then none does until it is
back. Unknown lookup ids are remembered for ``negative_ttl`` seconds so that a flood of guesses
does not reach PostgreSQL. No I/O here: the clock values come in as arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from shared.db.inference_tokens import TokenRecord

_MAX_NEGATIVE: Final = 100_000


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
    def __init__(self, *, stale_for: float, negative_ttl: float, max_entries: int = 200_000):
        self._entries: dict[str, Entry] = {}
        self._negative: dict[str, float] = {}
        self._stale_for = stale_for
        self._negative_ttl = negative_ttl
        self._max_entries = max_entries
        self.listening = False
        self._lost_at: float | None = None  # monotonic time the LISTEN connection was lost
        # Bumped by every invalidation: a read from PostgreSQL that started before one may be
        # older than the notification and is not cached.
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, lookup_id: str, now: float) -> Entry | None:
        """The cached entry while it can be trusted (``now``: monotonic seconds)."""
        entry = self._entries.get(lookup_id)
        if entry is None or self.listening:
            return entry
        if self._lost_at is not None and now - self._lost_at < self._stale_for:
            return entry
        return None

    def put(self, lookup_id: str, entry: Entry, *, generation: int) -> None:
        """Cache a read that started at ``generation``, unless something changed since or no
        notification could tell us about a change."""
        if generation != self.generation or not self.listening:
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

    # --- invalidation (the listener) ------------------------------------------------------
    def drop_token(self, lookup_id: str) -> None:
        self.generation += 1
        self._entries.pop(lookup_id, None)
        self._negative.pop(lookup_id, None)

    def drop_deployment(self, deployment_id: int) -> None:
        self.generation += 1
        for lookup_id in [k for k, e in self._entries.items() if e.deployment_id == deployment_id]:
            del self._entries[lookup_id]

    def connected(self) -> None:
        """The LISTEN connection is (again) up: forget everything, notifications were lost."""
        self.generation += 1
        self._entries.clear()
        self._negative.clear()
        self.listening = True
        self._lost_at = None

    def disconnected(self, now: float) -> None:
        if self.listening:
            self._lost_at = now
        self.listening = False

    def stale_since(self) -> float | None:
        """Monotonic time the cache stopped hearing changes (None: it hears them)."""
        return self._lost_at
