"""Fixtures for inference_auth and its token store: a LOGIN role with only the rights of
``wm_inference_auth`` (what production gives the deployable), and its DSN."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import asyncpg
import pytest

from sim.ports import free_port
from tests.conftest import ADMIN_DSN


@pytest.fixture
async def reader_url(database_url: str) -> AsyncIterator[str]:
    """A DSN on the test database as a LOGIN member of ``wm_inference_auth``."""
    role = f"wm_ia_test_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE wm_inference_auth")
    finally:
        await admin.close()
    scheme, _, rest = database_url.partition("://")
    _, _, host_and_db = rest.partition("@")
    try:
        yield f"{scheme}://{role}@{host_and_db}"
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
            )
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await admin.close()


@pytest.fixture
async def admin_database() -> AsyncIterator[tuple[str, str]]:
    """DSNs of two empty databases created for one test and dropped after it."""
    names = [f"wm_ia_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base, _, _ = ADMIN_DSN.rpartition("/")
    try:
        yield f"{base}/{names[0]}", f"{base}/{names[1]}"
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        try:
            for name in names:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes


_OF_HOST: Final = "of-host"


def route_of(host: str | None) -> str | None:
    """``tenant/model/environment`` of an endpoint host (``<model>-<environment>.<tenant>.
    ...``), what the platform writes into that host's Ingress; None for any other host."""
    if host is None:
        return None
    labels = host.lower().partition(":")[0].split(".")
    model, hyphen, environment = labels[0].rpartition("-")
    if len(labels) < 3 or not hyphen:
        return None
    return f"{labels[1]}/{model}/{environment}"


@dataclass
class Instance:
    """One inference_auth served in this process by its runner (``inference_auth.runner.run``)."""

    url: str  # the check's path without a deployment
    base: str  # http://127.0.0.1:<HTTP_PORT>
    health: str  # http://127.0.0.1:<HEALTH_PORT>
    http: aiohttp.ClientSession

    async def check(
        self,
        token: str | None,
        host: str | None,
        *,
        route: str | None = _OF_HOST,
        envoy_path: str | None = None,
    ) -> Answer:
        """A check as nginx (``X-Original-URL``) or Envoy (``envoy_path``: the client's path
        appended, ``Host``) sends it, for a route naming deployment ``route`` (by default the
        one ``host`` names, as its Ingress would; None: the bare path, naming none)."""
        if route == _OF_HOST:
            route = route_of(host)
        url = self.url if route is None else f"{self.url}/{route}"
        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if envoy_path is None:
            if host is not None:
                headers["X-Original-URL"] = f"https://{host}/v1/models/m:predict"
        else:
            url = f"{url}{envoy_path}"
            if host is not None:
                headers["Host"] = host
        async with self.http.get(url, headers=headers) as response:
            return Answer(response.status, response.headers, await response.read())

    async def status(self, token: str | None, host: str | None) -> int:
        return (await self.check(token, host)).status

    async def metrics(self) -> str:
        async with self.http.get(f"{self.health}/metrics") as response:
            return await response.text()


@pytest.fixture
async def start_instance(
    settings_factory: Callable[..., Any], reader_url: str, redis_url: str
) -> AsyncIterator[Callable[..., Awaitable[Instance]]]:
    """Start inference_auth instances (as the reader role, on the test Redis); all stopped
    at the end of the test."""
    from inference_auth.runner import run
    from shared.tasks import Supervisor

    supervisors: list[Supervisor] = []
    http = aiohttp.ClientSession()

    async def start(**overrides: Any) -> Instance:
        port, health_port = free_port(), free_port()
        values: dict[str, Any] = {
            "DATABASE_URL": reader_url,
            "REDIS_URL": redis_url,
            "HTTP_PORT": port,
            "HEALTH_PORT": health_port,
        }
        values.update(overrides)
        settings = settings_factory(**values)
        supervisor = Supervisor(name="inference-auth-test")
        supervisors.append(supervisor)
        supervisor.spawn("main", lambda: run(settings, supervisor))
        base = f"http://127.0.0.1:{port}"
        instance = Instance(
            f"{base}/internal/v1/inference-auth", base, f"http://127.0.0.1:{health_port}", http
        )
        async with asyncio.timeout(10):
            while True:
                try:
                    async with http.get(f"{instance.health}/readyz") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        return instance

    try:
        yield start
    finally:
        for supervisor in supervisors:
            await supervisor.shutdown(2.0)
        await http.close()
