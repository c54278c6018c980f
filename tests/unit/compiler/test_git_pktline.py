"""gitsync.pktline: Git's smart-HTTP ref discovery parsed from bytes. The fixtures are what
``git http-backend`` (git 2.39) answers; any other input is a ProtocolError, never another
exception."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.gitsync.pktline import (
    ProtocolError,
    packets,
    parse_advertisement,
    parse_refs,
    pkt,
    ref_request,
)

MAIN = "635ae19820ef6ef99f33b3f656ddde5dff4392d1"
DEV = "1111111111111111111111111111111111111111"
V0 = (
    b"001e# service=git-upload-pack\n0000"
    + pkt(
        f"{MAIN} refs/heads/main\0multi_ack thin-pack side-band ofs-delta shallow "
        "object-format=sha1 agent=git/2.39.5\n".encode()
    )
    + pkt(f"{DEV} refs/heads/dev\n".encode())
    + pkt(f"{DEV} refs/tags/v1\n".encode())
    + b"0000"
)
V2 = (
    b"000eversion 2\n0015agent=git/2.39.5\n0013ls-refs=unborn\n0020fetch=shallow wait-for-done\n"
    b"0012server-option\n0017object-format=sha1\n0010object-info\n0000"
)


def test_a_v0_advertisement_lists_every_ref_and_the_capabilities() -> None:
    found = parse_advertisement(V0)
    assert found.version == 0
    assert found.refs == {"refs/heads/main": MAIN, "refs/heads/dev": DEV, "refs/tags/v1": DEV}
    assert "shallow" in found.capabilities


def test_an_empty_v0_repository_advertises_no_ref() -> None:
    empty = (
        b"001e# service=git-upload-pack\n0000"
        + pkt(b"0" * 40 + b" capabilities^{}\0agent=git/2.39.5\n")
        + b"0000"
    )
    assert parse_advertisement(empty).refs == {}


def test_a_v2_server_answers_with_capabilities_only() -> None:
    found = parse_advertisement(V2)
    assert (found.version, found.refs) == (2, {})
    assert {"ls-refs=unborn", "object-format=sha1"} <= found.capabilities


def test_ls_refs_asks_for_one_prefix_and_names_the_object_format() -> None:
    request = ref_request("refs/heads/main", frozenset({"object-format=sha256", "ls-refs"}))
    assert request == (
        b"0014command=ls-refs\n0019object-format=sha256\n0001001fref-prefix refs/heads/main\n0000"
    )
    assert list(packets(request)) == [
        b"command=ls-refs\n",
        b"object-format=sha256\n",
        None,
        b"ref-prefix refs/heads/main\n",
        None,
    ]


def test_the_ls_refs_answer_gives_names_and_ids_and_ignores_attributes() -> None:
    answer = (
        pkt(f"{MAIN} refs/heads/main\n".encode())
        + pkt(f"{DEV} refs/heads/main-old symref-target:refs/heads/x\n".encode())
        + b"0000"
    )
    assert parse_refs(answer) == {"refs/heads/main": MAIN, "refs/heads/main-old": DEV}
    assert parse_refs(b"0000") == {}
    sha256 = "a" * 64
    assert parse_refs(pkt(f"{sha256} refs/heads/main\n".encode())) == {"refs/heads/main": sha256}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"zzzz",
        b"00",
        b"0009abc",  # runs past the end
        b"0003",  # a length below the header's own
        pkt(b"not a ref line\n") + b"0000",
        pkt(b"X" * 40 + b" refs/heads/main\n"),
        pkt(b"\xff\xfe" + b" refs/heads/main\n"),
        b"001e# service=git-upload-pack\n0000",
    ],
)
def test_malformed_answers_are_protocol_errors(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_advertisement(data)


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_protocol_error_only(data: bytes) -> None:
    for parse in (parse_advertisement, parse_refs):
        with contextlib.suppress(ProtocolError):
            parse(data)


@given(st.lists(st.binary(min_size=1, max_size=200), max_size=10))
def test_packets_give_back_what_pkt_framed(payloads: list[bytes]) -> None:
    assert list(packets(b"".join(pkt(p) for p in payloads))) == payloads


def test_a_payload_longer_than_git_allows_is_refused() -> None:
    with pytest.raises(ProtocolError):
        pkt(b"x" * 65517)
