"""Keyset cursors (shared.cursors): round trips, and refusal of anything not issued for the
same list, tenant and filters with the same key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.cursors import CursorCodec, binding, cursor_key
from shared.errors import Invalid

CODEC = CursorCodec(cursor_key("the-api-key"))
BOUND = binding("workflows", tenant="acme", filters="f1")
URL_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."

values = st.integers(min_value=-(2**63), max_value=2**63) | st.text(max_size=60)
positions = st.lists(values, min_size=1, max_size=4).map(tuple)
bindings = st.builds(
    binding, st.text(max_size=30), tenant=st.none() | st.text(max_size=20), filters=st.text()
)


def shape_of(position: tuple[int | str, ...]) -> tuple[type, ...]:
    return tuple(type(value) for value in position)


@given(positions, bindings)
def test_round_trip(position: tuple[int | str, ...], bound_to: str) -> None:
    token = CODEC.encode(position, bound_to=bound_to)
    assert set(token) <= set(URL_SAFE)
    assert CODEC.decode(token, bound_to=bound_to, shape=shape_of(position)) == position


@given(positions, bindings, bindings)
def test_a_cursor_of_another_binding_is_refused(
    position: tuple[int | str, ...], issued_for: str, used_for: str
) -> None:
    token = CODEC.encode(position, bound_to=issued_for)
    if issued_for == used_for:
        return
    with pytest.raises(Invalid) as raised:
        CODEC.decode(token, bound_to=used_for, shape=shape_of(position))
    assert raised.value.details == {"parameter": "cursor"}


def test_the_binding_names_list_tenant_and_filters() -> None:
    token = CODEC.encode(("nightly", "p1"), bound_to=BOUND)
    for other in (
        binding("data-pipelines", tenant="acme", filters="f1"),
        binding("workflows", tenant="globex", filters="f1"),
        binding("workflows", tenant=None, filters="f1"),
        binding("workflows", tenant="acme", filters="f2"),
    ):
        with pytest.raises(Invalid, match="another list, tenant, filters or order"):
            CODEC.decode(token, bound_to=other, shape=(str, str))


def test_an_altered_cursor_is_refused() -> None:
    token = CODEC.encode((1_700_000_000_000_000, 42), bound_to=BOUND)
    payload, mac = token.split(".")
    forged = CODEC.encode((1_700_000_000_000_000, 41), bound_to=BOUND).split(".")[0]
    for tampered in (f"{forged}.{mac}", f"{payload}.{mac[:-2]}AA", payload, f"{payload}."):
        with pytest.raises(Invalid, match="altered"):
            CODEC.decode(tampered, bound_to=BOUND, shape=(int, int))


def test_a_cursor_signed_with_another_key_is_refused_and_replicas_sharing_the_key_agree() -> None:
    token = CODEC.encode((7,), bound_to=BOUND)
    assert CursorCodec(cursor_key("the-api-key")).decode(token, bound_to=BOUND, shape=(int,)) == (
        7,
    )
    with pytest.raises(Invalid, match="altered or signed with another key"):
        CursorCodec(cursor_key("another-key")).decode(token, bound_to=BOUND, shape=(int,))
    assert cursor_key(None) != cursor_key(None)  # no shared secret: a key of this process


def test_a_valid_signature_over_the_wrong_shape_is_still_refused() -> None:
    token = CODEC.encode(("7",), bound_to=BOUND)
    with pytest.raises(Invalid, match="malformed"):
        CODEC.decode(token, bound_to=BOUND, shape=(int,))
    with pytest.raises(Invalid, match="malformed"):
        CODEC.decode(CODEC.encode((True,), bound_to=BOUND), bound_to=BOUND, shape=(int,))


@given(st.text(max_size=120) | st.binary(max_size=120).map(lambda b: b.decode("latin-1")))
def test_garbage_is_invalid_never_a_crash(token: str) -> None:
    with pytest.raises(Invalid) as raised:
        CODEC.decode(token, bound_to=BOUND, shape=(int, int))
    assert raised.value.details == {"parameter": "cursor"}


def test_overlong_tokens_are_refused_unread() -> None:
    with pytest.raises(Invalid, match="malformed"):
        CODEC.decode("A" * 5000, bound_to=BOUND, shape=(int,))
