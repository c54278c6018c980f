"""Self-test of the nginx harness (sim/ingress.py), not of inference_auth: a trivial stand-in
auth endpoint started here shows that the rendered configuration sends the auth subrequest as
ingress-nginx does and applies its answer the way the tests of the real check rely on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sim.ingress import (
    AUTH_PATH,
    AUTH_SERVICE_HOST,
    CALLS,
    ExternalAuth,
    Nginx,
    Site,
    auth_location,
    model_backend,
    render_config,
    start_app,
)

pytestmark = pytest.mark.integration

HOST_A = "fraud-production.acme.models.test"
HOST_B = "churn-staging.acme.models.test"
SEEN = web.AppKey("seen", list)


def stand_in_auth() -> web.Application:
    """Allows `Bearer good-<host>` for that host only; answers a status named in the token."""

    async def check(request: web.Request) -> web.Response:
        request.app[SEEN].append(
            {"headers": dict(request.headers), "body": await request.read(), "path": request.path}
        )
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        host = request.headers.get("X-Original-URL", "").split("/")[2]
        if token.startswith("status-"):
            return web.Response(status=int(token.removeprefix("status-")))
        if token == f"good-{host}":
            return web.Response(status=200, headers={"X-Stand-In-Deployment": host})
        return web.Response(status=403 if token.startswith("good-") else 401)

    app = web.Application()
    app[SEEN] = []
    app.router.add_get(AUTH_PATH, check)
    return app


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[Nginx, web.Application, web.Application]]:
    auth_app, model_app = stand_in_auth(), model_backend()
    auth_runner, auth_port = await start_app(auth_app)
    model_runner, model_port = await start_app(model_app)
    sites = [Site(HOST_A, f"127.0.0.1:{model_port}"), Site(HOST_B, f"127.0.0.1:{model_port}")]
    auth = ExternalAuth(
        servers=(f"127.0.0.1:{auth_port}",), response_headers=("X-Stand-In-Deployment",)
    )
    try:
        async with Nginx(prefix=tmp_path / "nginx", sites=sites, auth=auth) as nginx:
            yield nginx, auth_app, model_app
    finally:
        await model_runner.cleanup()
        await auth_runner.cleanup()


async def predict(nginx: Nginx, *, host: str, token: str) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{nginx.url}/v1/models/fraud:predict?explain=1",
            json={"instances": [[1.0, 2.0]]},
            headers={"Host": host, "Authorization": f"Bearer {token}"},
        ) as answer,
    ):
        return answer.status, await answer.read()


async def test_the_auth_subrequest_is_what_ingress_nginx_sends(
    stack: tuple[Nginx, web.Application, web.Application],
) -> None:
    nginx, auth_app, model_app = stack
    status, body = await predict(nginx, host=HOST_A, token=f"good-{HOST_A}")
    assert status == 200
    assert b"predictions" in body
    (seen,) = auth_app[SEEN]
    headers = seen["headers"]
    assert seen["path"] == AUTH_PATH
    assert seen["body"] == b""
    assert headers["Host"] == AUTH_SERVICE_HOST
    assert headers["X-Original-URL"] == f"http://{HOST_A}/v1/models/fraud:predict?explain=1"
    assert headers["X-Original-Method"] == "POST"
    assert headers["Authorization"] == f"Bearer good-{HOST_A}"
    assert headers["X-Auth-Request-Redirect"] == "/v1/models/fraud:predict?explain=1"
    assert "Content-Length" not in headers
    # The model sees the client's host and the deployment the check named.
    calls = model_app[CALLS]
    assert calls.count == 1
    assert calls.last_headers["Host"] == HOST_A
    assert calls.last_headers["X-Stand-In-Deployment"] == HOST_A
    assert f"deployment={HOST_A}" in await _flushed_log(nginx)


async def _flushed_log(nginx: Nginx) -> str:
    await nginx.stop()  # the access log is buffered; stopping flushes it
    return nginx.access_log.read_text()


@pytest.mark.parametrize(("token", "expected"), [("bad", 401), (f"good-{HOST_B}", 403)])
async def test_refusals_reach_the_client_and_never_the_model(
    stack: tuple[Nginx, web.Application, web.Application], token: str, expected: int
) -> None:
    nginx, _, model_app = stack
    status, _ = await predict(nginx, host=HOST_A, token=token)
    assert status == expected
    assert model_app[CALLS].count == 0


@pytest.mark.parametrize(("answer", "expected"), [(429, 500), (503, 500), (302, 500)])
async def test_other_auth_statuses_become_500_as_nginx_documents(
    stack: tuple[Nginx, web.Application, web.Application], answer: int, expected: int
) -> None:
    nginx, _, model_app = stack
    status, _ = await predict(nginx, host=HOST_A, token=f"status-{answer}")
    assert status == expected
    assert model_app[CALLS].count == 0


def test_location_names_follow_ingress_nginx() -> None:
    assert auth_location("/", "Prefix") == "/_external-auth-Lw-Prefix"
    conf = render_config(
        prefix=Path("/p"),
        port=1,
        sites=[Site(HOST_A, "127.0.0.1:2")],
        auth=ExternalAuth(servers=("127.0.0.1:3",), response_headers=("X-A-B",)),
    )
    assert "auth_request_set $authHeader0 $upstream_http_x_a_b;" in conf
    assert "proxy_set_header 'X-A-B' $authHeader0;" in conf
