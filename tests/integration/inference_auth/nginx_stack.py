"""The stack the through-nginx tests drive: two real `wm-inference-auth` processes (their
PostgreSQL and Redis each behind a CuttableProxy), a stand-in model server, and one real nginx
per replica configured as ingress-nginx renders the deployments' Ingress objects (built by
`shared.inference_routes.inference_ingress`, each `auth-url` naming its deployment; rendered by
sim/ingress.py), so a test can watch each replica's answer through nginx. ``stack`` is a
fixture (imported by the tests)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import pytest

from shared.db.inference_tokens import TokenStore
from shared.inference_tokens import DeploymentRef, endpoint_host
from sim.ingress import (
    CALLS,
    BackendCalls,
    ExternalAuth,
    Nginx,
    deployment_sites,
    free_port,
    model_backend,
)
from sim.ingress import start_app as start_web_app
from tests.integration.faults import CuttableProxy

DOMAIN = "models.example.test"
DEPLOYMENT_HEADER = "X-Inference-Deployment"
ROOT = Path(__file__).resolve().parents[3]
# (tenant, model, environment) of the deployments behind nginx: the same model name in two
# tenants, two models of one tenant, one model in two environments.
DEPLOYMENTS = (
    ("acme", "fraud", "production"),
    ("acme", "churn", "production"),
    ("globex", "fraud", "production"),
    ("acme", "churn", "staging"),
)


def _through(url: str, port: int) -> str:
    """The URL with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")
    auth = f"{netloc[0]}@" if netloc[1] else ""
    return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{port}"))


@dataclass
class Stack:
    store: TokenStore
    replicas: list[Nginx]  # one nginx per inference_auth process
    backend: BackendCalls
    postgres: CuttableProxy
    redis: CuttableProxy
    logs: list[Path]

    def host(self, *, tenant: str, model: str, environment: str) -> str:
        return endpoint_host(tenant=tenant, model=model, environment=environment, domain=DOMAIN)

    async def predict(self, replica: int, *, host: str, token: str | None) -> int:
        """POST a prediction through the replica's nginx; the status the client sees."""
        headers = {"Host": host}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        url = f"{self.replicas[replica].url}/v1/models/m:predict"
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, json={"instances": [[1, 2]]}, headers=headers) as answer,
        ):
            await answer.read()
            return answer.status

    async def raw(self, replica: int, request: bytes) -> int:
        """Send `request` as written (an absolute-form request line, headers a client library
        would not send) to the replica's nginx; the status it answers."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.replicas[replica].port)
        try:
            writer.write(request)
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 10)
        finally:
            writer.close()
        return int(status_line.split()[1])

    async def until(self, expected: int, *, host: str, token: str, within: float) -> float:
        """Poll every replica until each answers `expected`; the seconds it took. Fails the
        test past `within` seconds."""
        began = time.monotonic()
        pending = set(range(len(self.replicas)))
        while pending:
            for replica in sorted(pending):
                if await self.predict(replica, host=host, token=token) == expected:
                    pending.discard(replica)
            elapsed = time.monotonic() - began
            if pending and elapsed > within:
                pytest.fail(f"replicas {sorted(pending)} not {expected} after {elapsed:.2f} s")
            await asyncio.sleep(0.02)
        return time.monotonic() - began


def _spawn(env: dict[str, str], *, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "inference_auth"],
        env=env,
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def _tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def _start_replica(env: dict[str, str], *, log: Path) -> subprocess.Popen[bytes]:
    process = _spawn(env, log=log)
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while True:
            if process.poll() is not None:
                pytest.fail(f"inference_auth exited {process.returncode}: {_tail(log)}")
            try:
                async with http.get(f"http://127.0.0.1:{env['HEALTH_PORT']}/readyz") as answer:
                    if answer.status == 200:
                        return process
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"inference_auth not ready: {_tail(log)}")
            await asyncio.sleep(0.1)


@pytest.fixture
async def stack(
    db: asyncpg.Pool, reader_url: str, redis_url: str, tmp_path: Path
) -> AsyncIterator[Stack]:
    """inference_auth connects as a LOGIN member of `wm_inference_auth` (conftest.py), as in
    production; the test writes tokens through the store on the owner's pool."""
    postgres = CuttableProxy(target_host="127.0.0.1", target_port=urlsplit(reader_url).port or 0)
    redis = CuttableProxy(target_host="127.0.0.1", target_port=urlsplit(redis_url).port or 6379)
    await postgres.start()
    await redis.start()
    backend_app = model_backend()
    backend_runner, backend_port = await start_web_app(backend_app)
    processes: list[subprocess.Popen[bytes]] = []
    replicas: list[Nginx] = []
    logs: list[Path] = []
    try:
        store = TokenStore(db)
        for tenant, model, environment in DEPLOYMENTS:
            await store.register_deployment(
                tenant=tenant, model=model, environment=environment, domain=DOMAIN
            )
        sites = deployment_sites(
            [DeploymentRef(*deployment) for deployment in DEPLOYMENTS],
            domain=DOMAIN,
            backend=f"127.0.0.1:{backend_port}",
        )
        for number in range(2):
            http_port, health_port = free_port(), free_port()
            env = {
                **os.environ,
                "DATABASE_URL": _through(reader_url, postgres.port),
                "REDIS_URL": _through(redis_url, redis.port),
                "ML_SERVING_DOMAIN": DOMAIN,
                "HTTP_PORT": str(http_port),
                "HEALTH_PORT": str(health_port),
                "LOG_JSON": "true",
                "POD_NAME": f"inference-auth-{number}",
            }
            logs.append(tmp_path / f"inference_auth_{number}.log")
            processes.append(await _start_replica(env, log=logs[-1]))
            nginx = Nginx(
                prefix=tmp_path / f"nginx_{number}",
                sites=sites,
                auth=ExternalAuth(servers=(f"127.0.0.1:{http_port}",)),
            )
            await nginx.start()
            replicas.append(nginx)
        yield Stack(
            store=store,
            replicas=replicas,
            backend=backend_app[CALLS],
            postgres=postgres,
            redis=redis,
            logs=logs,
        )
    finally:
        for nginx in replicas:
            await nginx.stop()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                await asyncio.to_thread(process.wait, 15)
            except subprocess.TimeoutExpired:
                process.kill()
        await backend_runner.cleanup()
        await redis.stop()
        await postgres.stop()
