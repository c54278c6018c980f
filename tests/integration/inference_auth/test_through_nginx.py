"""inference_auth behind a real nginx configured as ingress-nginx renders `auth-url`: what a
client of a model endpoint sees. Two inference_auth processes, each behind its own nginx
(nginx_stack.py), so rotation and revocation are checked on both replicas."""

from __future__ import annotations

import pytest

from shared.inference_tokens import new_token
from tests.integration.inference_auth.nginx_stack import DEPLOYMENT_HEADER, DOMAIN, Stack, stack

__all__ = ["stack"]

pytestmark = pytest.mark.integration

ACME_FRAUD = {"tenant": "acme", "model": "fraud", "environment": "production"}
ACME_CHURN = {"tenant": "acme", "model": "churn", "environment": "production"}
GLOBEX_FRAUD = {"tenant": "globex", "model": "fraud", "environment": "production"}
ACME_CHURN_STAGING = {"tenant": "acme", "model": "churn", "environment": "staging"}


async def test_a_valid_token_reaches_the_model_on_every_replica(stack: Stack) -> None:
    issued = await stack.store.issue(actor="test", **ACME_FRAUD)
    host = stack.host(**ACME_FRAUD)
    for replica in (0, 1):
        assert await stack.predict(replica, host=host, token=issued.token) == 200
    assert stack.backend.count == 2
    # The check named the deployment; nginx passed it on (auth-response-headers).
    assert stack.backend.last_headers[DEPLOYMENT_HEADER] == "acme/fraud/production"


