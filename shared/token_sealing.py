"""A deployment's token kept sealed until it is shown (docs/security.md, "Deployment tokens").

The token store keeps only a token's hash, so the plain token a deployment's endpoint shows
must live somewhere: sealed with AES-256-GCM under ``DEPLOYMENT_TOKEN_KEY``, a key PostgreSQL
never holds (the stage controller seals when it issues the token at first deploy; the
apiserver opens it for a caller with ``models.deploy``). The deployment it belongs to is bound
in as associated data, so a sealed token copied onto another deployment's row does not open.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES: Final = 32
_NONCE_BYTES: Final = 12
_VERSION: Final = b"\x01"


class SealError(ValueError):
    """A key that is not a key, or a sealed token that does not open with it."""


def parse_key(text: str) -> bytes:
    """The key from its setting: 32 bytes, base64 (standard or URL-safe, padding optional)."""
    cleaned = text.strip()
    padded = cleaned + "=" * (-len(cleaned) % 4)
    try:
        key = base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_"))
    except (binascii.Error, ValueError):
        raise SealError("DEPLOYMENT_TOKEN_KEY: expected 32 bytes in base64") from None
    if len(key) != KEY_BYTES:
        raise SealError(f"DEPLOYMENT_TOKEN_KEY: expected 32 bytes in base64, got {len(key)}")
    return key


def new_key() -> str:
    """A fresh key in the setting's form (``python -m shared.token_sealing``)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode().rstrip("=")


def _bound(model_id: str, environment: str) -> bytes:
    return f"model-deployment:{model_id}/{environment}".encode()


def seal(token: str, *, key: bytes, model_id: str, environment: str) -> bytes:
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, token.encode(), _bound(model_id, environment))
    return _VERSION + nonce + sealed


def unseal(sealed: bytes, *, key: bytes, model_id: str, environment: str) -> str:
    if len(sealed) < 1 + _NONCE_BYTES + 16 or sealed[:1] != _VERSION:
        raise SealError("not a sealed token")
    nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
    try:
        plain = AESGCM(key).decrypt(nonce, body, _bound(model_id, environment))
    except InvalidTag:
        raise SealError(
            "the sealed token does not open with this key for this deployment"
        ) from None
    return plain.decode()


if __name__ == "__main__":  # pragma: no cover - an operator's one-liner
    print(new_key())
