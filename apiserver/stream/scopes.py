"""Streams' scopes, read once per tenant at a time: after a reconnect storm hundreds of a
tenant's streams ask at once, and one query answers all the look-ups of a tenant that arrive
while it runs or within ``ttl`` seconds of it.

``invalidate(tenant)`` (its grants changed) and ``clear()`` (changes may have been missed)
forget what is held, and a look-up answers only with a scope whose read started after the
latest of them: a read already under way when the grants changed is read again, so a stream
never subscribes with grants older than the change the hub has applied to the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from apiserver.scope import Scope

ScopeLoader = Callable[[str | None], Awaitable[Scope]]


@dataclass(eq=False)
class ScopeCache:
    ttl: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _held: dict[str | None, tuple[float, Scope]] = field(default_factory=dict)
    # The read under way per tenant, with the generation it started in.
    _loading: dict[str | None, tuple[asyncio.Future[Scope], int]] = field(default_factory=dict)
    _cleared: int = 0  # bumped by clear()
    _invalidated: dict[str | None, int] = field(default_factory=dict)  # by invalidate()

    def generation(self, tenant: str | None) -> int:
        return self._cleared + self._invalidated.get(tenant, 0)

    def invalidate(self, tenant: str | None) -> None:
        """``tenant``'s grants changed: what was read before is not answered any more."""
        self._held.pop(tenant, None)
        self._invalidated[tenant] = self._invalidated.get(tenant, 0) + 1

    def clear(self) -> None:
        """Any tenant's grants may have changed unseen (the LISTEN connection was down)."""
        self._held.clear()
        self._cleared += 1

    async def scope_of(self, tenant: str | None, load: ScopeLoader) -> Scope:
        """``load(tenant)``, shared with the other look-ups for the same tenant."""
        while True:
            held = self._held.get(tenant)
            if held is not None and self.clock() - held[0] < self.ttl:
                return held[1]
            pending = self._loading.get(tenant)
            if pending is not None:
                future, generation = pending
                await asyncio.wait([future])  # its outcome, without being cancelled with it
                if not future.cancelled() and generation == self.generation(tenant):
                    return future.result()
                continue  # cancelled with its request, or read before the grants changed
            generation = self.generation(tenant)
            scope = await self._load(tenant, load, generation)
            if generation == self.generation(tenant):
                self._held[tenant] = (self.clock(), scope)
                return scope

    async def _load(self, tenant: str | None, load: ScopeLoader, generation: int) -> Scope:
        future: asyncio.Future[Scope] = asyncio.get_running_loop().create_future()
        self._loading[tenant] = (future, generation)
        try:
            scope = await load(tenant)
        except asyncio.CancelledError:
            future.cancel()  # the waiters load for themselves
            raise
        except Exception as exc:  # shared with the waiters, raised here too
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        else:
            future.set_result(scope)
            return scope
        finally:
            del self._loading[tenant]
            if len(self._held) > 10_000:  # tenants come and go: keep the fresh ones
                now = self.clock()
                self._held = {k: v for k, v in self._held.items() if now - v[0] < self.ttl}
