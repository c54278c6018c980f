from __future__ import annotations

import pytest

from shared.token_sealing import SealError, new_key, parse_key, seal, unseal


def test_a_sealed_token_opens_only_with_its_key_and_deployment() -> None:
    key = parse_key(new_key())
    sealed = seal("tok_abc", key=key, model_id="m1", environment="staging")
    assert b"tok_abc" not in sealed
    assert unseal(sealed, key=key, model_id="m1", environment="staging") == "tok_abc"
    with pytest.raises(SealError):
        unseal(sealed, key=key, model_id="m1", environment="production")
    with pytest.raises(SealError):
        unseal(sealed, key=key, model_id="m2", environment="staging")
    with pytest.raises(SealError):
        unseal(sealed, key=parse_key(new_key()), model_id="m1", environment="staging")
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(SealError):
        unseal(tampered, key=key, model_id="m1", environment="staging")


def test_two_seals_of_one_token_differ() -> None:
    key = parse_key(new_key())
    assert seal("t", key=key, model_id="m", environment="staging") != seal(
        "t", key=key, model_id="m", environment="staging"
    )


@pytest.mark.parametrize("text", ["", "short", "!!!!", "a" * 60])
def test_a_key_that_is_not_32_bytes_is_refused(text: str) -> None:
    with pytest.raises(SealError, match="32 bytes"):
        parse_key(text)


def test_standard_and_url_safe_base64_both_read() -> None:
    raw = bytes(range(32))
    import base64

    assert parse_key(base64.b64encode(raw).decode()) == raw
    assert parse_key(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
