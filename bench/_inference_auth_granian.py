"""The check served by granian's RSGI (a Rust HTTP/1.1 server, hyper) instead of
inference_auth/http_server.py: the second maintained-server candidate `bench/inference_auth.py`
measures in the same run.

A thin RSGI adapter over the same parts as the runner (`inference_auth_parts`, its token
listener and Redis probe) and the same decision (`Checker.check_now`, else `routes.decide`);
routes as http_server.py, in granian's embedded server (one worker in this process's loop).
Needs granian, which the project does not depend on: the bench puts it on PYTHONPATH from
`.run/extra` (`pip install --target .run/extra granian`). A second `Authorization` header is
not looked for here (RSGI's headers give the first), unlike http_server.py.

    python bench/_inference_auth_granian.py   # reads the deployable's settings (HTTP_PORT...)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference_auth.check import Checker
from inference_auth.routes import check_route, decide
from inference_auth.runner import inference_auth_parts
from shared.config import Settings
from shared.tasks import Supervisor

_EXTRA: dict[int, list[tuple[str, str]]] = {
    401: [("www-authenticate", "Bearer")],
    429: [("retry-after", "1")],
}


class CheckApp:
    def __init__(self, checker: Checker) -> None:
        self._checker = checker

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        headers = scope.headers
        authorization = headers.get("authorization")
        routed = check_route(
            scope.path,
            original_url=headers.get("x-original-url"),
            host=scope.authority or headers.get("host"),
        )
        if routed is None:
            proto.response_empty(404, [])
            return
        deployment, host = routed
        checker = self._checker
        decision = checker.check_now(
            authorization, deployment=deployment, host=host
        ) or await decide(checker, authorization, deployment=deployment, host=host)
        extra = _EXTRA.get(decision.status, [])
        if decision.status == 200:
            extra = [("x-inference-deployment", decision.deployment)]
        proto.response_empty(decision.status, extra)


async def serve(settings: Settings) -> None:
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server.embed import Server

    workers = Supervisor(name="inference-auth-granian")
    async with inference_auth_parts(settings) as parts:
        workers.spawn("token_listener", parts.listener.run)
        workers.spawn("redis_probe", parts.guard.probe_loop)
        server = Server(
            CheckApp(parts.checker),
            address="127.0.0.1",
            port=settings.HTTP_PORT,
            interface=Interfaces.RSGI,
            http=HTTPModes.http1,
            http1_settings=HTTP1Settings(header_read_timeout=10_000),
            backlog=1024,
            log_access=False,
            log_level=LogLevels.warning,
        )
        try:
            await server.serve()
        finally:
            await workers.shutdown(2.0)


def main() -> None:
    uvloop.run(serve(Settings()))


if __name__ == "__main__":
    main()
