"""The two forms in which ingress-nginx renders `auth-url` (sim/ingress.py), through real nginx
and a stand-in check that records each connection it is asked on: by default (`auth_request`)
every check opens a new connection; with `auth-keepalive` (HTTP/2 off) the checks go through
ingress-nginx's Lua subrequest over kept-alive connections. The bench measures both, and each
against a zero-cost check (a second nginx answering 200) for the ceiling the form allows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from shared.inference_tokens import DeploymentRef
from sim.ingress import (
    AUTH_PATH,
    CALLS,
    ExternalAuth,
    Nginx,
    Site,
    deployment_sites,
    lua_available,
    model_backend,
    start_app,
)

pytestmark = pytest.mark.integration

HOST = "fraud-production.acme.models.test"
PEERS = web.AppKey("peers", list)


def recording_auth() -> web.Application:
    """Allows `Bearer good` (naming the deployment in a header), refuses the rest (401)."""

    async def check(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        request.app[PEERS].append(peer)
        if request.headers.get("Authorization") == "Bearer good":
            return web.Response(headers={"X-Inference-Deployment": "acme/fraud/production"})
        return web.Response(status=401)

    app = web.Application()
    app[PEERS] = []
    app.router.add_get(AUTH_PATH, check)
    return app


@pytest.fixture
async def apps() -> AsyncIterator[tuple[web.Application, int, web.Application, int]]:
    auth_app, model_app = recording_auth(), model_backend()
    auth_runner, auth_port = await start_app(auth_app)
    model_runner, model_port = await start_app(model_app)
    try:
        yield auth_app, auth_port, model_app, model_port
    finally:
        await auth_runner.cleanup()
        await model_runner.cleanup()


async def predict(nginx: Nginx, token: str) -> int:
    headers = {"Host": HOST, "Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{nginx.url}/v1/models/fraud:predict", json={}, headers=headers) as answer,
    ):
        return answer.status


@pytest.mark.parametrize("keepalive", [0, 16], ids=["default", "auth-keepalive"])
async def test_each_form_checks_every_request_and_only_the_keepalive_form_reuses_connections(
    tmp_path: Path, apps: tuple[web.Application, int, web.Application, int], keepalive: int
) -> None:
    if keepalive and not lua_available():
        pytest.fail("the auth-keepalive form needs libnginx-mod-http-lua (ensure-services.sh)")
    auth_app, auth_port, model_app, model_port = apps
    auth = ExternalAuth(servers=(f"127.0.0.1:{auth_port}",), keepalive=keepalive)
    async with Nginx(
        prefix=tmp_path / "nginx", sites=[Site(HOST, f"127.0.0.1:{model_port}")], auth=auth
    ) as nginx:
        statuses = [await predict(nginx, "good") for _ in range(5)]
        assert await predict(nginx, "bad") == 401
    assert statuses == [200] * 5
    assert model_app[CALLS].count == 5
    peers = auth_app[PEERS]
    assert len(peers) == 6  # every request checked
    assert len(set(peers)) == (1 if keepalive else 6)


async def test_auth_keepalive_with_a_response_header_fails_every_allowed_request(
    tmp_path: Path, apps: tuple[web.Application, int, web.Application, int]
) -> None:
    """As ingress-nginx renders it: its template names the header's variable $authHeader0, its
    Lua writes $authHeader1 (it counts from 1), which does not exist: a 500, the model never
    asked. So `auth-response-headers` cannot be combined with `auth-keepalive`."""
    if not lua_available():
        pytest.fail("the auth-keepalive form needs libnginx-mod-http-lua (ensure-services.sh)")
    _, auth_port, model_app, model_port = apps
    auth = ExternalAuth(
        servers=(f"127.0.0.1:{auth_port}",),
        keepalive=16,
        response_headers=("X-Inference-Deployment",),
    )
    async with Nginx(
        prefix=tmp_path / "nginx", sites=[Site(HOST, f"127.0.0.1:{model_port}")], auth=auth
    ) as nginx:
        assert await predict(nginx, "good") == 500
        assert await predict(nginx, "bad") == 401
    assert model_app[CALLS].count == 0


async def test_the_zero_cost_check_allows_every_request_naming_the_deployment_of_its_route(
    tmp_path: Path, apps: tuple[web.Application, int, web.Application, int]
) -> None:
    """The bench's ceiling: a second nginx stands in for the check, with no token logic."""
    _, _, model_app, model_port = apps
    ref = DeploymentRef(tenant="acme", model="fraud", environment="production")
    sites = deployment_sites([ref], domain="models.test", backend=f"127.0.0.1:{model_port}")
    assert sites[0].host == HOST
    async with Nginx(prefix=tmp_path / "check", sites=(), auth=None, zero_cost_check=True) as check:
        async with aiohttp.ClientSession() as http, http.get(f"{check.url}{AUTH_PATH}") as answer:
            assert answer.status == 403  # names no deployment
        auth = ExternalAuth(servers=(f"127.0.0.1:{check.port}",))
        async with Nginx(prefix=tmp_path / "nginx", sites=sites, auth=auth) as nginx:
            assert [await predict(nginx, token) for token in ("good", "bad")] == [200, 200]
    assert model_app[CALLS].count == 2
    assert model_app[CALLS].last_headers["X-Inference-Deployment"] == "acme/fraud/production"
