"""The decision: may this request reach this deployment? (docs/inference-auth.md)

Once a token is cached the decision costs, the first time, a regular-expression match, one
SHA-256, a constant-time comparison and a dictionary look-up, and afterwards (the same token
again) a slice and a constant-time comparison against the secret that matched; no I/O unless
its deployment has a rate limit (one Redis round trip). The answers:

- ``allowed`` (200): a valid token of the deployment the route names;
- ``unauthorized`` (401): no token, a malformed one, an unknown one, a wrong secret, a revoked
  or expired one, or one that cannot be read now (PostgreSQL away and never seen: fail closed);
- ``forbidden`` (403): a check whose route names no deployment (before any look-up), a valid
  token of another deployment, or an original host naming another endpoint than the token's;
- ``rate_limited`` (429): a limit of the token or its deployment is exceeded this second.

The deployment is the route's (``shared.inference_routes``: the path the platform wrote into
the Ingress's ``auth-url`` or the SecurityPolicy), never a header the client controls. The
original host (``X-Original-URL`` or ``Host``) is a second opinion only: when it is a valid
host name other than the token's endpoint host the answer is 403; absent or malformed, it is
not asked.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

from inference_auth.cache import Entry, TokenCache
from inference_auth.metrics import NO_DEPLOYMENT, POSTGRESQL_UP, STATS
from inference_auth.redis_guard import RedisGuard
from shared.db.inference_tokens import TokenRecord
from shared.errors import WorkflowManagerError
from shared.inference_tokens import (
    LOOKUP_ID_LENGTH,
    PREFIX,
    TOKEN_LENGTH,
    bearer_token,
    hash_matches,
    normalise_host,
)
from shared.logging import get_logger

log = get_logger(__name__)


class Lookup(Protocol):
    async def lookup(self, lookup_id: str) -> TokenRecord | None: ...


@dataclass(frozen=True, slots=True)
class Decision:
    status: int
    outcome: str
    deployment: str = NO_DEPLOYMENT


UNAUTHORIZED: Final = Decision(401, "unauthorized")
# The canonical header, "Bearer wmi_<lookup id>_<secret>", sliced without a regular expression.
_CANONICAL_START: Final = "Bearer " + PREFIX
_LOOKUP_START: Final = len(_CANONICAL_START)
_LOOKUP_END: Final = _LOOKUP_START + LOOKUP_ID_LENGTH
_SECRET_START: Final = _LOOKUP_END + 1
_CANONICAL_LENGTH: Final = len("Bearer ") + TOKEN_LENGTH
_MAX_VERIFIED: Final = 200_000
FORBIDDEN_NO_DEPLOYMENT: Final = Decision(403, "forbidden")

_LOOKUPS = STATS.lookups


class Checker:
    def __init__(
        self,
        *,
        store: Lookup,
        cache: TokenCache,
        guard: RedisGuard | None,
        heard: Callable[[float], Awaitable[bool]] | None = None,
        lookup_timeout: float = 2.0,
    ) -> None:
        self._store = store
        self._heard = heard  # the listener's: every change before a moment heard (or False)
        self._lookup_timeout = lookup_timeout
        self._cache = cache
        self._guard = guard
        self._inflight: dict[str, asyncio.Future[Entry | None]] = {}
        self._decisions: dict[tuple[int, str], Decision] = {}
        self._background: set[asyncio.Task[None]] = set()
        # lookup id -> (secret, entry) of tokens whose secret matched the entry's hash.
        self._verified: dict[str, tuple[str, Entry]] = {}

    def _decision(self, status: int, outcome: str, deployment: str) -> Decision:
        key = (status, deployment)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) > 10_000:
                self._decisions.clear()
            decision = self._decisions[key] = Decision(status, outcome, deployment)
        return decision

    async def check(
        self, authorization: str | None, *, deployment: str | None, host: str | None
    ) -> Decision:
        """The decision for a request the route names ``deployment`` (``tenant/model/
        environment``; None: the route names none) with the original ``host`` (or None)."""
        if deployment is None:
            return FORBIDDEN_NO_DEPLOYMENT
        verified = self._verified_before(authorization)
        if verified is not None:
            _LOOKUPS["hit"] += 1
        else:
            verified = await self._verify(authorization)
            if verified is None:
                return UNAUTHORIZED
        lookup_id, entry = verified
        now = time.time()
        decision = self._settled(entry, deployment, host, now)
        if decision is not None:
            return decision
        assert self._guard is not None  # _settled leaves only a limit to ask Redis about
        if await self._guard.limited(
            lookup_id=lookup_id,
            token_limit=entry.token_rate_limit,
            deployment_id=entry.deployment_id,
            deployment_limit=entry.rate_limit,
            window=int(now),
        ):
            return self._decision(429, "rate_limited", entry.deployment)
        return self._decision(200, "allowed", entry.deployment)

    def check_now(
        self, authorization: str | None, *, deployment: str | None, host: str | None
    ) -> Decision | None:
        """``check`` without waiting, when it needs nothing but memory: a token seen before
        (``_verified_before``) whose deployment and token have no rate limit. None when the
        rest would wait (PostgreSQL, a SHA-256 first sight, Redis): call ``check`` then."""
        if deployment is None:
            return FORBIDDEN_NO_DEPLOYMENT
        verified = self._verified_before(authorization)
        if verified is None:
            return None
        decision = self._settled(verified[1], deployment, host, time.time())
        if decision is not None:
            _LOOKUPS["hit"] += 1  # else counted by the check that follows
        return decision

    def _settled(
        self, entry: Entry, deployment: str, host: str | None, now: float
    ) -> Decision | None:
        """The decision for a verified token when no rate limit is to be asked; else None."""
        if now >= entry.not_after:
            return UNAUTHORIZED
        if deployment != entry.deployment:
            return self._decision(403, "forbidden", entry.deployment)
        if host is not None and host != entry.host:
            # The second opinion: a host naming another endpoint refuses; a malformed one
            # (or none: HTTP/2 without Host, a proxy that dropped it) is not asked.
            normal = normalise_host(host)
            if normal is not None and normal != entry.host:
                return self._decision(403, "forbidden", entry.deployment)
        if (
            entry.rate_limit is not None or entry.token_rate_limit is not None
        ) and self._guard is not None:
            return None
        return self._decision(200, "allowed", entry.deployment)

    async def _verify(self, authorization: str | None) -> tuple[str, Entry] | None:
        """The full path: parse, find the entry (``_entry``), compare the hash."""
        parsed = bearer_token(authorization)
        if parsed is None:
            return None
        lookup_id, secret = parsed
        entry = await self._entry(lookup_id)
        if entry is None or not hash_matches(lookup_id, secret, entry.secret_hash):
            return None
        if len(self._verified) >= _MAX_VERIFIED:
            self._verified.clear()
        self._verified[lookup_id] = (secret, entry)
        return lookup_id, entry

    async def _entry(self, lookup_id: str) -> Entry | None:
        """What the token is checked against: from memory while the cache is trusted (a
        lookup id outside the live set costs no round trip), else read from PostgreSQL."""
        cache = self._cache
        now = time.monotonic()
        trusted = cache.trusted(now)
        entry = cache.get(lookup_id, now)
        if entry is not None:
            _LOOKUPS["hit" if trusted else "stale"] += 1
            return entry
        if trusted and not cache.known(lookup_id):
            # A token committed just before this request may not be heard yet: wait for the
            # listener's next answered ping (no query of its own) before calling it unknown.
            if self._heard is not None and not await self._heard(now):
                return await self._read(lookup_id)  # no longer trusted: read through
            if not cache.known(lookup_id):
                _LOOKUPS["unknown"] += 1
                return None
        return await self._read(lookup_id)

    def _verified_before(self, authorization: str | None) -> tuple[str, Entry] | None:
        """The lookup id and cached entry of a token presented in its canonical form
        (``Bearer <token>``) whose secret already matched that very entry's hash, else None
        (the full path runs).

        The hot path of a busy endpoint: a slice and one constant-time comparison instead of two
        regular expressions and a SHA-256. The entry must still be the cache's current one, so
        a revocation, rotation or stale cache ends the shortcut as it ends the entry.
        """
        if (
            authorization is None
            or len(authorization) != _CANONICAL_LENGTH
            or not authorization.startswith(_CANONICAL_START)
            or not authorization.isascii()
        ):
            return None
        lookup_id = authorization[_LOOKUP_START:_LOOKUP_END]
        verified = self._verified.get(lookup_id)
        if verified is None or authorization[_LOOKUP_END] != "_":
            return None
        secret, entry = verified
        if not hmac.compare_digest(secret, authorization[_SECRET_START:]):
            return None
        if self._cache.get(lookup_id, time.monotonic()) is not entry:
            return None
        return lookup_id, entry

    async def _read(self, lookup_id: str) -> Entry | None:
        """The token's entry from PostgreSQL, one read per lookup id at a time; None when it
        is unknown (remembered) or cannot be read (fail closed)."""
        pending = self._inflight.get(lookup_id)
        if pending is not None:
            return await asyncio.shield(pending)
        if self._cache.known_unknown(lookup_id, time.monotonic()):
            _LOOKUPS["negative"] += 1
            return None
        future: asyncio.Future[Entry | None] = asyncio.get_running_loop().create_future()
        self._inflight[lookup_id] = future
        try:
            entry = await self._fetch(lookup_id)
        except BaseException as exc:
            future.set_result(None)
            if not isinstance(exc, Exception):
                raise
            log.warning("token_lookup_failed", error=type(exc).__name__)
            entry = None
        else:
            future.set_result(entry)
        finally:
            del self._inflight[lookup_id]
        return entry

    async def _fetch(self, lookup_id: str) -> Entry | None:
        cache = self._cache
        trusted = cache.trusted(time.monotonic())
        # Untrusted, the set cannot refuse a guess: the shared negative cache can.
        if not trusted and self._guard is not None and await self._guard.known_unknown(lookup_id):
            _LOOKUPS["negative"] += 1
            cache.remember_unknown(lookup_id, time.monotonic())
            return None
        if not cache.start_read(time.monotonic()):
            return self._stale(lookup_id)  # PostgreSQL away: one read at a time tries again
        generation = cache.generation
        try:
            async with asyncio.timeout(self._lookup_timeout):
                record = await self._store.lookup(lookup_id)
        except asyncio.CancelledError:
            cache.read_abandoned()
            raise
        except (WorkflowManagerError, TimeoutError) as exc:
            if cache.read_failed(time.monotonic()):
                POSTGRESQL_UP.set(0)
                log.warning(
                    "postgresql_unreachable",
                    error=type(exc).__name__,
                    consequence="cached tokens served stale, others refused",
                )
            return self._stale(lookup_id)
        if cache.read_succeeded():
            POSTGRESQL_UP.set(1)
            log.info("postgresql_reachable")
        _LOOKUPS["miss"] += 1
        if record is None:
            cache.remember_unknown(lookup_id, time.monotonic())
            if self._guard is not None:
                task = asyncio.create_task(self._guard.remember_unknown(lookup_id))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return None
        entry = Entry.of(record)
        cache.put(lookup_id, entry, generation=generation, now=time.monotonic())
        return entry

    def _stale(self, lookup_id: str) -> Entry | None:
        """PostgreSQL cannot be read: the entry as last heard, while not too old; else None."""
        entry = self._cache.stale(lookup_id, time.monotonic())
        _LOOKUPS["stale" if entry is not None else "unavailable"] += 1
        return entry
