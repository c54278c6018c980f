"""A Kourier-like gateway: one HTTP listener that routes by `Host` to a predictor's revisions
along its traffic split, and exports Envoy's and queue-proxy's request metrics.

A request whose `Host` (port dropped, case-folded) is one of a predictor's hosts goes to one
of its revisions, drawn by weight from the ISVC's `status.components.predictor.traffic` (a
`random.Random(seed)`: a test that sends requests one by one gets the same draws every run),
proxied to that revision's model server with the method, path, query, body and headers as
sent. A host no route has is answered 404 with an empty body, as Envoy answers an unknown
virtual host; a route with no ready revision 503 `no healthy upstream`. The gateway's own
hosts (`own_hosts`: its listen address, `localhost`, and KNATIVE_GATEWAY's default
`kourier-internal.kourier-system.svc.cluster.local` unless configured otherwise) serve
`GET /metrics` (Prometheus text) and `GET /ready`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from sim.serving.metrics import ServingMetrics

DEFAULT_OWN_HOSTS = ("kourier-internal.kourier-system.svc.cluster.local", "localhost")
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "upgrade", "host", "content-length"}
)


@dataclass(frozen=True)
class Backend:
    revision: str
    percent: int
    address: str  # "127.0.0.1:<port>"


@dataclass(frozen=True)
class Route:
    namespace: str
    service: str  # the predictor's Knative Service
    backends: tuple[Backend, ...]


def pick(backends: Sequence[Backend], draw: float) -> Backend | None:
    """The backend a draw in [0, 1) lands on, by percent (zero-percent backends never)."""
    total = sum(backend.percent for backend in backends)
    if total <= 0:
        return None
    point = draw * total
    for backend in backends:
        if backend.percent <= 0:
            continue
        if point < backend.percent:
            return backend
        point -= backend.percent
    return next(b for b in reversed(backends) if b.percent > 0)


def host_of(header: str) -> str:
    host = header.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Gateway:
    """The listener; `routes(host)` is the serving simulator's route table."""

    def __init__(
        self,
        routes: Callable[[str], Route | None],
        *,
        seed: int | None = None,
        own_hosts: Sequence[str] = DEFAULT_OWN_HOSTS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.routes = routes
        self.metrics = ServingMetrics()
        self.random = random.Random(seed)
        self.own_hosts = {host.lower() for host in own_hosts}
        self.clock = clock
        self.port = 0
        self.host = "127.0.0.1"
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def address(self) -> str:
        """`127.0.0.1:<port>`: what KNATIVE_GATEWAY resolves to here."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=30), auto_decompress=False
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        self.port = int(self._runner.addresses[0][1])
        self.own_hosts |= {self.host, self.address, "127.0.0.1", f"localhost:{self.port}"}

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Host", "")
        host = host_of(header)
        route = self.routes(host)
        if route is None:
            if host in self.own_hosts or header.lower() in self.own_hosts:
                return self._own(request)
            return web.Response(status=404)
        backend = pick(route.backends, self.random.random())
        if backend is None:
            return web.Response(status=503, text="no healthy upstream")
        return await self._proxy(request, route, backend)

    def _own(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/metrics":
            return web.Response(
                text=self.metrics.render(), content_type="text/plain", charset="utf-8"
            )
        if request.method == "GET" and request.path == "/ready":
            return web.Response(text="LIVE")
        return web.Response(status=404)

    async def _proxy(self, request: web.Request, route: Route, backend: Backend) -> web.Response:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = request.headers.get("Host", "")
        headers["Knative-Serving-Revision"] = backend.revision  # what the activator adds
        started = self.clock()
        body = await request.read()
        try:
            async with self._session.request(
                request.method,
                f"http://{backend.address}{request.path_qs}",
                headers=headers,
                data=body,
                allow_redirects=False,
            ) as upstream:
                payload = await upstream.read()
                status = upstream.status
                answer_headers = {
                    k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP
                }
        except (aiohttp.ClientError, TimeoutError):
            status, payload, answer_headers = 503, b"upstream connect error", {}
        elapsed_ms = (self.clock() - started) * 1000.0
        self.metrics.record(
            namespace=route.namespace,
            revision=backend.revision,
            service=route.service,
            code=status,
            elapsed_ms=elapsed_ms,
        )
        return web.Response(status=status, body=payload, headers=answer_headers)
