"""inference_auth over HTTP, served by its runner as the reader role, on real PostgreSQL and
Redis: both request forms, the answers, invalidation on two instances, PostgreSQL and Redis
going away, rate limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from shared.db.inference_tokens import Deployment, TokenStore
from shared.inference_tokens import new_token
from sim.ports import free_port
from tests.integration.faults import CuttableProxy
from tests.integration.inference_auth.conftest import Instance

DOMAIN = "models.example.com"
HOST = "churn-production.acme.models.example.com"
OTHER_HOST = "fraud-production.acme.models.example.com"

Start = Callable[..., Awaitable[Instance]]
CHURN = "acme/churn/production"
FRAUD = "acme/fraud/production"


def _changed(token: str) -> str:
    """The token with its last character replaced by another (always a different token)."""
    return token[:-1] + ("x" if token[-1] != "x" else "y")


async def _deployments(store: TokenStore, **limits: Any) -> tuple[Deployment, Deployment]:
    churn = await store.register_deployment(
        tenant="acme", model="churn", environment="production", domain=DOMAIN, **limits
    )
    fraud = await store.register_deployment(
        tenant="acme", model="fraud", environment="production", domain=DOMAIN
    )
    return churn, fraud


async def _until(status: Callable[[], Awaitable[int]], expected: int, *, within: float) -> float:
    """Poll until ``status()`` answers ``expected``; the seconds it took (fails after within)."""
    started = time.monotonic()
    while (answered := await status()) != expected:
        assert time.monotonic() - started < within, f"still {answered} after {within}s"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_allowed_unauthorized_forbidden(db: asyncpg.Pool, start_instance: Start) -> None:
    store = TokenStore(db)
    await _deployments(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()

    response = await service.check(issued.token, HOST)
    assert response.status == 200
    assert response.headers["X-Inference-Deployment"] == "acme/churn/production"
    # The host as a client may spell it: upper case, a port, a trailing dot.
    assert await service.status(issued.token, "CHURN-production.acme.models.example.com:443") == 200
    assert await service.status(issued.token, HOST + ".") == 200
    for token in (None, "", "nonsense", new_token()[0], _changed(issued.token)):
        response = await service.check(token, HOST)
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert "X-Inference-Deployment" not in response.headers
        assert response.body == b""
    response = await service.check(issued.token, OTHER_HOST)
    assert response.status == 403
    assert response.body == b""
    assert await service.status(issued.token, None) == 403
    assert await service.status(issued.token, "evil.example.com") == 403
    metrics = await service.metrics()
    assert (
        'wm_inference_auth_decisions_total{deployment="acme/churn/production",outcome="allowed"}'
        in metrics
    )
    assert 'wm_inference_auth_cache_lookups_total{result="hit"}' in metrics


async def test_the_envoy_form_reads_the_original_host(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    store = TokenStore(db)
    await _deployments(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    path = "/v1/models/churn:predict?x=1"
    response = await service.check(issued.token, HOST, envoy_path=path)
    assert response.status == 200
    assert response.headers["X-Inference-Deployment"] == "acme/churn/production"
    assert (await service.check(issued.token, HOST, envoy_path="/")).status == 200
    assert (await service.check(issued.token, OTHER_HOST, envoy_path=path)).status == 403
    assert (await service.check(None, HOST, envoy_path=path)).status == 401
    # Envoy checks with the original method.
    async with service.http.post(
        f"{service.url}/{CHURN}/v1/models/churn:predict",
        headers={"Host": HOST, "Authorization": f"Bearer {issued.token}"},
    ) as response:
        assert response.status == 200
    # The ingress form ignores a client's X-Forwarded-Host and the Host of the subrequest;
    # X-Original-URL naming another endpoint than the route's refuses (the second opinion).
    async with service.http.get(
        f"{service.url}/{CHURN}",
        headers={
            "Authorization": f"Bearer {issued.token}",
            "X-Original-URL": f"https://{OTHER_HOST}/",
            "X-Forwarded-Host": HOST,
        },
    ) as response:
        assert response.status == 403


async def test_the_route_names_the_deployment_never_the_host(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    """A valid token is checked against the deployment in the check's path, whatever the
    Host (Envoy) or X-Original-URL (nginx) says; a path naming no deployment is refused."""
    store = TokenStore(db)
    await _deployments(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    assert (await service.check(issued.token, HOST, route=CHURN)).status == 200
    path = "/v1/models/churn:predict"
    assert (await service.check(issued.token, HOST, route=CHURN, envoy_path=path)).status == 200
    # Envoy: the route is fraud's, the client's Host churn's.
    assert (await service.check(issued.token, HOST, route=FRAUD, envoy_path=path)).status == 403
    # nginx: the auth-url is fraud's, X-Original-URL (the client's Host) churn's.
    assert (await service.check(issued.token, HOST, route=FRAUD)).status == 403
    # No deployment named: refused before any look-up, whatever the host.
    for route in (
        None,
        "acme/churn",
        "acme/churn/",
        "ACME/churn/production",
        "acme/churn/production%2F",
        "acme/churn%2Fproduction",
        "acme//churn/production",
        "acme/churn/production:x",
    ):
        for envoy_path in (None, path):
            response = await service.check(issued.token, HOST, route=route, envoy_path=envoy_path)
            assert response.status == 403, (route, envoy_path)
            assert "X-Inference-Deployment" not in response.headers


async def test_an_allowed_answer_tells_envoy_to_remove_the_token(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    store = TokenStore(db)
    await _deployments(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    response = await service.check(issued.token, HOST, envoy_path="/v1/models/churn:predict")
    assert response.status == 200
    assert response.headers["x-envoy-auth-headers-to-remove"] == "authorization"
    assert "Authorization" not in response.headers  # what nginx copies onto the request


async def _redis_up(service: Instance) -> None:
    async with asyncio.timeout(5):
        while True:
            if "wm_inference_auth_redis_up 1.0" in await service.metrics():
                return
            await asyncio.sleep(0.05)


GARBAGE_HEADERS: list[dict[str, str]] = [
    {"Authorization": "Bearer " + "wmi_" + "A" * 5000},
    {"Authorization": "Bearer  wmi_ wmi_"},
    {"Authorization": "Basic dXNlcjpwYXNz"},
    {"Authorization": "Bearer wmi_aaaaaaaaaaaaaaaa_" + "b" * 43, "X-Original-URL": "::::"},
    {"X-Original-URL": "https://user@" + HOST + "/"},
    {"X-Original-URL": "https://[::1/"},
    {"X-Original-URL": "https://" + "a." * 400 + "/"},
    {"Host": "\u00e9.example.com"},
]


async def test_garbage_is_never_a_5xx(db: asyncpg.Pool, start_instance: Start) -> None:
    store = TokenStore(db)
    await _deployments(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    for headers in GARBAGE_HEADERS:
        for url in (service.url, f"{service.url}/x"):
            async with service.http.get(url, headers=headers) as response:
                assert response.status in (401, 403), (headers, response.status)
    # A valid token with hostile hosts: never an error. The route names the deployment; a
    # host naming no endpoint is no second opinion (200); without a route it is refused.
    for host in ("user@" + HOST, HOST + ":x", "%00", " " + HOST, HOST + ":99999999"):
        for url, expected in ((service.url, 403), (f"{service.url}/{CHURN}", 200)):
            async with service.http.get(
                url,
                headers={
                    "Authorization": f"Bearer {issued.token}",
                    "X-Original-URL": f"https://{host}/",
                },
            ) as response:
                assert response.status == expected, (url, host)
    # Raw bytes no client library would send.
    reader, writer = await asyncio.open_connection("127.0.0.1", int(service.base.rsplit(":")[-1]))
    writer.write(
        b"GET /internal/v1/inference-auth HTTP/1.1\r\nHost: a\r\n"
        b"Authorization: Bearer \xff\xfe\x00wmi_\r\nX-Original-URL: https://\xc3\x28/\r\n\r\n"
    )
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    assert status_line.split()[1] in (b"400", b"401"), status_line


async def test_revocation_and_rotation_reach_two_instances_within_a_second(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    store = TokenStore(db)
    await _deployments(store)
    first = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    second = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    instances = [await start_instance(), await start_instance()]
    for service in instances:  # cached on both
        assert await service.status(first.token, HOST) == 200
        assert await service.status(second.token, HOST) == 200

    await store.revoke(first.token_id, actor="t")
    for service in instances:
        await _until(lambda s=service: s.status(first.token, HOST), 401, within=1.0)

    rotated = await store.rotate(second.token_id, actor="t")
    for service in instances:
        await _until(lambda s=service: s.status(second.token, HOST), 401, within=1.0)
        assert await service.status(rotated.token, HOST) == 200


async def test_rotation_with_grace_keeps_the_old_token(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    store = TokenStore(db)
    await _deployments(store)
    old = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    assert await service.status(old.token, HOST) == 200
    new = await store.rotate(old.token_id, actor="t", grace_seconds=1.5)
    assert await service.status(new.token, HOST) == 200
    assert await service.status(old.token, HOST) == 200  # within the grace
    await _until(lambda: service.status(old.token, HOST), 401, within=3.0)
    assert await service.status(new.token, HOST) == 200


async def test_stale_cache_ends_after_the_configured_time(
    db: asyncpg.Pool, reader_url: str, start_instance: Start
) -> None:
    store = TokenStore(db)
    await _deployments(store)
    known = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    port = int(reader_url.rsplit("@", 1)[1].split("/")[0].rsplit(":", 1)[1])
    proxy = CuttableProxy(target_host="127.0.0.1", target_port=port)
    await proxy.start()
    try:
        proxied = reader_url.replace(f":{port}/", f":{proxy.port}/")
        service = await start_instance(DATABASE_URL=proxied, INFERENCE_AUTH_STALE_FOR=1.0)
        assert await service.status(known.token, HOST) == 200
        proxy.cut()
        await _until(lambda: service.status(known.token, HOST), 401, within=5.0)
    finally:
        await proxy.stop()


async def test_redis_down_checks_go_on_and_the_metric_says_so(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    store = TokenStore(db)
    await _deployments(store, rate_limit=1)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert "wm_inference_auth_redis_up 0.0" in await service.metrics()
    started = time.monotonic()
    statuses = [await service.status(issued.token, HOST) for _ in range(20)]
    assert statuses == [200] * 20  # no limit without Redis
    assert await service.status(new_token()[0], HOST) == 401
    assert time.monotonic() - started < 2.0


async def test_rate_limits_answer_429_with_retry_after(
    db: asyncpg.Pool, start_instance: Start, redis_url: str
) -> None:
    store = TokenStore(db)
    await _deployments(store, rate_limit=3)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    other = await store.issue(tenant="acme", model="fraud", environment="production", actor="t")
    service = await start_instance()
    await _redis_up(service)
    limited = None
    for _ in range(50):  # 3 per second: within one second the 4th is refused
        response = await service.check(issued.token, HOST)
        if response.status == 429:
            limited = response
            break
        assert response.status == 200
    assert limited is not None
    assert limited.headers["Retry-After"] == "1"
    assert await service.status(other.token, OTHER_HOST) == 200  # no limit configured there
    await _until(lambda: service.status(issued.token, HOST), 200, within=3.0)


async def test_a_token_over_its_own_limit_does_not_spend_its_deployments(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    """A noisy token refused by its own limit leaves the deployment's budget to the others:
    each round, 40 requests of the noisy token (5 per second allowed) then one of a quiet
    token (4 in all, within its own 5); the deployment allows 20 per second, so every quiet
    request is served."""
    store = TokenStore(db)
    await _deployments(store, rate_limit=20, token_rate_limit=5)
    noisy = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    quiet = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    await _redis_up(service)
    quiet_statuses = []
    noisy_statuses: list[int] = []
    for _ in range(4):
        noisy_statuses += await asyncio.gather(
            *(service.status(noisy.token, HOST) for _ in range(40))
        )
        quiet_statuses.append(await service.status(quiet.token, HOST))
    assert set(noisy_statuses) == {200, 429}
    assert quiet_statuses == [200] * 4


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST"])
async def test_any_method_is_checked(db: asyncpg.Pool, start_instance: Start, method: str) -> None:
    store = TokenStore(db)
    await _deployments(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    async with service.http.request(
        method,
        f"{service.url}/{CHURN}",
        headers={"Authorization": f"Bearer {issued.token}", "X-Original-URL": f"http://{HOST}/"},
    ) as response:
        assert response.status == 200


async def test_a_token_checked_before_is_answered_alike_by_the_shortcut(
    db: asyncpg.Pool, start_instance: Start
) -> None:
    """Once a token matched, the same token again takes a shortcut (no regex, no SHA-256):
    every answer stays the full path's. Same lookup id with another secret, a changed
    character, the wrong deployment, a non-ASCII character: all refused as before."""
    store = TokenStore(db)
    await _deployments(store)
    issued = await store.issue(tenant="acme", model="churn", environment="production", actor="t")
    service = await start_instance()
    assert [await service.status(issued.token, HOST) for _ in range(3)] == [200, 200, 200]
    lookup_prefix = issued.token[: len("wmi_") + 16 + 1]
    other_secret = lookup_prefix + new_token()[0][-43:]
    for token in (other_secret, issued.token[:-1] + "é", issued.token.upper()):
        assert await service.status(token, HOST) == 401, token
    assert await service.status(issued.token, OTHER_HOST) == 403
    assert await service.status(issued.token, HOST) == 200
    await store.revoke(issued.token_id, actor="t")
    await _until(lambda: service.status(issued.token, HOST), 401, within=1.0)
