"""app.route: which original host a check request is decided against, for every server."""

from __future__ import annotations

import pytest

from inference_auth.app import AUTH_PATH, NO_ROUTE, route

ORIGINAL = "https://churn-production.acme.models.example.com/v1/models/churn:predict"
HOST = "churn-production.acme.models.example.com"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (AUTH_PATH, HOST),  # nginx: the host of X-Original-URL
        (f"{AUTH_PATH}?x=1", HOST),  # a query is ignored
        (f"{AUTH_PATH}/v1/models/churn:predict", "envoy.example"),  # Envoy: Host
        (f"{AUTH_PATH}/", "envoy.example"),
        (f"{AUTH_PATH}x", NO_ROUTE),
        ("/internal/v1/inference", NO_ROUTE),
        ("/", NO_ROUTE),
        ("", NO_ROUTE),
        (f"/x{AUTH_PATH}", NO_ROUTE),
    ],
)
def test_route(target: str, expected: object) -> None:
    assert route(target, original_url=ORIGINAL, host="envoy.example") == expected


@pytest.mark.parametrize(
    "original", [None, "", "no-scheme/x", "https://user@host/x", "https:///x", "https://"]
)
def test_nginx_form_without_a_usable_original_url_names_no_host(original: str | None) -> None:
    assert route(AUTH_PATH, original_url=original, host=HOST) is None


def test_envoy_form_without_host_names_no_host() -> None:
    assert route(f"{AUTH_PATH}/x", original_url=ORIGINAL, host=None) is None
