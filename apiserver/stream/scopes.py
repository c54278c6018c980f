"""Streams' scopes, read once per tenant at a time: a tenant's streams re-read their grants at
every heartbeat, and after a reconnect storm hundreds of them ask at once; one query answers
all the look-ups of a tenant that arrive while it runs or within ``ttl`` seconds of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from apiserver.auth import Identity
from apiserver.scope import Scope

ScopeLoader = Callable[[Identity], Awaitable[Scope]]


@dataclass(eq=False)
class ScopeCache:
    ttl: float = 1.0
    clock: Callable[[], float] = time.monotonic
    _held: dict[str | None, tuple[float, Scope]] = field(default_factory=dict)
    _loading: dict[str | None, asyncio.Future[Scope]] = field(default_factory=dict)

    async def scope_of(self, identity: Identity, load: ScopeLoader) -> Scope:
        """``load(identity)``, shared with the other look-ups for the same tenant (a scope
        depends on the tenant only)."""
        tenant = identity.tenant
        while True:
            held = self._held.get(tenant)
            if held is not None and self.clock() - held[0] < self.ttl:
                return held[1]
            pending = self._loading.get(tenant)
            if pending is None:
                break
            await asyncio.wait([pending])  # its outcome, without being cancelled with it
            if not pending.cancelled():
                return pending.result()
            # The look-up was cancelled with its request: look again (another may be running).
        future: asyncio.Future[Scope] = asyncio.get_running_loop().create_future()
        self._loading[tenant] = future
        try:
            scope = await load(identity)
        except asyncio.CancelledError:
            future.cancel()  # the waiters load for themselves
            raise
        except Exception as exc:  # shared with the waiters, raised here too
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        else:
            future.set_result(scope)
            self._held[tenant] = (self.clock(), scope)
            return scope
        finally:
            del self._loading[tenant]
            if len(self._held) > 10_000:  # tenants come and go: keep the fresh ones
                now = self.clock()
                self._held = {k: v for k, v in self._held.items() if now - v[0] < self.ttl}
