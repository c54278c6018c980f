"""Git's smart-HTTP ref discovery, as bytes: what ``git ls-remote`` sends and reads, without a
clone or a ``git`` process. Purely computational.

Discovery is ``GET <repository>/info/refs?service=git-upload-pack`` (``Git-Protocol:
version=2`` asks for protocol v2). A v2 server answers with its capabilities only; the refs
then come from one ``ls-refs`` command limited to the branch (``ref_request``), so a repository
with thousands of tags or pull-request refs costs a few hundred bytes per check. A server that
only speaks v0 lists every ref in its answer (``parse_advertisement``). Both framings are
pkt-lines (gitprotocol-common(5)): four hexadecimal digits giving the length including
themselves, ``0000`` a flush, ``0001`` a delimiter, ``0002`` the end of a response.

Hostile input: every parser here raises ``ProtocolError`` on anything malformed, never
another exception, and never reads past the bytes it was given.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

ADVERTISEMENT_TYPE: Final = "application/x-git-upload-pack-advertisement"
REQUEST_TYPE: Final = "application/x-git-upload-pack-request"
RESULT_TYPE: Final = "application/x-git-upload-pack-result"
FLUSH: Final = b"0000"
DELIMITER: Final = b"0001"
_MAX_PKT: Final = 65520  # the largest pkt-line git writes or accepts
_OID: Final = re.compile(rb"^[0-9a-f]{40}([0-9a-f]{24})?$")


class ProtocolError(ValueError):
    """The server's answer is not what the Git protocol allows."""


@dataclass(frozen=True, slots=True)
class Advertisement:
    """The answer to discovery: v2 capabilities, or v0's refs (name → object id)."""

    version: int
    capabilities: frozenset[str]
    refs: Mapping[str, str]


def pkt(payload: bytes) -> bytes:
    """One pkt-line carrying ``payload``."""
    if len(payload) + 4 > _MAX_PKT:
        raise ProtocolError("a pkt-line payload is too long")
    return b"%04x" % (len(payload) + 4) + payload


def packets(data: bytes) -> Iterator[bytes | None]:
    """The payloads of ``data``; None for a flush, delimiter or response-end packet."""
    position = 0
    while position < len(data):
        header = data[position : position + 4]
        if len(header) < 4 or not re.fullmatch(rb"[0-9a-f]{4}", header):
            raise ProtocolError("a malformed pkt-line length")
        length = int(header, 16)
        if length in (0, 1, 2):
            position += 4
            yield None
            continue
        if length < 4 or position + length > len(data):
            raise ProtocolError("a pkt-line runs past the end of the answer")
        yield data[position + 4 : position + length]
        position += length


def _line(payload: bytes) -> str:
    try:
        return payload.rstrip(b"\n").decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("a pkt-line is not UTF-8") from None


def _ref(payload: bytes) -> tuple[str, str]:
    """``<oid> <name>`` (v0: capabilities after a NUL; v2: attributes after a space)."""
    text = payload.split(b"\0", 1)[0].rstrip(b"\n")
    oid, _, rest = text.partition(b" ")
    if not _OID.match(oid) or not rest:
        raise ProtocolError("a ref line is not '<object id> <name>'")
    return _line(rest.split(b" ", 1)[0]), oid.decode()


def parse_advertisement(data: bytes) -> Advertisement:
    """Discovery's answer: protocol v2's capabilities or v0's (and v1's) refs."""
    lines = list(packets(data))
    # v0 and v1 open with "# service=git-upload-pack" and a flush; v2 over HTTP may too.
    if lines and lines[0] is not None and lines[0].startswith(b"# service="):
        lines = lines[1:]
        if lines and lines[0] is None:
            lines = lines[1:]
    if not lines or lines[0] is None:
        raise ProtocolError("the answer advertises nothing")
    first = _line(lines[0])
    if first == "version 2":
        offered = frozenset(_line(line) for line in lines[1:] if line is not None)
        return Advertisement(2, offered, {})
    if first == "version 1":
        lines = lines[1:]
    refs: dict[str, str] = {}
    capabilities: frozenset[str] = frozenset()
    for index, line in enumerate(lines):
        if line is None:
            break
        if index == 0 and b"\0" in line:
            capabilities = frozenset(_line(line.split(b"\0", 1)[1]).split())
        name, oid = _ref(line)
        if name != "capabilities^{}":  # what an empty repository advertises instead of refs
            refs[name] = oid
    return Advertisement(0, capabilities, refs)


def ref_request(ref: str, capabilities: frozenset[str]) -> bytes:
    """The v2 ``ls-refs`` command listing only refs that start with ``ref``."""
    body = pkt(b"command=ls-refs\n")
    for capability in sorted(capabilities):
        if capability.startswith("object-format="):  # a SHA-256 repository must be told so
            body += pkt(capability.encode() + b"\n")
    return body + DELIMITER + pkt(b"ref-prefix " + ref.encode() + b"\n") + FLUSH


def parse_refs(data: bytes) -> dict[str, str]:
    """The answer to ``ls-refs``: name → object id."""
    refs: dict[str, str] = {}
    for line in packets(data):
        if line is None:
            break
        name, oid = _ref(line)
        refs[name] = oid
    return refs
