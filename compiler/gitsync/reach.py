"""Reaching a tenant's Git remote: its host resolved once, every address checked against the
installation's policy (``compiler.gitsync.addresses``), the connection pinned to a checked one.

- ``git`` (``git_cli``) is given ``http.curloptResolve=<host>:<port>:<address>``: curl connects
  to that address and to no other, while TLS still checks the certificate (and sends SNI) for
  the name the URL wrote;
- the change check (``http_refs``, aiohttp) resolves through ``resolver()``, which checks what
  it returns: aiohttp connects to exactly those addresses. A host written as an address is
  never resolved, by either; ``literal`` checks it.

A refusal is a ``GitFailed`` ``unreachable`` with the same sentence as a host that does not
answer: a tenant learns nothing of the platform's network from it. Why it was refused goes to
the platform's log (``git_remote_refused``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp.abc import AbstractResolver, ResolveResult

from compiler.gitsync.addresses import Endpoint, NotAllowed, RemotePolicy, endpoint
from shared.logging import get_logger

log = get_logger(__name__)

# (host, port) -> every address it resolves to, as text.
Lookup = Callable[[str, int], Awaitable[list[str]]]


async def system_lookup(host: str, port: int) -> list[str]:
    """The system resolver's addresses for ``host`` (what curl and aiohttp would have used)."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in found))


@dataclass(frozen=True, slots=True)
class Pinned:
    """Where one connection goes: ``address`` for ``where``."""

    where: Endpoint
    address: str

    def curl_resolve(self) -> str | None:
        """``http.curloptResolve``'s entry (None for a host written as an address: curl does
        not resolve it)."""
        if self.where.literal is not None:
            return None
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.where.host}:{self.where.port}:{address}"


class Reach:
    def __init__(self, policy: RemotePolicy, *, lookup: Lookup = system_lookup) -> None:
        self._policy = policy
        self._lookup = lookup

    async def pin(self, url: str) -> Pinned:
        """The checked address to connect to for ``url``; ``NotAllowed`` otherwise."""
        where = endpoint(url)
        literal = where.literal
        addresses = [where.host] if literal is not None else await self._lookup(*_key(where))
        return Pinned(where, self._checked(where, addresses))

    def literal(self, url: str) -> None:
        """Check a URL whose host is written as an address (never resolved); others pass."""
        where = endpoint(url)
        if where.literal is not None:
            self._checked(where, [where.host])

    def _checked(self, where: Endpoint, addresses: list[str]) -> str:
        try:
            return self._policy.check(where, addresses)
        except NotAllowed as refused:
            log.warning("git_remote_refused", host=where.host, port=where.port, why=refused.why)
            raise

    def resolver(self) -> AbstractResolver:
        """aiohttp's resolver: every connection goes to addresses checked here."""
        return _CheckedResolver(self)


def _key(where: Endpoint) -> tuple[str, int]:
    return where.host, where.port


class _CheckedResolver(AbstractResolver):
    def __init__(self, reach: Reach) -> None:
        self._reach = reach

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        pinned = await self._reach.pin(f"https://{_bracketed(host)}:{port}/")
        address = pinned.address
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        return None


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
