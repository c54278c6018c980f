"""Keyset cursors: opaque, signed, and bound to the list they continue. Purely computational.

A cursor carries the sort key of the last row a page showed (``position``: ints and strings)
and is good only for the query that issued it: its *binding* names the list (``workflows``,
``data-pipelines``, the versions of one pipeline), the effective tenant and a fingerprint of the
filters and order. The binding is not in the token; it is in the HMAC-SHA256 that signs it, so
a cursor taken to another list, another tenant or other filters fails verification, and so does
one whose position was edited. A short digest of the binding rides along only to say which of
the two happened (both are 400, naming ``cursor``).

The key comes from a setting every replica shares (``cursor_key(API_KEY)``), so a cursor one
replica issued continues on any other; changing the key ends every open cursor, nothing else.

Token: ``base64url(json([binding digest, *position])) "." base64url(mac)``, no padding.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from shared.errors import Invalid

Position = tuple[int | str, ...]

PARAMETER: Final = "cursor"
MAX_TOKEN: Final = 2048  # a position is a few short values; anything longer is not ours
_MAC_BYTES: Final = 16
_DIGEST_CHARS: Final = 8
_KEY_CONTEXT: Final = b"workflow-manager keyset cursor v1"


def cursor_key(secret: str | None) -> bytes:
    """The signing key derived from a secret every replica shares (the apiserver's API_KEY).

    Without one (an apiserver that refuses every request anyway) a random key: cursors then
    only continue on the replica that issued them.
    """
    if not secret:
        return secrets.token_bytes(32)
    return hmac.new(secret.encode(), _KEY_CONTEXT, hashlib.sha256).digest()


def binding(list_name: str, *, tenant: str | None, filters: str = "") -> str:
    """What a cursor is bound to: the list, the effective tenant (None: an administrator seeing
    every tenant) and a fingerprint of the filters and order (empty: the list has none)."""
    return json.dumps([list_name, tenant, filters], separators=(",", ":"))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode("ascii"))


def _digest(bound_to: str) -> str:
    return hashlib.sha256(bound_to.encode()).hexdigest()[:_DIGEST_CHARS]


def _refused(message: str) -> Invalid:
    return Invalid(f"{PARAMETER}: {message}", details={"parameter": PARAMETER})


@dataclass(frozen=True, slots=True)
class CursorCodec:
    """Encodes and verifies cursors with one key."""

    key: bytes = field(repr=False)

    def _mac(self, bound_to: str, payload: bytes) -> bytes:
        signed = bound_to.encode() + b"\x00" + payload
        return hmac.new(self.key, signed, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, position: Position, *, bound_to: str) -> str:
        """The opaque token for the page after ``position`` of the query ``bound_to`` names."""
        payload = json.dumps(
            [_digest(bound_to), *position], separators=(",", ":"), ensure_ascii=True
        ).encode()
        return f"{_b64(payload)}.{_b64(self._mac(bound_to, payload))}"

    def decode(self, token: str, *, bound_to: str, shape: Sequence[type]) -> Position:
        """The position ``token`` carries, if this codec signed it for ``bound_to`` and it has
        ``shape`` (the type of each value); Invalid otherwise, never another exception."""
        if len(token) > MAX_TOKEN or not token.isascii():
            raise _refused("malformed cursor")
        encoded, _, mac = token.partition(".")
        try:
            payload, given = _unb64(encoded), _unb64(mac)
            doc = json.loads(payload)
        except (ValueError, binascii.Error, UnicodeError, RecursionError):
            raise _refused("malformed cursor") from None
        if not isinstance(doc, list) or not doc or not isinstance(doc[0], str):
            raise _refused("malformed cursor")
        if not hmac.compare_digest(given, self._mac(bound_to, payload)):
            if doc[0] == _digest(bound_to):  # the digest is no secret; only says which
                raise _refused("the cursor was altered or signed with another key")
            raise _refused(
                "the cursor belongs to another list, tenant, filters or order; "
                "start again without it"
            )
        position = tuple(doc[1:])
        if len(position) != len(shape) or not all(
            type(value) is kind for value, kind in zip(position, shape, strict=True)
        ):
            raise _refused("malformed cursor")
        return position
