"""gitsync.addresses: which addresses a tenant's Git remote may lead to, and how exactly an
installation's own server is named, without I/O. A numeric host is turned into its address as
the system's resolver does (``inet_aton``'s forms: ``127.1``, ``0x7f000001``, ``017700000001``)."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from compiler.gitsync.addresses import Endpoint, NotAllowed, RemotePolicy, endpoint
from compiler.gitsync.reach import Pinned
from shared.config import PRIVATE_RANGES

PORT = 8443
POLICY = RemotePolicy.of(deny=PRIVATE_RANGES, allow=[f"127.0.0.1:{PORT}"])
PUBLIC = ("8.8.8.8", "140.82.112.3", "1.1.1.1", "2606:4700::6810:84e5", "2a01:4f8::1")


def resolved(host: str) -> str:
    """What the system's resolver answers for a numeric host (no DNS involved)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return socket.inet_ntoa(socket.inet_aton(host))


def verdict(policy: RemotePolicy, url: str, addresses: list[str]) -> str | None:
    try:
        policy.check(endpoint(url), addresses)
    except NotAllowed as refused:
        return refused.why
    return None


# --- spellings of an IPv4 address, as inet_aton reads them ---------------------------------
def _number(value: int, base: str) -> str:
    return {"dec": str(value), "hex": hex(value), "HEX": f"0X{value:X}", "oct": f"0{value:o}"}[base]


@st.composite
def spelled(draw: st.DrawFn, network: str = "127.0.0.0/8") -> tuple[str, str]:
    """(a spelling, the address it means) for an address of ``network``."""
    net = ipaddress.IPv4Network(network)
    value = draw(st.integers(int(net.network_address), int(net.broadcast_address)))
    parts = draw(st.sampled_from([1, 2, 3, 4]))
    octets = value.to_bytes(4, "big")
    if parts == 1:
        fields = [value]
    elif parts == 2:
        fields = [octets[0], int.from_bytes(octets[1:], "big")]
    elif parts == 3:
        fields = [octets[0], octets[1], int.from_bytes(octets[2:], "big")]
    else:
        fields = list(octets)
    bases = draw(st.lists(st.sampled_from(["dec", "hex", "HEX", "oct"]), min_size=parts,
                          max_size=parts))  # fmt: skip
    text = ".".join(_number(field, base) for field, base in zip(fields, bases, strict=True))
    return text, str(ipaddress.IPv4Address(value))


@given(spelled(), st.integers(1, 65535))
def test_every_spelling_of_loopback_is_refused_unless_it_is_the_allowed_entry_exactly(
    spelling: tuple[str, str], port: int
) -> None:
    text, address = spelling
    assert resolved(text) == address  # the system reads it as the test says
    why = verdict(POLICY, f"https://{text}:{port}/acme/etl.git", [address])
    if text == "127.0.0.1" and port == PORT:
        assert why is None
    else:
        assert why is not None
        assert "loopback" in why


@given(spelled("127.0.0.0/8"))
def test_the_allowed_server_on_its_default_port_is_no_other_port(
    spelling: tuple[str, str],
) -> None:
    text, address = spelling
    assert verdict(POLICY, f"https://{text}/acme/etl.git", [address]) is not None


SPELLINGS_V6 = [
    "[::1]",
    "[0::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]",
    "[::FFFF:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:7f00:1]",
    "[::ffff:127.1.2.3]",
    "[::127.0.0.1]",  # IPv4-compatible (deprecated): reserved
    "[64:ff9b::7f00:1]",  # NAT64 of loopback
    "[2002:7f00:1::]",  # 6to4 of loopback
    "[::]",
    "[fe80::1]",
    "[fd00::1]",
    "[ff02::1]",
    "[::ffff:10.0.0.1]",
    "[::ffff:169.254.169.254]",
    "[64:ff9b::a9fe:a9fe]",  # NAT64 of the metadata address
]


@pytest.mark.parametrize("host", SPELLINGS_V6)
@pytest.mark.parametrize("port", [PORT, 443, 6443])
def test_ipv6_spellings_of_what_leads_inside_are_refused(host: str, port: int) -> None:
    url = f"https://{host}:{port}/x.git"
    where = endpoint(url)
    assert where.literal is not None
    assert verdict(POLICY, url, [where.host]) is not None, host


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("localhost", ["127.0.0.1", "::1"]),
        ("LOCALHOST", ["127.0.0.1"]),
        ("localhost.", ["127.0.0.1"]),
        ("LocalHost.", ["::1"]),
        ("0.0.0.0", ["0.0.0.0"]),
        ("0", ["0.0.0.0"]),
        ("169.254.169.254", ["169.254.169.254"]),
        ("metadata.google.internal", ["169.254.169.254"]),
        ("kubernetes.default.svc", ["10.96.0.1"]),
        ("10.0.0.1", ["10.0.0.1"]),
        ("172.16.5.4", ["172.16.5.4"]),
        ("192.168.1.1", ["192.168.1.1"]),
        ("100.64.0.10", ["100.64.0.10"]),  # shared address space (CGNAT)
        ("192.0.0.8", ["192.0.0.8"]),
        ("198.18.0.1", ["198.18.0.1"]),
        ("224.0.0.1", ["224.0.0.1"]),
        ("240.0.0.1", ["240.0.0.1"]),
        ("255.255.255.255", ["255.255.255.255"]),
        ("git.example", ["140.82.112.3", "10.0.0.7"]),  # one address inside is enough
        ("git.example", ["140.82.112.3", "::ffff:127.0.0.1"]),
        ("git.example", []),
        ("git.example", ["not-an-address"]),
    ],
)
@pytest.mark.parametrize("port", [PORT, 443])
def test_names_and_numbers_that_lead_inside_are_refused(
    host: str, addresses: list[str], port: int
) -> None:
    assert verdict(POLICY, f"https://{host}:{port}/x.git", addresses) is not None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_reached_and_the_first_is_the_one_connected_to(address: str) -> None:
    where = endpoint("https://github.com/acme/etl.git")
    assert where == Endpoint("github.com", 443)
    assert POLICY.check(where, [address, "140.82.112.4"]) == str(ipaddress.ip_address(address))
    # NAT64 (an IPv6-only cluster's DNS64) and IPv4-mapped forms of a public address too.
    if ":" not in address:
        mapped = f"64:ff9b::{ipaddress.IPv4Address(address)}"
        assert POLICY.check(where, [mapped]) == str(ipaddress.ip_address(mapped))


