"""The check served by uvicorn (httptools on uvloop) instead of inference_auth/http_server.py: the
maintained-server candidate `bench/inference_auth.py` measures in the same run.

A thin ASGI adapter over the same parts as the runner (`inference_auth_parts`, its token
listener and Redis probe) and the same decision (`Checker.check_now`, else `routes.decide`);
routes as http_server.py. Needs uvicorn, which the project does not depend on: the bench puts it
on PYTHONPATH from `.run/extra` (`pip install --target .run/extra uvicorn`).

    python bench/_inference_auth_uvicorn.py   # reads the deployable's settings (HTTP_PORT...)
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference_auth.check import UNAUTHORIZED, Checker
from inference_auth.routes import check_route, decide
from inference_auth.runner import inference_auth_parts
from shared.config import Settings
from shared.tasks import Supervisor

Scope = MutableMapping[str, Any]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_EXTRA: dict[int, list[tuple[bytes, bytes]]] = {
    401: [(b"www-authenticate", b"Bearer")],
    429: [(b"retry-after", b"1")],
}
_BODY: dict[str, Any] = {"type": "http.response.body", "body": b""}


def asgi(checker: Checker) -> Callable[[Scope, Any, Send], Awaitable[None]]:
    async def app(scope: Scope, receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            return
        authorization: str | None = None
        original: str | None = None
        host: str | None = None
        tokens = 0
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                tokens += 1
            elif name == b"x-original-url":
                original = value.decode("latin-1")
            elif name == b"host":
                host = value.decode("latin-1")
        target = scope["path"]
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        routed = check_route(target, original_url=original, host=host)
        if routed is None:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send(_BODY)
            return
        deployment, host = routed
        if tokens > 1:
            decision = UNAUTHORIZED
        else:
            decision = checker.check_now(
                authorization, deployment=deployment, host=host
            ) or await decide(checker, authorization, deployment=deployment, host=host)
        headers = _EXTRA.get(decision.status, [])
        if decision.status == 200:
            headers = [(b"x-inference-deployment", decision.deployment.encode())]
        await send({"type": "http.response.start", "status": decision.status, "headers": headers})
        await send(_BODY)

    return app


async def serve(settings: Settings) -> None:
    import uvicorn

    workers = Supervisor(name="inference-auth-uvicorn")
    async with inference_auth_parts(settings) as parts:
        workers.spawn("token_listener", parts.listener.run)
        workers.spawn("redis_probe", parts.guard.probe_loop)
        config = uvicorn.Config(
            asgi(parts.checker),
            host="127.0.0.1",
            port=settings.HTTP_PORT,
            http="httptools",
            loop="none",
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_keep_alive=75,
            backlog=1024,
        )
        try:
            await uvicorn.Server(config).serve()
        finally:
            await workers.shutdown(2.0)


def main() -> None:
    uvloop.run(serve(Settings()))


if __name__ == "__main__":
    main()