async def test_the_model_never_receives_the_bearer_token(stack: Stack) -> None:
    """`Authorization` is listed in the Ingress's `auth-response-headers`: nginx sets the
    proxied header to the check's (it sends none), and drops a header set to ""."""
    issued = await stack.store.issue(actor="test", **ACME_FRAUD)
    host = stack.host(**ACME_FRAUD)
    for replica in (0, 1):
        assert await stack.predict(replica, host=host, token=issued.token) == 200
        headers = {name.lower() for name in stack.backend.last_headers}
        assert "authorization" not in headers
        assert stack.backend.last_headers[DEPLOYMENT_HEADER] == "acme/fraud/production"
    # Nor in any spelling or repetition a client may try.
    request = (
        f"POST /v1/models/fraud:predict HTTP/1.1\r\nHost: {host}\r\n"
        f"authorization: Bearer {issued.token}\r\nContent-Length: 0\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    assert await stack.raw(0, request) == 200
    assert "authorization" not in {name.lower() for name in stack.backend.last_headers}


def _absolute_form(*, routed: dict[str, str], host: str, token: str, extra: str = "") -> bytes:
    """A prediction whose request line names `routed`'s endpoint (nginx routes on it) while
    `Host` (and whatever `extra` adds) names another."""
    target = "http://" + stack_host(**routed) + "/v1/models/" + routed["model"] + ":predict"
    return (
        f"POST {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"{extra}Content-Type: application/json\r\nContent-Length: 2\r\n"
        "Connection: close\r\n\r\n{}"
    ).encode()


def stack_host(*, tenant: str, model: str, environment: str) -> str:
    return f"{model}-{environment}.{tenant}.{DOMAIN}"


@pytest.mark.parametrize(
    ("token_of", "routed", "extra"),
    [
        # The issue's case: another tenant's model through the token's own Host.
        (ACME_CHURN, GLOBEX_FRAUD, ""),
        # Host spoofing: every header that could name a host names the token's.
        (
            ACME_CHURN,
            GLOBEX_FRAUD,
            "X-Original-URL: http://{own}/v1/models/churn:predict\r\n"
            "X-Forwarded-Host: {own}\r\nForwarded: host={own}\r\n",
        ),
        # Same tenant and model, another environment.
        (ACME_CHURN_STAGING, ACME_CHURN, ""),
        # The same model name in another tenant.
        (ACME_FRAUD, GLOBEX_FRAUD, ""),
    ],
    ids=["other-tenant", "host-headers", "other-environment", "same-model-other-tenant"],
)
async def test_a_token_opens_only_the_deployment_nginx_routes_to(
    stack: Stack, token_of: dict[str, str], routed: dict[str, str], extra: str
) -> None:
    """nginx routes on the host of an absolute-form request line, while ingress-nginx builds
    `X-Original-URL` from the client's `Host`: the deployment checked is the one the route's
    `auth-url` names, so the token of the deployment `Host` names is refused."""
    issued = await stack.store.issue(actor="test", **token_of)
    own = stack.host(**token_of)
    assert await stack.predict(0, host=own, token=issued.token) == 200  # its own endpoint
    calls = stack.backend.count
    request = _absolute_form(
        routed=routed, host=own, token=issued.token, extra=extra.format(own=own)
    )
    for replica in (0, 1):
        assert await stack.raw(replica, request) == 403
    assert stack.backend.count == calls


@pytest.mark.parametrize(
    "token",
    [
        None,
        new_token()[0],  # well-formed, never issued
        "not-a-token",
        "wmi_" + "A" * 200,
    ],
    ids=["missing", "unknown", "garbage", "overlong"],
)
async def test_no_token_or_an_unknown_one_is_401_and_never_reaches_the_model(
    stack: Stack, token: str | None
) -> None:
    await stack.store.issue(actor="test", **ACME_FRAUD)
    for replica in (0, 1):
        assert await stack.predict(replica, host=stack.host(**ACME_FRAUD), token=token) == 401
    assert stack.backend.count == 0


async def test_a_token_of_another_deployment_is_403(stack: Stack) -> None:
    churn = await stack.store.issue(actor="test", **ACME_CHURN)
    other_tenant = await stack.store.issue(
        actor="test", tenant="globex", model="fraud", environment="production"
    )
    host = stack.host(**ACME_FRAUD)
    for replica in (0, 1):
        assert await stack.predict(replica, host=host, token=churn.token) == 403
        assert await stack.predict(replica, host=host, token=other_tenant.token) == 403
    assert stack.backend.count == 0


async def test_an_unknown_host_is_refused(stack: Stack) -> None:
    issued = await stack.store.issue(actor="test", **ACME_FRAUD)
    # nginx routes an unknown Host to its first server (a default server), as a catch-all
    # Ingress would; the check still refuses it.
    status = await stack.predict(0, host="evil.example.test", token=issued.token)
    assert status in (401, 403)
    assert stack.backend.count == 0


async def test_rotation_takes_effect_within_a_second_on_both_replicas(stack: Stack) -> None:
    old = await stack.store.issue(actor="test", **ACME_FRAUD)
    host = stack.host(**ACME_FRAUD)
    for replica in (0, 1):  # both replicas have verified (and cached) the old token
        assert await stack.predict(replica, host=host, token=old.token) == 200
    new = await stack.store.rotate(old.token_id, actor="test", grace_seconds=0)
    for replica in (0, 1):
        assert await stack.predict(replica, host=host, token=new.token) == 200
    await stack.until(401, host=host, token=old.token, within=1.0)


async def test_revocation_takes_effect_within_a_second_on_both_replicas(stack: Stack) -> None:
    issued = await stack.store.issue(actor="test", **ACME_FRAUD)
    kept = await stack.store.issue(actor="test", **ACME_FRAUD)
    host = stack.host(**ACME_FRAUD)
    for replica in (0, 1):
        assert await stack.predict(replica, host=host, token=issued.token) == 200
    await stack.store.revoke(issued.token_id, actor="test")
    await stack.until(401, host=host, token=issued.token, within=1.0)
    for replica in (0, 1):
        assert await stack.predict(replica, host=host, token=kept.token) == 200


async def test_with_postgresql_gone_a_verified_token_works_and_an_unseen_one_is_401(
    stack: Stack,
) -> None:
    seen = await stack.store.issue(actor="test", **ACME_FRAUD)
    unseen = await stack.store.issue(actor="test", **ACME_FRAUD)
    host = stack.host(**ACME_FRAUD)
    for replica in (0, 1):
        assert await stack.predict(replica, host=host, token=seen.token) == 200
    stack.postgres.cut()
    try:
        for replica in (0, 1):
            assert await stack.predict(replica, host=host, token=seen.token) == 200
            assert await stack.predict(replica, host=host, token=unseen.token) == 401
            assert await stack.predict(replica, host=host, token=new_token()[0]) == 401
    finally:
        stack.postgres.restore()
    # Once PostgreSQL is back, the token never seen before is verified and served.
    await stack.until(200, host=host, token=unseen.token, within=10.0)


async def test_with_redis_gone_requests_are_still_answered(stack: Stack) -> None:
    issued = await stack.store.issue(actor="test", **ACME_FRAUD)
    other = await stack.store.issue(actor="test", **ACME_CHURN)
    host = stack.host(**ACME_FRAUD)
    stack.redis.cut()
    try:
        for replica in (0, 1):
            assert await stack.predict(replica, host=host, token=issued.token) == 200
            assert await stack.predict(replica, host=host, token=new_token()[0]) == 401
            assert await stack.predict(replica, host=host, token=other.token) == 403
    finally:
        stack.redis.restore()