NETWORKS = [
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "0.0.0.0/8",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::1/128",
    "fe80::/10",
    "fc00::/7",
    "ff00::/8",
    "::ffff:0:0/96",
]


@given(st.sampled_from(NETWORKS), st.data())
def test_every_address_of_a_refused_range_is_refused(network: str, data: st.DataObject) -> None:
    net = ipaddress.ip_network(network)
    value = data.draw(st.integers(int(net.network_address), int(net.broadcast_address)))
    address = ipaddress.ip_address(value)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        assume(POLICY.refusal(address.ipv4_mapped) is not None)
    assert POLICY.refusal(address) is not None
    assert verdict(POLICY, "https://git.example/x.git", ["140.82.112.3", str(address)])


@given(st.integers(0, 2**24 - 1))
def test_the_configured_ranges_are_refused_besides_and_the_rest_of_the_internet_is_not(
    low: int,
) -> None:
    policy = RemotePolicy.of(deny=["52.0.0.0/8"])
    inside = ipaddress.IPv4Address((52 << 24) + low)
    beside = ipaddress.IPv4Address((53 << 24) + low)
    assert policy.refusal(inside) == f"{inside} is in the platform's range 52.0.0.0/8"
    assert policy.refusal(beside) is None
    assert policy.refusal(ipaddress.IPv6Address(f"::ffff:{inside}")) is not None
    assert policy.refusal(ipaddress.IPv6Address(f"64:ff9b::{inside}")) is not None


def test_an_allowed_server_is_reached_by_its_exact_host_and_port_whatever_it_resolves_to() -> None:
    policy = RemotePolicy.of(
        allow=["git.internal:443", "Git.Corp:8443", "[fd00::7]:443", "10.2.0.7:8443"]
    )
    assert policy.check(endpoint("https://git.internal/a.git"), ["10.0.0.5"]) == "10.0.0.5"
    assert policy.check(endpoint("https://GIT.INTERNAL:443/a.git"), ["10.0.0.5"]) == "10.0.0.5"
    assert policy.check(endpoint("https://git.corp:8443/a.git"), ["10.0.0.6"]) == "10.0.0.6"
    assert policy.check(endpoint("https://[fd00::7]/a.git"), ["fd00::7"]) == "fd00::7"
    assert policy.check(endpoint("https://10.2.0.7:8443/a.git"), ["10.2.0.7"]) == "10.2.0.7"
    for url, address in (
        ("https://git.internal:8443/a.git", "10.0.0.5"),  # another port
        ("https://git.internal./a.git", "10.0.0.5"),  # another spelling
        ("https://git.corp/a.git", "10.0.0.6"),
        ("https://[fd00:0::7]/a.git", "fd00::7"),
        ("https://[::ffff:10.2.0.7]:8443/a.git", "::ffff:10.2.0.7"),
        ("https://10.2.7:8443/a.git", "10.2.0.7"),
        ("https://10.2.0.8:8443/a.git", "10.2.0.8"),
    ):
        with pytest.raises(NotAllowed):
            policy.check(endpoint(url), [address])


@pytest.mark.parametrize(
    "entry", ["git.internal", "git.internal:0", "git.internal:65536", ":443", "[fd00::7:443",
              "[not-v6]:443", "host:https"],
)  # fmt: skip
def test_a_bad_allow_entry_or_range_is_refused_at_start(entry: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        RemotePolicy.of(allow=[entry])


def test_a_bad_range_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match=r"."):
        RemotePolicy.of(deny=["10.0.0.0/33"])


def test_a_url_without_a_host_or_with_a_bad_port_is_not_allowed() -> None:
    for url in ("https:///x.git", "https://host:99999/x.git", "https://host:x/x.git"):
        with pytest.raises(NotAllowed):
            endpoint(url)


def test_git_is_pinned_by_name_to_the_checked_address_and_never_for_a_literal() -> None:
    assert Pinned(Endpoint("git.example", 443), "140.82.112.3").curl_resolve() == (
        "git.example:443:140.82.112.3"
    )
    assert Pinned(Endpoint("git.example", 8443), "2a01:4f8::1").curl_resolve() == (
        "git.example:8443:[2a01:4f8::1]"
    )
    assert Pinned(Endpoint("140.82.112.3", 443), "140.82.112.3").curl_resolve() is None
    assert Pinned(Endpoint("2a01:4f8::1", 443), "2a01:4f8::1").curl_resolve() is None
