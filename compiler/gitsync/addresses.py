"""Which addresses a tenant's Git remote may make the compiler connect to. Purely computational.

A repository URL is the tenant's; the compiler's network is the platform's. Git sync connects
only to public addresses: an address that is loopback, link-local, private, unspecified,
multicast, reserved, shared (CGNAT), for documentation or benchmarks (anything Python's
``ipaddress`` does not call global), or inside one of the installation's own ranges
(``GIT_DENY_CIDRS``), is refused. An IPv6 address that carries an IPv4 one (IPv4-mapped,
6to4, the NAT64 well-known prefix) is judged by the IPv4 address it leads to.

Every address a name resolves to is checked, and the connection is pinned to a checked one
(``compiler.gitsync.reach``), so a name that answers differently the second time (DNS
rebinding) reaches nothing it was not allowed to.

An installation that hosts Git inside its own network names each such server, host and port
exactly as its URLs write them, in ``GIT_ALLOW_REMOTES`` (``git.internal:443``,
``10.2.0.7:8443``, ``[fd00::7]:443``; host names compared in lower case): those are reached
whatever their addresses; nothing else is, not another port of the same host nor another
spelling of it (``127.1``, ``0x7f000001``, ``localhost.``, ``[::ffff:10.2.0.7]``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

HTTPS_PORT: Final = 443
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 address inside
# Not globally reachable (RFC 6890), though not every Python's ``is_global`` says so.
_SPECIAL: Final = tuple(
    ipaddress.ip_network(cidr) for cidr in ("192.0.0.0/24", "2001::/23", "2001:db8::/32")
)


class NotAllowed(Exception):
    """The remote may not be reached: ``why`` is for the platform's logs, never the tenant."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a URL leads: its host as the client will name it, and its port."""

    host: str
    port: int

    @property
    def literal(self) -> Address | None:
        """The address itself when the host is written as one (no lookup), else None."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


def endpoint(url: str) -> Endpoint:
    """The host (lower case, brackets off an IPv6 literal) and port (443 unless written) of an
    ``https://`` URL; ``NotAllowed`` when it has no host or no valid port."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise NotAllowed("the URL's port is not a number") from None
    if not parts.hostname:
        raise NotAllowed("the URL has no host")
    return Endpoint(parts.hostname, HTTPS_PORT if port is None else port)


def _entry(text: str) -> Endpoint:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {text!r}")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"expected [address]:port, got {text!r}")
        host = host[1:-1]
        ipaddress.IPv6Address(host)  # brackets hold an IPv6 address, nothing else
    return Endpoint(host.lower(), int(port))


@dataclass(frozen=True, slots=True)
class RemotePolicy:
    deny: tuple[Network, ...] = ()
    allow: frozenset[Endpoint] = frozenset()

    @classmethod
    def of(cls, *, deny: Iterable[str] = (), allow: Iterable[str] = ()) -> RemotePolicy:
        """From the settings' lists (CIDRs; host:port entries); ``ValueError`` on a bad one."""
        return cls(
            tuple(ipaddress.ip_network(cidr.strip(), strict=False) for cidr in deny),
            frozenset(_entry(item) for item in allow),
        )

    def allows(self, where: Endpoint) -> bool:
        """Whether ``where`` is one of the installation's own Git servers, exactly."""
        return where in self.allow

    def refusal(self, address: Address) -> str | None:
        """Why the compiler may not connect to ``address`` (None: it may)."""
        for network in self.deny:
            if address.version == network.version and address in network:
                return f"{address} is in the platform's range {network}"
        for network in _SPECIAL:
            if address.version == network.version and address in network:
                return f"{address} is in the special-purpose range {network}"
        if isinstance(address, ipaddress.IPv6Address):
            inner = _embedded(address)
            if inner is not None:
                why = self.refusal(inner)
                return None if why is None else f"{why} (inside {address})"
        for label, hit in (
            ("unspecified", address.is_unspecified),
            ("loopback", address.is_loopback),
            ("link-local", address.is_link_local),
            ("multicast", address.is_multicast),
            ("private", address.is_private),
            ("reserved", address.is_reserved),
            ("not global", not address.is_global),
        ):
            if hit:
                return f"{address} is {label}"
        return None

    def check(self, where: Endpoint, addresses: Sequence[str]) -> str:
        """The address to connect to for ``where``, given every address its host resolved to;
        ``NotAllowed`` when there is none, or when any of them is refused (a name that leads
        inside the platform leads nowhere, whatever else it answers)."""
        if not addresses:
            raise NotAllowed(f"{where.host} resolved to no address")
        parsed: list[Address] = []
        for text in addresses:
            try:
                parsed.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError:
                raise NotAllowed(f"{where.host} resolved to {text!r}, not an address") from None
        if not self.allows(where):
            for address in parsed:
                why = self.refusal(address)
                if why is not None:
                    raise NotAllowed(f"{where.host}:{where.port} -> {why}")
        return str(parsed[0])


def _embedded(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to: IPv4-mapped, 6to4, NAT64's well-known prefix."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None
