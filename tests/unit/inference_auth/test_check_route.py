"""The check's routes (inference_auth/routes.py ``check_route``): which deployment a request's
target names (remembered per route, so it must agree with ``deployment_of_path`` always) and
which host is asked for a second opinion."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inference_auth.routes import check_route
from shared.inference_routes import AUTH_PATH, deployment_of_path

ROUTE = AUTH_PATH + "/acme/churn/production"
HOST = "churn-production.acme.models.example.com"

segments = st.sampled_from(["acme", "churn", "production", "ACME", "", "a-b", "x%2F", "v1", "."])
separators = st.sampled_from(["/", "?", "//", "/?", "#", ":"])
targets = st.lists(st.tuples(segments, separators), max_size=6).map(
    lambda parts: AUTH_PATH + "/" + "".join(segment + separator for segment, separator in parts)
)


def _expected(target: str) -> str | None:
    ref = deployment_of_path(target)
    return None if ref is None else ref.name


@given(st.one_of(targets, st.text(max_size=80).map(lambda text: AUTH_PATH + "/" + text)))
def test_the_deployment_is_the_paths_whether_remembered_or_not(target: str) -> None:
    for _ in range(2):  # the second time from memory
        route = check_route(target, original_url=None, host=None)
        assert route is not None
        assert route[0] == _expected(target)


def test_the_routes() -> None:
    assert check_route(ROUTE, original_url=None, host=HOST) == ("acme/churn/production", HOST)
    assert check_route(ROUTE + "/v1/models/churn:predict?x=1", original_url=None, host="h") == (
        "acme/churn/production",
        "h",
    )
    # nginx: X-Original-URL's host, never the subrequest's own Host.
    assert check_route(ROUTE, original_url=f"https://{HOST}/v1", host="auth") == (
        "acme/churn/production",
        HOST,
    )
    assert check_route(ROUTE, original_url="https:///v1", host="auth") == (
        "acme/churn/production",
        None,
    )
    assert check_route(AUTH_PATH, original_url=f"https://{HOST}/", host=None) == (None, HOST)
    assert check_route(AUTH_PATH + "?q=1", original_url=None, host=None) == (None, None)
    for target in ("/", "/internal/v1/inference-authx", AUTH_PATH + "x/acme/churn/production"):
        assert check_route(target, original_url=None, host=None) is None


def test_a_long_target_names_no_deployment() -> None:
    long = ROUTE + "x" * 500
    assert check_route(long, original_url=None, host=None) == (None, None)
