"""The health side server every deployable runs on HEALTH_PORT.

- ``GET /healthz``: 200 while the process and its event loop answer (liveness).
- ``GET /readyz``: 200 only when every registered readiness check passes; otherwise 503 with
  ``{"ready": false, "failures": {<check>: <reason>}}`` (readiness).
- ``GET /metrics``: the Prometheus exposition of a registry (the default one unless given).

It is its own small aiohttp application on its own port so that probes and scrapes never queue
behind the deployable's traffic, and so that the deployables without an HTTP API have one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import structlog
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

from shared.config import Settings
from shared.errors import WorkflowManagerError

log = structlog.get_logger(__name__)

# A check returns None when ready, or raises (WorkflowManagerError with a reason, ideally).
ReadinessCheck = Callable[[], Awaitable[None]]


@dataclass
class Readiness:
    """The named checks ``/readyz`` runs, each bounded by ``timeout`` seconds."""

    timeout: float = 2.0
    checks: dict[str, ReadinessCheck] = field(default_factory=dict)
    draining: bool = False  # set while the server stops: report not ready at once

    def add(self, name: str, check: ReadinessCheck) -> None:
        if name in self.checks:
            raise ValueError(f"a readiness check named {name!r} is already registered")
        self.checks[name] = check

    async def failures(self) -> dict[str, str]:
        """Run every check concurrently; map each failing check to its reason."""
        if self.draining:
            return {"process": "shutting down"}
        names = list(self.checks)
        outcomes = await asyncio.gather(*(self._run(self.checks[name]) for name in names))
        return {name: reason for name, reason in zip(names, outcomes, strict=True) if reason}

    async def _run(self, check: ReadinessCheck) -> str | None:
        try:
            async with asyncio.timeout(self.timeout):
                await check()
        except TimeoutError:
            return f"timed out after {self.timeout:g}s"
        except WorkflowManagerError as exc:
            return exc.message
        except Exception as exc:
            # A probe must answer with the failing check named, not a bare 500.
            log.warning("readiness_check_error", error=type(exc).__name__, exc_info=exc)
            return f"{type(exc).__name__}: {exc}"
        return None


READINESS = web.AppKey("readiness", Readiness)
METRICS_REGISTRY = web.AppKey("metrics_registry", CollectorRegistry)
STARTED_AT = web.AppKey("started_at", float)


async def _healthz(request: web.Request) -> web.Response:
    uptime = time.monotonic() - request.app[STARTED_AT]
    return web.json_response({"alive": True, "uptime_seconds": round(uptime, 3)})


async def _readyz(request: web.Request) -> web.Response:
    readiness = request.app[READINESS]
    failures = await readiness.failures()
    if failures:
        return web.json_response({"ready": False, "failures": failures}, status=503)
    return web.json_response({"ready": True, "checks": sorted(readiness.checks)})


async def _metrics(request: web.Request) -> web.Response:
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(request.app[METRICS_REGISTRY])
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    app[STARTED_AT] = time.monotonic()
    yield
    # Stopping: any probe still in flight learns it now rather than from a refused connect.
    app[READINESS].draining = True


def create_app(readiness: Readiness, *, registry: CollectorRegistry = REGISTRY) -> web.Application:
    """The health application (an app factory: dependencies come in as arguments)."""
    app = web.Application()
    app[READINESS] = readiness
    app[METRICS_REGISTRY] = registry
    app.cleanup_ctx.append(_lifecycle)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


class HealthServer:
    """``async with HealthServer(port=...) as health``: serve until the block ends.

    ``port=0`` binds a free port; ``health.port`` is the bound one.
    """

    def __init__(
        self,
        *,
        port: int,
        host: str = "0.0.0.0",
        readiness: Readiness | None = None,
        registry: CollectorRegistry = REGISTRY,
        shutdown_timeout: float = 5.0,
    ) -> None:
        self.readiness = readiness if readiness is not None else Readiness()
        self._host = host
        self._requested_port = port
        self._registry = registry
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, *, readiness: Readiness | None = None, host: str = "0.0.0.0"
    ) -> HealthServer:
        """The server on ``settings.HEALTH_PORT`` (0: a free port)."""
        return cls(port=settings.HEALTH_PORT, host=host, readiness=readiness)

    def add_check(self, name: str, check: ReadinessCheck) -> None:
        """Register a readiness check (before or after start)."""
        self.readiness.add(name, check)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the health server is not started")
        return self._port

    async def start(self) -> None:
        app = create_app(self.readiness, registry=self._registry)
        runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=self._shutdown_timeout, handle_signals=False
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._requested_port, reuse_address=True)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = _bound_port(runner.addresses)
        log.info("health_server_started", host=self._host, port=self._port)

    async def stop(self) -> None:
        if self._runner is None:
            return
        runner, self._runner = self._runner, None
        self.readiness.draining = True
        await runner.cleanup()
        log.info("health_server_stopped", port=self._port)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _bound_port(addresses: list[object]) -> int:
    for address in addresses:
        if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int):
            return address[1]
    raise RuntimeError(f"the health server is bound to no TCP port: {addresses!r}")
