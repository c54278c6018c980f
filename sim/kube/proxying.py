"""Service-proxy handlers: what answers `/api/v1/namespaces/{ns}/services/{name}/proxy/...`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from sim.kube.types import ApiError

ProxyHandler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]


class ProxyRegistry:
    """Handlers by namespace, service and port (name or number)."""

    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str], dict[str, ProxyHandler]] = {}

    def register(
        self, namespace: str, service: str, port: str, handler: ProxyHandler
    ) -> Callable[[], None]:
        """Serve `/api/v1/namespaces/{ns}/services/[scheme:]{service}:{port}/proxy/{path}`
        with `handler(request, path)` (`path` without its leading slash); returns unregister."""
        ports = self._handlers.setdefault((namespace, service), {})
        ports[str(port)] = handler

        def unregister() -> None:
            if ports.get(str(port)) is handler:
                del ports[str(port)]

        return unregister

    def resolve(self, namespace: str, name: str) -> ProxyHandler:
        """The handler for a proxy name `[scheme:]service[:port]`; 503 when none."""
        parts = name.split(":")
        if len(parts) == 3 or (len(parts) == 2 and parts[0] in ("http", "https")):
            parts = parts[1:]
        service, port = parts[0], (parts[1] if len(parts) > 1 else "")
        ports = self._handlers.get((namespace, service), {})
        handler = ports.get(port) if port else next(iter(ports.values()), None)
        if handler is None:
            raise ApiError(
                503,
                "ServiceUnavailable",
                f'no endpoints available for service "{name}"',
                details={"name": name, "kind": "services"},
            )
        return handler
